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
