"""Checkpoint loading: round trips through every accepted layout give identical outputs, and every
refusal raises CheckpointError naming the file and the problem (and never runs code from a file)."""
from __future__ import annotations

import argparse
import os
import pickle

import pytest
import torch

from mulosd_core.models.checkpoints import CheckpointError, save_safetensors
from mulosd_core.models.registry import describe, load_gpt, load_vq
from mulosd_core.testing import tiny_gpt, tiny_vq

GRID = 4


@pytest.fixture(scope="module")
def c2i():
    return tiny_gpt(11)


@pytest.fixture(scope="module")
def t2i():
    return tiny_gpt(12, model_type="t2i")


@pytest.fixture(scope="module")
def vq():
    return tiny_vq(13)


def _sd(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _inputs(gpt):
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, gpt.config.vocab_size, (2, GRID * GRID), generator=g)
    if gpt.config.model_type == "c2i":
        return tokens, torch.tensor([1, 7]), None
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1] * 7])
    return tokens, torch.randn(2, 7, 24, generator=g) * mask[..., None], mask


def _logits(gpt, ref):
    tokens, cond, mask = _inputs(ref)
    with torch.no_grad():
        return gpt(tokens, cond, GRID, cond_mask=mask)


def _same_gpt(loaded, ref):
    assert loaded.config.model_type == ref.config.model_type
    assert loaded.cond_len == ref.cond_len
    assert torch.equal(_logits(loaded, ref), _logits(ref, ref))


# -- round trips -------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["c2i", "t2i"])
def test_safetensors_round_trip(tmp_path, which, request):
    gpt = request.getfixturevalue(which)
    path = str(tmp_path / "gpt.safetensors")
    save_safetensors(gpt.state_dict(), path, {"mulosd_config": gpt.config.to_dict()})
    _same_gpt(load_gpt(path), gpt)  # head count from the stored config
    bare = str(tmp_path / "bare.safetensors")
    save_safetensors(gpt.state_dict(), bare)
    _same_gpt(load_gpt(bare, n_head=2), gpt)  # head count as an explicit override
    with pytest.raises(CheckpointError, match="bare.safetensors.*head count"):
        load_gpt(bare)


LAYOUTS = {
    "flat": lambda sd: sd,
    "model": lambda sd: {"model": sd, "optimizer": {"state": {}, "param_groups": []}, "steps": 5},
    "module": lambda sd: {"module": sd},
    "state_dict": lambda sd: {"state_dict": sd, "epoch": 1},
    "args": lambda sd: {"model": sd, "args": argparse.Namespace(gpt_model="GPT-B", cls_token_num=120, lr=1e-4)},
    "ddp_prefix": lambda sd: {"model": {"module." + k: v for k, v in sd.items()}},
    "compiled_prefix": lambda sd: {"model": {"_orig_mod." + k: v for k, v in sd.items()}},
    "runtime_buffers": lambda sd: {**sd, "freqs_cis": torch.zeros(23, 8, 2),
                                   "layers.0.attention.kv_cache.k_cache": torch.zeros(1, 2, 8, 16)},
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("which", ["c2i", "t2i"])
def test_torch_round_trips(tmp_path, which, layout, request):
    gpt = request.getfixturevalue(which)
    path = str(tmp_path / f"{layout}.pt")
    torch.save(LAYOUTS[layout](_sd(gpt)), path)
    _same_gpt(load_gpt(path, n_head=2), gpt)


def test_nesting_order_and_ema_only_when_asked(tmp_path, c2i):
    other = tiny_gpt(99)
    path = str(tmp_path / "train.pt")
    torch.save({"ema": _sd(other), "model": _sd(c2i), "args": argparse.Namespace(x=1)}, path)
    _same_gpt(load_gpt(path, n_head=2), c2i)           # "model", never "ema" by default
    _same_gpt(load_gpt(path, n_head=2, key="ema"), other)
    path2 = str(tmp_path / "order.pt")
    torch.save({"state_dict": _sd(other), "module": _sd(c2i)}, path2)
    _same_gpt(load_gpt(path2, n_head=2), c2i)          # "module" comes before "state_dict"
    path3 = str(tmp_path / "order2.pt")
    torch.save({"module": _sd(other), "model": _sd(c2i)}, path3)
    _same_gpt(load_gpt(path3, n_head=2), c2i)          # "model" comes before "module"
    only_ema = str(tmp_path / "only_ema.pt")
    torch.save({"ema": _sd(c2i), "steps": 3}, only_ema)
    with pytest.raises(CheckpointError, match=r"only_ema\.pt.*no weights found.*'ema' entry exists"):
        load_gpt(only_ema, n_head=2)
    _same_gpt(load_gpt(only_ema, n_head=2, key="ema"), c2i)
    with pytest.raises(CheckpointError, match=r"only_ema\.pt.*no 'model' entry"):
        load_gpt(only_ema, n_head=2, key="model")


def test_dtype_and_device_on_load(tmp_path, c2i):
    path = str(tmp_path / "gpt.safetensors")
    save_safetensors(c2i.state_dict(), path, {"mulosd_config": c2i.config.to_dict()})
    gpt = load_gpt(path, dtype=torch.bfloat16)
    assert gpt.output.weight.dtype == torch.bfloat16 and not gpt.training
    info = describe(path)
    assert info["kind"] == "gpt" and info["n_head"] == 2 and info["dim"] == 32


@pytest.mark.parametrize("fmt", ["safetensors", "pt"])
def test_vq_round_trip(tmp_path, vq, fmt):
    path = str(tmp_path / f"vq.{fmt}")
    if fmt == "safetensors":
        save_safetensors(vq.state_dict(), path, {"mulosd_config": vq.config.to_dict()})
    else:
        torch.save({"model": _sd(vq), "optimizer": {}, "ema": {}}, path)
    loaded = load_vq(path, norm_groups=4) if fmt == "pt" else load_vq(path)
    assert loaded.config == vq.config
    tokens = torch.randint(0, 64, (1, 16), generator=torch.Generator().manual_seed(0))
    img = torch.rand(1, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(loaded.decode(tokens, 4, 4), vq.decode(tokens, 4, 4))
        assert torch.equal(loaded.encode(img), vq.encode(img))


# -- errors ------------------------------------------------------------------------------------
def _raises(path, match, loader=None, **kw):
    loader = loader or load_gpt
    with pytest.raises(CheckpointError) as e:
        loader(str(path), **kw)
    msg = str(e.value)
    assert str(path) in msg, msg
    if match:
        assert any(m in msg for m in ([match] if isinstance(match, str) else match)), msg
    return msg


def test_missing_and_unexpected_keys_are_listed(tmp_path, c2i):
    sd = _sd(c2i)
    del sd["layers.1.ffn_norm.weight"]
    sd["layers.0.attention.bias_extra"] = torch.zeros(3)
    path = tmp_path / "keys.pt"
    torch.save({"model": sd}, path)
    msg = _raises(path, "missing", n_head=2)
    assert "1 missing keys ['layers.1.ffn_norm.weight']" in msg
    assert "1 unexpected keys ['layers.0.attention.bias_extra']" in msg


def test_shape_mismatch_names_both_shapes(tmp_path, c2i):
    sd = _sd(c2i)
    sd["layers.1.feed_forward.w1.weight"] = torch.zeros(80, 32)
    path = tmp_path / "shape.safetensors"
    save_safetensors(sd, str(path))
    msg = _raises(path, "layers.1.feed_forward.w1.weight", n_head=2)
    assert "(80, 32)" in msg and f"{tuple(c2i.layers[1].feed_forward.w1.weight.shape)}" in msg


def test_vq_given_as_gpt_and_the_reverse(tmp_path, c2i, vq):
    vq_path = tmp_path / "tokenizer.pt"
    torch.save({"model": _sd(vq)}, vq_path)
    gpt_path = tmp_path / "gpt.safetensors"
    save_safetensors(c2i.state_dict(), str(gpt_path))
    _raises(vq_path, "expected a LlamaGen GPT checkpoint, but this file is a VQ tokenizer", n_head=2)
    _raises(gpt_path, "expected a VQ tokenizer checkpoint, but this file is a LlamaGen GPT", loader=load_vq)
    junk = tmp_path / "junk.safetensors"
    save_safetensors({"a.weight": torch.zeros(2)}, str(junk))
    _raises(junk, "neither a LlamaGen GPT nor a VQ tokenizer")


@pytest.mark.parametrize("fmt", ["pt", "safetensors"])
def test_truncated_file(tmp_path, c2i, fmt):
    full = tmp_path / f"full.{fmt}"
    if fmt == "pt":
        torch.save({"model": _sd(c2i)}, full)
    else:
        save_safetensors(c2i.state_dict(), str(full))
    data = full.read_bytes()
    cut = tmp_path / f"cut.{fmt}"
    cut.write_bytes(data[: len(data) // 2])
    _raises(cut, ["truncated", "not a readable safetensors"], n_head=2)


def test_empty_and_missing_file(tmp_path):
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    _raises(empty, "empty")
    _raises(tmp_path / "nope.safetensors", "no such file")


def test_image_renamed_as_checkpoint(tmp_path):
    from PIL import Image

    png = tmp_path / "photo.png"
    Image.new("RGB", (8, 8), (200, 10, 10)).save(png)
    for ext in ("safetensors", "pt"):
        fake = tmp_path / f"photo.{ext}"
        fake.write_bytes(png.read_bytes())
        _raises(fake, ["not a readable safetensors", "not a PyTorch checkpoint", "refused"])


class _Exploit:
    """Unpickling this would run a shell command that creates a marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Plain:
    """A harmless class that is still not on the allow-list."""

    def __init__(self) -> None:
        self.lr = 1e-4


@pytest.mark.parametrize("how", ["torch_save", "raw_pickle", "nested_under_model"])
def test_pickle_with_code_is_refused_and_never_runs(tmp_path, c2i, how):
    marker = tmp_path / "PWNED"
    path = tmp_path / f"evil_{how}.pt"
    if how == "torch_save":
        torch.save({"model": _sd(c2i), "args": _Exploit(str(marker))}, path)
    elif how == "raw_pickle":
        with open(path, "wb") as f:
            pickle.dump({"model": _Exploit(str(marker))}, f, protocol=2)
    else:
        torch.save({"model": {**_sd(c2i), "output.weight": _Exploit(str(marker))}}, path)
    msg = _raises(path, "refused to load", n_head=2)
    assert "system" in msg  # names what was refused, not torch's generic advice
    _raises(path, "refused to load", loader=load_vq)
    assert not marker.exists(), "loading a checkpoint executed code"


def test_non_namespace_objects_are_refused(tmp_path, c2i):
    """Only argparse.Namespace is allowed beside the tensors; any other class is refused (never imported)."""
    from collections import OrderedDict

    path = tmp_path / "obj.pt"
    torch.save({"model": _sd(c2i), "args": _Plain()}, path)
    _raises(path, "refused", n_head=2)
    ok = tmp_path / "ordered.pt"
    torch.save({"model": OrderedDict(_sd(c2i))}, ok)  # plain OrderedDicts (what state_dict() returns) are fine
    _same_gpt(load_gpt(str(ok), n_head=2), c2i)
