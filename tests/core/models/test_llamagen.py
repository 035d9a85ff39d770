"""The LlamaGen adapter beyond the GPT and VQ ports: views of one model at other grids (self-drafting)."""
from dataclasses import replace

import pytest
import torch

from mulosd_core.engine import generate
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
