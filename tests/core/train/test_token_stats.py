"""train.token_stats: the exact test's ceiling 1 - TV(p, q) of a learned upsampler, and the own-sample pairs
an upsampler can be taught on."""
from __future__ import annotations

import pytest
import torch

from mulosd_core.decode import generate_ar
from mulosd_core.models.latent_upsampler import LatentUpsampler, LatentUpsamplerConfig
from mulosd_core.sampling import SamplingConfig
from mulosd_core.testing import tiny_model, tiny_vq
from mulosd_core.train import upsampler as U
from mulosd_core.train.token_stats import exact_ceiling, low_encoding, sampling_probs

SAMPLING = SamplingConfig(temperature=1.0, top_k=0, top_p=1.0, cfg_scale=1.0)


def pair():
    vq = tiny_vq(3, 32)
    return tiny_model(4, seed=1, vq=vq), tiny_model(2, seed=2, vq=vq)


def test_a_uniform_q_accepts_the_mass_p_puts_below_one_over_v():
    target, drafter = pair()
    net = LatentUpsampler(LatentUpsamplerConfig(codebook_size=32, ratio=2, channels=8, layers=1))
    for t in (net.head.weight, net.head.bias):
        torch.nn.init.zeros_(t)                        # q uniform over the 32 codes, argmax code 0
    labels = torch.tensor([0, 1, 2])
    tokens = generate_ar(target, labels, SAMPLING, seed=0).tokens
    got = exact_ceiling(target, drafter, net, tokens, labels, SAMPLING)
    p = sampling_probs(target, tokens, labels, SAMPLING)
    assert torch.allclose(got["one_minus_tv"], p.clamp(max=1 / 32).sum(-1).mean(-1), atol=1e-5)
    assert torch.allclose(got["p_of_argmax"], p[..., 0].mean(-1), atol=1e-6)
    assert ((got["one_minus_tv"] > 0) & (got["one_minus_tv"] < 1)).all()


def test_own_pairs_are_the_targets_samples_drawn_once(tmp_path, monkeypatch):
    target, drafter = pair()
    pairs = U.own_pairs(target, drafter, SAMPLING, 5, tmp_path, "up", batch=2)
    assert pairs["full"].shape == (5, 16) and pairs["low"].shape == (5, 4)
    assert pairs["labels"].tolist() == [i % target.gpt.config.num_classes for i in range(5)]
    first = generate_ar(target, pairs["labels"][:2], SAMPLING, seed=U.OWN_SEED).tokens
    assert torch.equal(pairs["full"][:2].long(), first.cpu())
    assert torch.equal(pairs["low"][:2].long(), low_encoding(target, drafter, first).cpu())
    def drawn(*a, **k):
        raise RuntimeError("drawn again")

    monkeypatch.setattr(U, "generate_ar", drawn)
    again = U.own_pairs(target, drafter, SAMPLING, 5, tmp_path, "up", batch=2)
    assert torch.equal(again["full"], pairs["full"])
    with pytest.raises(RuntimeError, match="drawn again"):    # another count is drawn afresh
        U.own_pairs(target, drafter, SAMPLING, 6, tmp_path, "up", batch=2)


def test_an_upsampler_stage_names_its_pairs():
    with pytest.raises(ValueError, match=r"upsampler stage u: pairs must be one of \('pool', 'target'\), got 'drafts'"):
        U.UpsamplerStage("u", pairs="drafts")
