"""Sampling as upstream LlamaGen samples: CFG combine, temperature, top-k (ties kept), top-p (first
crossing token kept), per-sample generators."""
from __future__ import annotations

import math

import pytest
import torch

from mulosd_core.sampling import SamplingConfig, Streams, cfg_combine, process_logits, sample_tokens



def _naive_upstream_probs(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Row-by-row, list-based statement of upstream's sample(): /max(T, 1e-5), top-k, top-p, softmax."""
    out = []
    for row in logits.tolist():
        row = [x / max(temperature, 1e-5) for x in row]
        v = len(row)
        if top_k > 0:
            k = min(max(top_k, 1), v)
            kth = sorted(row, reverse=True)[k - 1]
            row = [x if x >= kth else -math.inf for x in row]
        if top_p < 1.0:
            order = sorted(range(v), key=lambda i: -row[i])
            m = max(row)
            z = sum(math.exp(x - m) for x in row)
            cum, drop_next = 0.0, False
            for i in order:
                if drop_next:
                    row[i] = -math.inf
                cum += math.exp(row[i] - m) / z if row[i] != -math.inf else 0.0
                if cum > top_p:
                    drop_next = True  # everything after the first crossing token goes
        m = max(row)
        e = [math.exp(x - m) if x != -math.inf else 0.0 for x in row]
        s = sum(e)
        out.append([x / s for x in e])
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (1.3, 0, 0.8), (1.0, 7, 0.5), (0.9, 100, 0.95)])
def test_process_logits_matches_upstream_statement(temperature, top_k, top_p):
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(0)) * 2
    got = process_logits(logits, SamplingConfig(cfg_scale=1.0, temperature=temperature, top_k=top_k, top_p=top_p))
    want = _naive_upstream_probs(logits, temperature, top_k, top_p)
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), want, atol=1e-6)
    assert torch.equal(got > 0, want > 0)


def test_top_k_1_is_argmax():
    logits = torch.randn(8, 50, generator=torch.Generator().manual_seed(1))
    probs = process_logits(logits, SamplingConfig(cfg_scale=1.0, top_k=1))
    assert torch.equal(probs, torch.nn.functional.one_hot(logits.argmax(-1), 50).float())
    streams = Streams(123, 8)
    for _ in range(3):
        assert torch.equal(sample_tokens(probs, SamplingConfig(top_k=1), streams), logits.argmax(-1))


def test_top_k_ties_at_the_kth_value_survive():
    logits = torch.tensor([[3.0, 1.0, 3.0, 2.0, 3.0]])
    probs = process_logits(logits, SamplingConfig(cfg_scale=1.0, top_k=1))
    assert torch.allclose(probs, torch.tensor([[1 / 3, 0, 1 / 3, 0, 1 / 3]]))
    probs = process_logits(logits, SamplingConfig(cfg_scale=1.0, top_k=4))  # 4th largest is 2.0
    assert (probs > 0).tolist() == [[True, False, True, True, True]]


def test_top_p_keeps_the_first_token_crossing_the_threshold():
    p = torch.tensor([0.15, 0.5, 0.05, 0.3])  # sorted: 0.5, 0.3, 0.15, 0.05 -> cumsum 0.5, 0.8, 0.95, 1.0
    logits = p.log()[None]
    cfg = lambda top_p: SamplingConfig(cfg_scale=1.0, top_p=top_p)
    # 0.6: 0.5 does not reach it, 0.3 crosses it and is kept, the rest goes
    assert torch.allclose(process_logits(logits, cfg(0.6)), torch.tensor([[0, 0.625, 0, 0.375]]))
    # 0.4: the very first token already crosses: only it survives
    assert torch.allclose(process_logits(logits, cfg(0.4)), torch.tensor([[0.0, 1.0, 0.0, 0.0]]))
    # 0.9: 0.5 + 0.3 = 0.8 < 0.9, then 0.15 crosses and is kept
    assert torch.allclose(process_logits(logits, cfg(0.9)), torch.tensor([[0.15, 0.5, 0, 0.3]]) / 0.95)


def test_cfg_combine():
    cond = torch.tensor([[1.0, 2.0, 0.0]])
    uncond = torch.tensor([[0.5, 3.0, 0.0]])
    both = torch.cat([cond, uncond])
    assert torch.allclose(cfg_combine(both, 4.0), uncond + 4.0 * (cond - uncond))
    # scale <= 1 is no guidance at all: the logits (the conditional rows only) pass through untouched
    assert cfg_combine(cond, 1.0) is cond
    assert not SamplingConfig(cfg_scale=1.0).uses_cfg and not SamplingConfig(cfg_scale=0.5).uses_cfg
    assert SamplingConfig(cfg_scale=1.01).uses_cfg


def test_cfg_scale_1_equals_conditional_logits():
    cond = torch.randn(3, 20, generator=torch.Generator().manual_seed(2))
    uncond = torch.randn(3, 20, generator=torch.Generator().manual_seed(3))
    # with scale exactly 1 the guided formula collapses to the conditional logits
    assert torch.allclose(uncond + (cond - uncond) * 1.0, cond, atol=1e-6)
    cfg = SamplingConfig(cfg_scale=1.0, temperature=0.8, top_k=5)
    assert torch.equal(process_logits(cfg_combine(cond, cfg.cfg_scale), cfg), process_logits(cond, cfg))


def test_greedy_is_argmax_and_consumes_no_randomness():
    logits = torch.randn(4, 30, generator=torch.Generator().manual_seed(4))
    cfg = SamplingConfig(temperature=0.0)
    streams = Streams(5, 4)
    before = [g.get_state().clone() for g in streams.gens]
    assert torch.equal(sample_tokens(process_logits(logits, cfg), cfg, streams), logits.argmax(-1))
    assert all(torch.equal(a, g.get_state()) for a, g in zip(before, streams.gens))


def test_streams_seed_determinism_and_batch_layout():
    probs = torch.softmax(torch.randn(4, 100, generator=torch.Generator().manual_seed(6)), -1)
    draw = lambda seed: torch.stack([Streams(seed, 4).sample(probs) for _ in range(1)])
    a, b, c = draw(10), draw(10), draw(11)
    assert torch.equal(a, b) and not torch.equal(a, c)
    # element i of a batch seeded s uses the same generator as a batch of one seeded s + i
    s = Streams(10, 4)
    batched = torch.stack([s.sample(probs) for _ in range(5)])  # [5, 4]
    for i in range(4):
        single = Streams(10 + i, 1)
        alone = torch.stack([single.sample(probs[i: i + 1]) for _ in range(5)])[:, 0]
        assert torch.equal(batched[:, i], alone)
    # separate offsets give independent streams (drafter vs target)
    assert not torch.equal(Streams(10, 4, offset=1).uniform(8), Streams(10, 4).uniform(8))
    # `rows` picks the generators of a subset of the batch
    sub = Streams(10, 4).sample(probs[[1, 3]], rows=[1, 3])
    assert torch.equal(sub, torch.stack([Streams(10 + i, 1).sample(probs[i: i + 1]) for i in (1, 3)])[:, 0])


@pytest.mark.parametrize("field,value", [("cfg_scale", -1.0), ("temperature", -0.1), ("top_k", -1), ("top_p", 0.0), ("top_p", 1.5)])
def test_config_validation(field, value):
    with pytest.raises(ValueError, match=field):
        SamplingConfig(**{field: value})


def test_cpu_draws_are_torch_multinomial_draws():
    """Streams.sample computes multinomial's single-sample draw directly on CPU: same tokens, same generator states."""
    probs = process_logits(torch.randn(3, 300, generator=torch.Generator().manual_seed(8)) * 2,
                           SamplingConfig(cfg_scale=1.0, top_k=50, top_p=0.9))
    ours = Streams(42, 3)
    gens = [torch.Generator().manual_seed(42 + i) for i in range(3)]
    for _ in range(20):
        want = torch.cat([torch.multinomial(probs[i], 1, generator=gens[i]) for i in range(3)])
        assert torch.equal(ours.sample(probs), want)
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(ours.gens, gens))
    # draws follow the distribution: an 80/20 split is respected
    two = torch.tensor([[0.8, 0.2]])
    s = Streams(0, 1)
    freq = sum(int(s.sample(two)) for _ in range(2000)) / 2000
    assert abs(freq - 0.2) < 0.04
    with pytest.raises(ValueError, match="NaN"):
        Streams(0, 1).sample(torch.full((1, 4), float("nan")))


def test_cpu_fast_top_k_top_p_equals_general_path():
    """The CPU top-k + top-p shortcut gives bit-identical probabilities to the sort-based path (ties included)."""
    from mulosd_core import sampling

    g = torch.Generator().manual_seed(9)
    for trial in range(30):
        logits = torch.randn(3, 200, generator=g) * (3.0 if trial % 2 else 0.3)
        if trial % 3 == 0:
            logits = (logits * 2).round() / 2  # many exact ties
        for k, p in [(1, 0.5), (2, 0.9), (10, 0.3), (50, 0.95), (150, 0.99)]:
            cfg = SamplingConfig(cfg_scale=1.0, top_k=k, top_p=p)
            kth = torch.topk(logits, k, dim=-1).values[..., -1:]
            general = logits.masked_fill(logits < kth, float("-inf"))
            srt, order = torch.sort(general, descending=True, dim=-1)
            cum = srt.softmax(-1).cumsum(-1)
            drop = torch.cat([torch.zeros_like(cum[..., :1], dtype=torch.bool), cum[..., :-1] > p], dim=-1)
            general = general.masked_fill(torch.zeros_like(drop).scatter(-1, order, drop), float("-inf")).softmax(-1)
            assert torch.equal(sampling.process_logits(logits, cfg), general), (trial, k, p)
