"""Upsamplers U_r (upsample.upsample_rows) and the drafter/target pair checks (engine.check_pair)
on tiny random LlamaGen models: output shapes for r = 2 and 4, what each route computes, and the
errors for pairs and settings the method cannot run."""
from __future__ import annotations

import pytest
import torch

from mulosd_core.engine import MethodConfig, VerifierConfig, check_pair, generate
from mulosd_core.sampling import SamplingConfig
from mulosd_core.testing import CountingModel, tiny_model, tiny_vq
from mulosd_core.upsample import KINDS, UpsamplerConfig, resolution_ratio, upsample_rows

V = 16



@pytest.fixture(scope="module")
def vq():
    return tiny_vq(0, V)


@pytest.fixture(scope="module")
def grids(vq):
    """Models over one shared VQ by grid size."""
    return {g: tiny_model(g, 10 + g, vq=vq, dim=16, n_layer=1) for g in (2, 4, 6, 8)}


def _low(batch: int, rows: int, width: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (batch, rows * width), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- shapes
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("drafter_grid,r", [(4, 2), (2, 4)])
@pytest.mark.parametrize("rows", [1, 2])
@pytest.mark.parametrize("with_halo", [False, True])
def test_output_shape(grids, kind, drafter_grid, r, rows, with_halo):
    target, drafter = grids[8], grids[drafter_grid]
    B = 2
    low = _low(B, rows, drafter_grid, seed=rows)
    halo = _low(B, 1, drafter_grid, seed=9) if with_halo else None
    out = upsample_rows(UpsamplerConfig(kind=kind, ratio=r), drafter, target, low, rows, halo)
    assert out.shape == (B, rows * r * target.grid) and out.dtype == torch.long
    assert int(out.min()) >= 0 and int(out.max()) < V


@pytest.mark.parametrize("kind", KINDS)
def test_same_resolution_passes_the_draft_through(grids, kind):
    low = _low(2, 2, 4)
    assert torch.equal(upsample_rows(UpsamplerConfig(kind=kind), grids[4], grids[4], low, 2), low)


# ----------------------------------------------------------------------------- what each route computes
@pytest.mark.parametrize("drafter_grid,r", [(4, 2), (2, 4)])
def test_nearest_repeats_each_token_r_by_r(grids, drafter_grid, r):
    rows = 2
    low = _low(3, rows, drafter_grid)
    halo = _low(3, 1, drafter_grid, seed=5)
    out = upsample_rows(UpsamplerConfig(kind="nearest"), grids[drafter_grid], grids[8], low, rows, halo)
    want = low.view(3, rows, drafter_grid).repeat_interleave(r, 1).repeat_interleave(r, 2)
    assert torch.equal(out.view(3, rows * r, 8), want)


@pytest.mark.parametrize("filt", ["nearest", "area"])
def test_embedding_route_without_interpolation_is_nearest(grids, filt):
    """Repeating code vectors and re-quantising them gives the codes back (l2-normalised codebook)."""
    low = _low(2, 2, 4, seed=3)
    halo = _low(2, 1, 4, seed=4)
    emb = upsample_rows(UpsamplerConfig(kind="embedding", filter=filt), grids[4], grids[8], low, 2, halo)
    near = upsample_rows(UpsamplerConfig(kind="nearest"), grids[4], grids[8], low, 2, halo)
    assert torch.equal(emb, near)


@pytest.mark.parametrize("kind", ["pixel", "embedding"])
def test_halo_is_context_only(grids, kind):
    """With a halo, the output is the no-halo output of the band [halo; low] minus the halo's r rows."""
    low, halo = _low(2, 1, 4, seed=6), _low(2, 1, 4, seed=7)
    cfg = UpsamplerConfig(kind=kind)
    with_halo = upsample_rows(cfg, grids[4], grids[8], low, 1, halo)
    band = upsample_rows(cfg, grids[4], grids[8], torch.cat([halo, low], 1), 2)
    assert torch.equal(with_halo, band[:, 2 * 8:])


def test_pixel_route_is_deterministic_and_batch_independent(grids):
    low = _low(3, 2, 4, seed=8)
    cfg = UpsamplerConfig(kind="pixel", filter="bicubic")
    out = upsample_rows(cfg, grids[4], grids[8], low, 2)
    assert torch.equal(out, upsample_rows(cfg, grids[4], grids[8], low, 2))
    assert torch.equal(out[1:2], upsample_rows(cfg, grids[4], grids[8], low[1:2], 2))


# ----------------------------------------------------------------------------- errors
def test_resolution_ratio():
    assert resolution_ratio(8, 2) == 4 and resolution_ratio(8, 4) == 2 and resolution_ratio(4, 4) == 1
    with pytest.raises(ValueError, match="not an integer"):
        resolution_ratio(6, 4)
    with pytest.raises(ValueError, match="larger"):
        resolution_ratio(4, 8)


def test_upsample_rows_rejects_bad_ratios(grids):
    with pytest.raises(ValueError, match="not an integer"):
        upsample_rows(UpsamplerConfig(kind="nearest"), grids[4], grids[6], _low(1, 1, 4), 1)
    with pytest.raises(ValueError, match="larger"):
        upsample_rows(UpsamplerConfig(kind="nearest"), grids[8], grids[4], _low(1, 1, 8), 1)
    with pytest.raises(ValueError, match="ratio 4"):
        upsample_rows(UpsamplerConfig(kind="nearest", ratio=4), grids[4], grids[8], _low(1, 1, 4), 1)


@pytest.mark.parametrize("kwargs,match", [
    (dict(kind="learned"), "learned upsampler is not shipped"), (dict(kind="bogus"), "kind"),
    (dict(filter="lanczos9"), "filter"), (dict(ratio=0), "ratio"), (dict(ratio=1.5), "ratio"),
])
def test_bad_upsampler_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        UpsamplerConfig(**kwargs)


def _method(rule="mulo", parallel_window=0, ratio=None) -> MethodConfig:
    return MethodConfig(verifier=VerifierConfig(rule=rule), upsampler=UpsamplerConfig(kind="nearest", ratio=ratio),
                        parallel_window=parallel_window, rows_per_step=2)



def _pair_error(target, drafter, method, match):
    with pytest.raises(ValueError, match=match):
        check_pair(target, drafter, method)
    t, d = CountingModel(target), CountingModel(drafter)   # generate fails the same way, before any model runs
    with pytest.raises(ValueError, match=match):
        generate(t, torch.tensor([0]), SamplingConfig(), method, drafter=d, decode=False)
    assert t.calls == 0 and d.calls == 0


def test_pair_valid(grids):
    assert check_pair(grids[8], grids[2], _method()) == 4
    assert check_pair(grids[8], grids[4], _method(ratio=2, parallel_window=2)) == 2
    assert check_pair(grids[4], grids[4], _method(rule="exact")) == 1
    assert check_pair(grids[4], grids[4], _method(rule="lantern")) == 1


def test_pair_non_integer_ratio(grids):
    _pair_error(grids[6], grids[4], _method(), "not an integer")


def test_pair_drafter_grid_larger(grids):
    _pair_error(grids[4], grids[8], _method(), "larger")


def test_pair_different_codebooks(grids):
    other = tiny_model(2, 3, vq=tiny_vq(1, V), dim=16, n_layer=1)
    _pair_error(grids[4], other, _method(), "different codebooks")


def test_pair_different_conditioning(vq, grids):
    t2i = tiny_model(2, 3, vq=vq, dim=16, n_layer=1, model_type="t2i")
    with pytest.raises(ValueError, match="same conditioning"):
        check_pair(grids[4], t2i, _method())


@pytest.mark.parametrize("rule", ["exact", "lantern"])
def test_pair_probability_rules_need_same_resolution(grids, rule):
    _pair_error(grids[4], grids[2], _method(rule=rule), rule)


def test_pair_parallel_drafting_needs_low_resolution(grids):
    _pair_error(grids[4], grids[4], _method(parallel_window=2), "parallel_window")


def test_pair_upsampler_ratio_mismatch(grids):
    _pair_error(grids[8], grids[4], _method(ratio=4), "ratio 4")
