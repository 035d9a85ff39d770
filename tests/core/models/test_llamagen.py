"""The LlamaGen adapter beyond the GPT and VQ ports: views of one model at other grids (self-drafting)."""
from dataclasses import replace

import pytest
import torch

from mulosd_core.decode import generate
from mulosd_core.presets import mulo_islands
from mulosd_core.testing import tiny_model, tiny_vq


def test_at_grid_is_a_view_of_the_same_weights():
    """Self-drafting: the target at a smaller grid shares its weights (no copy) and drafts for it."""
    target = tiny_model(4, 1, vq=tiny_vq(0, 16), dim=16)
    target.family = "scenes"
    low = target.at_grid(2)
    assert low.gpt is target.gpt and low.vq is target.vq
    assert (low.grid, low.num_tokens, low.family) == (2, 4, "scenes")
    assert low.codebook_id() == target.codebook_id() and low.name.endswith("@2")
    method = replace(mulo_islands(None), rows_per_step=1)
    res = generate(target, torch.tensor([1]), method=method, drafter=low, seed=0, decode=False)
    assert res.stats.drafter_calls > 0 and res.tokens.shape == (1, 16)
    with pytest.raises(ValueError, match="grid: expected a positive token grid, got 0"):
        target.at_grid(0)


def test_self_drafter_is_the_target_at_a_fraction_of_its_grid():
    from mulosd_core.memory import weight_bytes
    from mulosd_core.models.llamagen import self_drafter
    vq = tiny_vq(0, 16)
    target, other = tiny_model(4, 1, vq=vq, dim=16), tiny_model(2, 2, vq=vq, dim=16)
    drafter = self_drafter(target, 2)
    assert drafter.gpt is target.gpt and drafter.grid == 2 and "(self)" in drafter.name
    # weights in memory: the self-drafter adds nothing, a second model adds its own
    alone = weight_bytes(target)
    assert alone > 0 and weight_bytes(target, drafter) == alone
    assert weight_bytes(target, other) == alone + weight_bytes(other)
    for bad, msg in ((1, r"ratio: expected a whole number >= 2"), (2.0, "ratio: expected a whole number"),
                     (3, "grid 4 is not divisible by 3")):
        with pytest.raises(ValueError, match=msg):
            self_drafter(target, bad)
    with pytest.raises(ValueError, match="self-drafting needs a LlamaGen-format target"):
        self_drafter(object(), 2)


def test_an_early_exit_view_runs_the_first_blocks_only_with_a_cache_of_its_own_depth():
    """The self-drafter of a target trained to exit early at the low grid: the first k blocks, the shared
    norm and head, a KV cache of k blocks; its cached logits equal the teacher-forced early exit's."""
    target = tiny_model(4, 1, vq=tiny_vq(0, 16), dim=16, n_layer=3)
    low = target.at_grid(2, layers=1)
    assert low.gpt is target.gpt and low.exit_layers == 1 and "first 1 of 3 layers" in low.describe()
    assert low.num_blocks == target.num_blocks == 3                   # the exit runs fewer; the model has them all
    assert target.at_grid(2, layers=3).exit_layers is None          # all blocks: no exit
    cache = low.new_cache(1)
    assert len(cache.k) == 1 and low.cache_bytes(1) == cache.nbytes() < target.at_grid(2).cache_bytes(1)
    tokens = torch.tensor([[3, 1, 4, 1]])
    with torch.no_grad():
        cached = torch.cat([low.prefill(low.condition_rows(torch.tensor([2]), cfg=False), cache)[:, None],
                            low.forward_tokens(tokens[:, :3], torch.arange(3), cache)], 1)
        full = target.gpt(tokens, torch.tensor([2]), 2, layers=1)
        deep = target.gpt(tokens, torch.tensor([2]), 2)
    assert (cached - full).abs().max().item() <= 1e-5 and (full - deep).abs().max().item() > 1e-3
    for bad in (0, 4, 1.5, True):
        with pytest.raises(ValueError, match=r"layers: expected a whole number of blocks from 1 to 3"):
            target.at_grid(2, layers=bad)


def test_self_drafter_follows_the_exit_the_checkpoint_was_trained_for():
    from mulosd_core.models.llamagen import self_drafter
    target = tiny_model(4, 1, vq=tiny_vq(0, 16), dim=16, n_layer=3)
    assert self_drafter(target).exit_layers is None and self_drafter(target).grid == 2   # nothing recorded
    target.self_draft = (2, 2)                       # trained to draft at grid 2 exiting after 2 blocks
    d = self_drafter(target)
    assert (d.grid, d.exit_layers, d.self_draft) == (2, 2, (2, 2)) and "2 of 3 blocks" in d.name
    assert self_drafter(target, 2, 3).exit_layers is None          # a number overrides the record
    assert self_drafter(target, 2, 1).exit_layers == 1
    assert self_drafter(target, 4).exit_layers is None             # another grid than the trained one: all blocks
    target.self_draft = (1, 2)
    assert self_drafter(target).grid == 1                           # the recorded grid sets the ratio
