"""Reliability of a run: memory estimated before it starts, out-of-memory turned into advice,
and a cancelled or failed run releasing its caches and leaving the models as they were."""
from __future__ import annotations

import functools

import pytest
import torch

from mulosd_core import memory
from mulosd_core.decode import MethodConfig, generate
from mulosd_core.memory import NotEnoughMemory, check_fits, estimate_bytes
from mulosd_core.models.kv_cache import KVCache
from mulosd_core.sampling import SamplingConfig
from mulosd_core.testing import tiny_model, tiny_vq

VOCAB = 16
SAMPLING = SamplingConfig(cfg_scale=2.0, temperature=1.0)
METHODS = {
    "ar": MethodConfig(method="ar"),
    "speculative": MethodConfig(method="speculative", parallel_window=2),
    "zipar": MethodConfig(method="zipar", zipar_window=2),
    "sjd": MethodConfig(method="sjd", sjd_window=4),
}


@functools.cache
def _pair():
    vq = tiny_vq(0, VOCAB)
    return (tiny_model(8, 1, vq=vq, dim=16, n_head=2, n_layer=1),
            tiny_model(4, 2, vq=vq, dim=16, n_head=2, n_layer=1))


class Cancelled(Exception):
    pass


@pytest.fixture
def caches(monkeypatch):
    """Every KVCache built during the test."""
    built: list[KVCache] = []
    init = KVCache.__init__

    def record(self, *a, **kw):
        init(self, *a, **kw)
        built.append(self)

    monkeypatch.setattr(KVCache, "__init__", record)
    return built


def run(name: str, progress=None, seed: int = 5):
    target, drafter = _pair()
    return generate(target, torch.tensor([1, 3]), SAMPLING, METHODS[name], drafter=drafter, seed=seed,
                    progress=progress, decode=False)


def test_estimate_matches_the_cache_actually_built(caches):
    target, _ = _pair()
    run("ar")
    (cache,) = caches
    assert target.cache_bytes(4) > 0
    assert KVCache.bytes_for(1, 4, 2, cache.max_len, 8, torch.float32) == 2 * 4 * 2 * cache.max_len * 8 * 4
    parts = memory.estimate(target, batch=2, cfg=True)
    assert parts["KV cache"] == target.cache_bytes(4) == cache.allocated_bytes - 4 * cache.max_len   # less `valid`
    L = cache.max_len   # logits + probabilities of the whole grid, and its attention mask (bool, built from, float)
    assert parts["largest model call"] == 2 * 4 * 64 * VOCAB * 4 + (4 + 2) * 64 * L + 4 * 64 * L * 4
    assert estimate_bytes(target, batch=2, cfg=True) == parts["KV cache"] + max(parts["largest model call"],
                                                                                  parts["VQ decode/encode"])


def test_run_refused_before_any_model_runs_when_memory_is_short(monkeypatch):
    target, drafter = _pair()
    calls = []
    monkeypatch.setattr(type(target), "prefill", lambda self, *a: calls.append(1))
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1000)
    with pytest.raises(NotEnoughMemory, match=r"lower batch_size \(now 2\)") as e:
        run("speculative")
    assert "tiny8" in str(e.value) and "tiny4 (drafter)" in str(e.value) and "free" in str(e.value)
    assert calls == []


def test_the_advice_names_only_what_the_run_can_change(monkeypatch):
    """Issue 37: a target-only run was told to put 'the drafter' on another device, and a cpu run to stream
    its weights from the cpu."""
    target, drafter = _pair()
    short = lambda device: 1000   # noqa: E731
    with pytest.raises(NotEnoughMemory) as e:
        check_fits(1, False, target, available=short)
    msg = str(e.value)
    assert "drafter" not in msg and "stream" not in msg and "load the model in bfloat16/float16" in msg, msg
    with pytest.raises(NotEnoughMemory) as e:
        check_fits(1, False, target, drafter, available=short)
    msg = str(e.value)
    assert "load the models in bfloat16/float16 or put the drafter on another device" in msg and "stream" not in msg
    cuda = type("Cuda", (), {"type": "cuda"})()
    assert memory._lighter(True, cuda) == ("load the models in bfloat16/float16, stream the target's weights from "
                                           "the cpu (the loaders' weights input) or put the drafter on another device")
    with pytest.raises(NotEnoughMemory) as e, memory.out_of_memory_advice(target, 1):
        raise MemoryError()
    assert "drafter" not in str(e.value)


def test_estimate_counts_the_block_in_flight_of_a_streamed_model():
    from mulosd_core.offload import resident_weights, stream_weights

    target = tiny_model(4, 0, vq=tiny_vq(0, VOCAB))
    plain = estimate_bytes(target, batch=1, cfg=False)
    streamer = stream_weights(target, torch.device("cpu"))
    try:
        assert estimate_bytes(target, batch=1, cfg=False) == plain + streamer.block_bytes > plain
    finally:
        resident_weights(target)


def test_check_fits_passes_with_room_and_reports_per_model():
    target, drafter = _pair()
    need = check_fits(2, True, target, drafter, available=lambda d: 1 << 40)
    assert set(need) == {"tiny8", "tiny4 (drafter)"} and all(v > 0 for v in need.values())
    assert check_fits(2, True, target, drafter, available=lambda d: None)  # unknown free memory: no refusal


@pytest.mark.parametrize("error", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), MemoryError()])
def test_out_of_memory_names_the_model_frees_caches_and_the_next_run_is_unchanged(monkeypatch, caches, error):
    reference = run("speculative").tokens
    target, _ = _pair()
    forward = type(target).forward_tokens
    state = {"n": 0}

    def failing(self, *a, **kw):
        state["n"] += 1
        if state["n"] == 3:
            raise error
        return forward(self, *a, **kw)

    monkeypatch.setattr(type(target), "forward_tokens", failing)
    caches.clear()
    with pytest.raises(NotEnoughMemory, match="tiny8 ran out of memory on cpu while sampling a batch of 2") as e:
        run("speculative")
    assert "Lower batch_size" in str(e.value) and "caches were freed" in str(e.value)
    assert caches and all(c.released and c.k == [] for c in caches)
    monkeypatch.setattr(type(target), "forward_tokens", forward)
    assert torch.equal(run("speculative").tokens, reference)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_cancel_mid_run_releases_caches_and_the_next_run_is_unchanged(caches, name):
    reference = run(name).tokens
    caches.clear()
    seen = []

    def cancel(done, total, tokens):
        seen.append(done)
        if len(seen) == 2:
            raise Cancelled()

    with pytest.raises(Cancelled):
        run(name, progress=cancel)
    assert seen[-1] < 64, "the run was not cancelled mid-way"
    assert caches and all(c.released for c in caches)
    assert torch.equal(run(name).tokens, reference)


def test_successful_runs_release_their_caches_too(caches):
    for name in METHODS:
        run(name)
    assert caches and all(c.released for c in caches)


@pytest.mark.parametrize("name", list(METHODS))
def test_stats_report_the_cache_memory_the_run_allocated(caches, name):
    """cache_bytes counts every KV cache of the run (the AR sampler's nested scope included), so a
    CPU run reports its memory too; peak_memory_* stay CUDA-only and are empty here."""
    res = run(name)
    target, drafter = _pair()
    rows = 2 * 2                                     # batch 2, CFG doubles the rows
    models = [target, drafter] if name == "speculative" else [target]
    assert caches and res.stats.cache_bytes == sum(c.allocated_bytes for c in caches)
    assert res.stats.cache_bytes >= sum(m.cache_bytes(rows) for m in models)
    assert res.stats.cache_bytes <= sum(estimate_bytes(m, 2, True) for m in models)
    assert res.stats.peak_memory_by_device == {} and res.stats.peak_memory_bytes == 0
    d = res.stats.to_dict()
    assert d["cache_bytes"] == res.stats.cache_bytes and d["peak_memory_by_device"] == {}
