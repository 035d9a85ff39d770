"""The lossless mode (docs/DESIGN.md section 3.7): drafts drawn from the learned upsampler's distribution q,
verified by the exact rule min(1, p/q) with raster rejection and residual resampling, sample the target's
own distribution. A chi-square test against the exact joint of every token grid of a tiny r = 2 pair shows
it, and the same test fails two deliberately wrong variants (drafts not drawn from the q the rule reads,
and resampling from p instead of the residual)."""
from __future__ import annotations

import pytest
import torch

from mulosd_core import verify
from mulosd_core.decode import MethodConfig, VerifierConfig, generate
from mulosd_core.decode import speculative
from mulosd_core.models.latent_upsampler import LatentUpsampler, LatentUpsamplerConfig, save_latent_upsampler
from mulosd_core.testing import randomize_, tiny_model, tiny_vq
from mulosd_core.upsample import UpsamplerConfig
from tests.core.test_engine import CHI_LABEL, CHI_SAMPLING, CHI_VOCAB, chi_square, teacher_forced_probs

CALLS, BATCH = 1000, 1   # small batches: raster rejection cuts a batch at its first rejection, so the chain
                        # past a chunk's first position is exercised only when every image accepts it


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A 2 x 2 target and a 1 x 1 drafter over one 4-code VQ, a random learned upsampler for them, and the
    target's exact joint distribution of all 4^4 grids."""
    import itertools

    vq = tiny_vq(0, CHI_VOCAB)
    target = tiny_model(2, 11, vq=vq, dim=16)
    drafter = tiny_model(1, 13, vq=vq, dim=16)
    randomize_(target.gpt, 11, std=0.5)
    net = LatentUpsampler(LatentUpsamplerConfig(codebook_size=CHI_VOCAB, ratio=2, channels=8, layers=1))
    randomize_(net, 5, std=0.3)
    net.codebook_id = target.codebook_id()
    path = str(tmp_path_factory.mktemp("lossless") / "upsampler.safetensors")
    save_latent_upsampler(net, path)
    grids = torch.tensor(list(itertools.product(range(CHI_VOCAB), repeat=target.num_tokens)))
    p = teacher_forced_probs(target, torch.full((len(grids),), CHI_LABEL), grids, CHI_SAMPLING)
    joint = p.gather(-1, grids[..., None])[..., 0].double().prod(-1)
    return target, drafter, path, joint


def lossless(path: str) -> MethodConfig:
    return MethodConfig(method="speculative", verifier=VerifierConfig(rule="exact", rejection="raster"),
                        upsampler=UpsamplerConfig(kind="learned", weights=path, draw=True), rows_per_step=1)


def _samples(pair):
    target, drafter, path, joint = pair
    tokens, accepted, chained = [], 0, 0
    for call in range(CALLS):
        res = generate(target, torch.full((BATCH,), CHI_LABEL), CHI_SAMPLING, lossless(path), drafter=drafter,
                       seed=call, decode=False)
        tokens.append(res.tokens)
        accepted += res.stats.accepted
        chained += int(res.stats.steps < target.num_tokens)   # a step committed past its first position
    return torch.cat(tokens), accepted, chained, chi_square(torch.cat(tokens), joint)


def test_lossless_mode_samples_the_target_distribution(pair):
    _, accepted, chained, (stat, df, p_value) = _samples(pair)
    print(f"lossless: chi2 = {stat:.2f}, df = {df}, p = {p_value:.3g}, accepted {accepted}, chained runs {chained}")
    assert df >= 5 and p_value > 1e-3, (stat, df)
    assert accepted > CALLS * BATCH // 4 and chained > 0   # drafts were accepted, past a chunk's first position too


def test_chi_square_fails_drafts_not_drawn_from_q(pair, monkeypatch):
    """A wrong variant: the draft is q's argmax (the learned route's deterministic draft) but the rule still
    divides by q, as if it had been drawn."""
    monkeypatch.setattr(speculative.Speculative, "_draw", lambda self, q: q.argmax(-1))
    _, _, _, (stat, df, p_value) = _samples(pair)
    print(f"argmax drafts: chi2 = {stat:.2f}, df = {df}, p = {p_value:.3g}")
    assert p_value < 1e-6


def test_chi_square_fails_resampling_without_residual(pair, monkeypatch):
    monkeypatch.setattr(verify, "residual", lambda p, q: p)
    _, _, _, (stat, df, p_value) = _samples(pair)
    print(f"no residual: chi2 = {stat:.2f}, df = {df}, p = {p_value:.3g}")
    assert p_value < 1e-6


def test_exact_rule_needs_drawn_drafts_when_upsampled(pair):
    target, drafter, path, _ = pair
    method = MethodConfig(method="speculative", verifier=VerifierConfig(rule="exact", rejection="raster"),
                          upsampler=UpsamplerConfig(kind="learned", weights=path), rows_per_step=1)
    with pytest.raises(ValueError, match="draw=True"):
        generate(target, torch.full((1,), CHI_LABEL), CHI_SAMPLING, method, drafter=drafter, seed=0, decode=False)


def test_draw_needs_the_learned_upsampler():
    with pytest.raises(ValueError, match="draw=True needs the learned kind"):
        UpsamplerConfig(kind="pixel", draw=True)
