"""Hostile cases in the core (issue 20): cancel at every model call, no allocation that grows with the
square of the sequence outside the estimate, and every failure while reading a model file named."""
from __future__ import annotations

import functools
import io
import json
import os
import zipfile

import pytest
import torch

from mulosd_core import memory
from mulosd_core.decode import generate_ar
from mulosd_core.cancel import MODEL_CALLS
from mulosd_core.decode import MethodConfig, generate
from mulosd_core.memory import NotEnoughMemory
from mulosd_core.models import checkpoints
from mulosd_core.models.checkpoints import CheckpointError
from mulosd_core.models.kv_cache import KVCache
from mulosd_core.models.llamagen import LlamaGenModel
from mulosd_core.models.registry import load_embedded, load_gpt, load_vq
from mulosd_core.presets import mulo_verifier
from mulosd_core.sampling import SamplingConfig
from mulosd_core.testing import tiny_model, tiny_vq

SAMPLING = SamplingConfig(cfg_scale=2.0, temperature=1.0)
METHODS = {
    "ar": MethodConfig(method="ar"),
    "mulo": MethodConfig(method="speculative", verifier=mulo_verifier(), rows_per_step=2, parallel_window=2),
    "zipar": MethodConfig(method="zipar", zipar_window=2),
    "sjd": MethodConfig(method="sjd", sjd_window=4),
}


@functools.cache
def _pair():
    vq = tiny_vq(0, 16)
    return (tiny_model(8, 1, vq=vq, dim=16, n_head=2, n_layer=1),
            tiny_model(4, 2, vq=vq, dim=16, n_head=2, n_layer=1))


class Cancelled(Exception):
    pass


@pytest.fixture
def model_calls(monkeypatch):
    """Every model call (MODEL_CALLS of LlamaGenModel) the run really makes, by name, in order."""
    log: list[str] = []
    for name in MODEL_CALLS:
        real = getattr(LlamaGenModel, name)

        def logged(self, *a, _real=real, _name=name, **kw):
            log.append(_name)
            return _real(self, *a, **kw)

        monkeypatch.setattr(LlamaGenModel, name, logged)
    return log


def _run(name: str, interrupt=None, progress=None):
    target, drafter = _pair()
    return generate(target, torch.tensor([1, 3]), SAMPLING, METHODS[name], drafter=drafter, seed=11,
                    interrupt=interrupt, progress=progress)


# ------------------------------------------------------------------------------ cancel
@pytest.mark.parametrize("name", sorted(METHODS))
def test_interrupt_is_asked_before_every_model_call(model_calls, name):
    checks = []
    reference = _run(name, interrupt=lambda: checks.append(len(model_calls)))
    # one check right before each call: when check i ran, i calls had been made
    assert checks == list(range(len(model_calls))), (checks[:10], model_calls[:10])
    if name == "mulo":   # the pixel upsampler's VQ calls are covered too
        assert {"encode", "decode"} <= set(model_calls)
    assert torch.equal(_run(name).tokens, reference.tokens)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_cancel_waits_for_no_further_model_call_and_frees_every_cache(model_calls, name, monkeypatch):
    reference = _run(name)
    total = len(model_calls)
    built: list[KVCache] = []
    init = KVCache.__init__
    monkeypatch.setattr(KVCache, "__init__", lambda self, *a, **kw: (init(self, *a, **kw), built.append(self))[0])
    for stop_at in sorted({1, total // 3, total // 2, total - 1}):
        model_calls.clear()
        built.clear()

        def interrupt():
            if len(model_calls) == stop_at:
                raise Cancelled()

        with pytest.raises(Cancelled):
            _run(name, interrupt=interrupt)
        assert len(model_calls) == stop_at, "a model call ran after the interrupt"
        assert built and all(c.released for c in built)
    assert torch.equal(_run(name).tokens, reference.tokens)
    assert torch.equal(_run(name).images, reference.images)


def test_ar_sampler_takes_the_interrupt_directly(model_calls):
    target, _ = _pair()
    with pytest.raises(Cancelled):
        generate_ar(target, torch.tensor([2]), SAMPLING, interrupt=lambda: (_ for _ in ()).throw(Cancelled())
                    if len(model_calls) == 5 else None)
    assert len(model_calls) == 5


# ------------------------------------------------------------------------------ memory
def test_attention_mask_builds_only_the_rows_being_computed():
    """A cache of 2^21 slots: the mask for one query is [1, 1, 1, L] (the old L x L table was 4 TB)."""
    L = 1 << 21
    cache = KVCache(1, 1, 1, L, 1, torch.float32, "cpu")
    pos = torch.tensor([L // 2])
    cache.mark(pos)
    mask = cache.attention_mask(pos)
    assert mask.shape == (1, 1, 1, L) and int(mask.sum()) == 1
    cache.mark(torch.arange(4), torch.tensor([[True, False, True, True]]))   # an invalid (padded) slot
    m = cache.attention_mask(torch.tensor([1, 3]))
    assert m[0, 0, 0, :4].tolist() == [True, True, False, False]   # own slot visible though invalid
    assert m[0, 0, 1, :4].tolist() == [True, False, True, True]


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_image_size_4096_on_the_embedded_target_is_refused_before_any_model_runs(model_calls):
    base = load_embedded("target")
    huge = LlamaGenModel(base.gpt, base.vq, 4096, name="embedded/target")
    before = _rss()
    with pytest.raises(NotEnoughMemory) as e:
        generate(huge, torch.tensor([3]), SamplingConfig(top_k=2), MethodConfig(method="ar"), seed=0)
    msg = str(e.value)
    assert model_calls == []
    for words in ("image_size (now 4096 px)", "VQ decode/encode", "KV cache", "MB are free", "batch_size (now 1)"):
        assert words in msg, msg
    assert abs(_rss() - before) < 32 * 2**20, "the refusal allocated memory"


def test_estimate_counts_what_scales_with_size_and_a_possible_size_passes():
    base = load_embedded("target")
    small, large = (LlamaGenModel(base.gpt, base.vq, s) for s in (64, 256))
    for part in ("KV cache", "largest model call", "VQ decode/encode"):
        assert memory.estimate(large, 2, False, 1)[part] > memory.estimate(small, 2, False, 1)[part] > 0
    # the VQ's attention over the token grid grows with the fourth power of the side (dominant at large sizes)
    assert memory.vq_bytes(LlamaGenModel(base.gpt, base.vq, 1024), 1) > 100 * memory.vq_bytes(large, 1)
    assert memory.check_fits(1, False, large, target_chunk=1)    # about 240 MB: runs


# ------------------------------------------------------------------------------ bad files
def _garbage() -> dict[str, bytes]:
    foreign_zip = io.BytesIO()
    with zipfile.ZipFile(foreign_zip, "w") as z:
        z.writestr("notes/readme.txt", "not weights")
    return {
        "text": b"just some text\nrenamed as a model\n",
        "random": torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0), dtype=torch.uint8).numpy().tobytes(),
        "zip": foreign_zip.getvalue(),
        "json": json.dumps({"model": {"weight": [1.0, 2.0]}, "image_size": 64}).encode(),
    }


WHAT = {"text": "text", "random": "no known weights format", "zip": "zip archive", "json": "JSON"}


@pytest.mark.parametrize("ext", ["pt", "safetensors"])
@pytest.mark.parametrize("kind", sorted(WHAT))
def test_garbage_files_fail_in_the_loader_naming_the_path_and_the_problem(tmp_path, kind, ext):
    path = tmp_path / f"{kind}.{ext}"
    path.write_bytes(_garbage()[kind])
    for loader in (load_gpt, load_vq):
        with pytest.raises(CheckpointError) as e:
            loader(str(path))
        msg = str(e.value)
        assert msg.startswith(str(path)) and WHAT[kind] in msg, msg
        assert "could run code" not in msg, msg   # garbage is not mistaken for a refused pickle


class _Unforeseen(Exception):
    """An exception type no list in checkpoints.py could name."""


@pytest.mark.parametrize("ext", ["pt", "safetensors"])
def test_any_failure_while_reading_becomes_the_loaders_error(tmp_path, monkeypatch, ext):
    import safetensors

    def boom(*a, **kw):
        raise _Unforeseen("the reader broke")

    monkeypatch.setattr(torch, "load", boom)
    monkeypatch.setattr(safetensors, "safe_open", boom)
    path = tmp_path / f"model.{ext}"
    path.write_bytes(b"0123456789abcdef")
    with pytest.raises(CheckpointError, match=r"_Unforeseen: the reader broke") as e:
        checkpoints.read_checkpoint(str(path))
    assert str(path) in str(e.value)
