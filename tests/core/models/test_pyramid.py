"""The resolution pyramid of the scenes family (docs/DESIGN.md section 3.8): the 128 px member (32 x 32 tokens)
drafted by the 64 px target (r = 2) and the 32 px drafter (r = 4). CI's quick check of the 128 px pair: it
loads, pairs, finds the learned upsampler for each ratio, generates, and its memory is estimated and refused
before any model runs."""
from __future__ import annotations

import json
import os

import pytest
import torch

from mulosd_core import memory, presets
from mulosd_core.decode import generate
from mulosd_core.models.registry import embedded_dir, embedded_path, load_embedded
from mulosd_core.train.token_stats import distribution_figures, raw_next_token_probs
from mulosd_core.upsample import UpsamplerConfig, embedded_upsampler


@pytest.fixture(scope="module")
def pyramid():
    big = load_embedded("target", family="scenes128")
    return {32: big, 16: load_embedded("target", vq=big.vq), 8: load_embedded("drafter", vq=big.vq)}


def test_the_128_px_member_shares_the_codebook_and_is_a_real_ar_model(pyramid):
    big = pyramid[32]
    assert (big.grid, big.image_size) == (32, 128) and big.family == "scenes"
    assert big.codebook_id() == pyramid[16].codebook_id() == pyramid[8].codebook_id()
    card = json.load(open(os.path.join(embedded_dir("scenes128"), "family.json")))
    assert card["base"] == "models/embedded" and card["reproduce"].startswith("python -m mulosd_core.train.family")
    labels = torch.tensor([2, 9])
    tokens = generate(big, labels, method=presets.resolve(big, None), seed=0, decode=False).tokens
    top1 = distribution_figures(raw_next_token_probs(big, tokens, labels))["top1"]
    assert float(top1.mean()) < 0.3   # flat next-token distributions on its own samples, as a real image model's


@pytest.mark.parametrize("grid,r,member", [(32, 2, "upsampler"), (32, 4, "upsampler_r4"), (16, 2, "upsampler")])
def test_the_learned_upsampler_follows_the_ratio_and_the_target_grid(pyramid, grid, r, member):
    family = "scenes128" if grid == 32 else "scenes"
    assert embedded_upsampler(pyramid[grid], r) == embedded_path(member, family)


@pytest.mark.parametrize("low", [16, 8])
def test_mulo_sd_runs_the_128_px_pair(pyramid, low):
    big, drafter = pyramid[32], pyramid[low]
    method = presets.resolve(big, drafter, upsampler=UpsamplerConfig(kind="learned"))
    res = generate(big, torch.tensor([6]), method=method, drafter=drafter, seed=0)
    assert res.tokens.shape == (1, 1024) and res.images.shape == (1, 3, 128, 128)
    assert res.stats.drafted > 0 and res.stats.target_calls < 1024 + 1


def test_the_128_px_run_is_estimated_and_refused_before_any_model_runs(pyramid, monkeypatch):
    big, small = pyramid[32], pyramid[16]
    assert memory.estimate_bytes(big, 1, False) > 2 * memory.estimate_bytes(small, 1, False)
    calls = []
    monkeypatch.setattr(type(big), "prefill", lambda self, *a: calls.append(1))
    monkeypatch.setattr(memory, "available_bytes", lambda device: 2**20)
    with pytest.raises(memory.NotEnoughMemory, match=r"image_size \(now 128 px, drafter 64 px\)"):
        generate(big, torch.tensor([0]), method=presets.resolve(big, small), drafter=small, seed=0)
    assert calls == []
