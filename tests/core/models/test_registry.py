"""What a file is, told from its header before any weights are read (issue 37), and load_model's errors:
a missing file or a file of another kind is named first, every one of them, before the image size."""
from __future__ import annotations

import pytest
import torch

from mulosd_core.models import registry
from mulosd_core.models.checkpoints import CheckpointError, save_safetensors
from mulosd_core.models.registry import check_file, embedded_path, file_kind, load_gpt, load_model, load_vq
from mulosd_core.testing import tiny_gpt, tiny_vq

SHIPPED = {"target": "gpt", "drafter": "gpt", "sd_drafter": "gpt", "vq": "vq", "upsampler": "upsampler",
           "classifier": "classifier"}


@pytest.mark.parametrize("member", sorted(SHIPPED))
def test_the_shipped_files_are_told_apart_by_their_header(member):
    assert file_kind(embedded_path(member)) == SHIPPED[member]


def test_released_style_files_are_told_apart_without_unpickling(tmp_path, monkeypatch):
    """A .pt as LlamaGen releases it (weights nested under "model", or flat with a DDP prefix): its pickle is
    searched for the names, never loaded."""
    torch.save({"model": tiny_gpt(0).state_dict(), "steps": 3}, tmp_path / "c2i_tiny.pt")
    torch.save({f"module.{k}": v for k, v in tiny_vq(0, 16).state_dict().items()}, tmp_path / "vq_tiny.pt")
    torch.save({"optimizer": torch.zeros(3)}, tmp_path / "other.pt")
    save_safetensors({"weight": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    save_safetensors(tiny_vq(0, 16).state_dict(), str(tmp_path / "vq_no_meta.safetensors"))   # no "kind" metadata
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("file_kind unpickled a file"))
    assert file_kind(str(tmp_path / "c2i_tiny.pt")) == "gpt"
    assert file_kind(str(tmp_path / "vq_tiny.pt")) == "vq"
    assert file_kind(str(tmp_path / "other.pt")) == "other"
    assert file_kind(str(tmp_path / "other.safetensors")) == "other"
    assert file_kind(str(tmp_path / "vq_no_meta.safetensors")) == "vq"


@pytest.mark.parametrize("name,content", [("missing.safetensors", None), ("empty.safetensors", b""),
                                          ("text.pt", b"not weights\n"), ("text.safetensors", b"not weights\n")])
def test_a_file_whose_header_cannot_tell_is_left_to_the_full_load(tmp_path, name, content):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    assert file_kind(str(path)) is None
    if content is not None:
        assert check_file(str(path), "gpt") is None   # the full load names what is wrong with it


def test_check_file_names_the_file_as_shown_the_kind_and_what_to_choose(tmp_path):
    msg = check_file(embedded_path("classifier"), "gpt", shown="embedded/classifier.safetensors")
    assert msg.startswith("embedded/classifier.safetensors is an image classifier") and "not a LlamaGen GPT" in msg
    assert "choose a LlamaGen GPT file" in msg
    msg = check_file(embedded_path("target"), "vq", shown="embedded/target.safetensors")
    assert msg.startswith("embedded/target.safetensors is a LlamaGen GPT, not a VQ tokenizer; choose the VQ tokenizer")
    msg = check_file(str(tmp_path / "c2i_XL_384.pt"), "gpt")
    assert msg.startswith(f"{tmp_path / 'c2i_XL_384.pt'}: no such file; check the path")
    assert check_file(embedded_path("target"), "gpt") is None and check_file(embedded_path("vq"), "vq") is None


@pytest.mark.parametrize("member,words", [("classifier", "is an image classifier"),
                                          ("upsampler", "is a learned upsampler"), ("vq", "is a VQ tokenizer")])
def test_load_model_on_another_kind_of_file_names_its_kind_before_the_image_size(member, words):
    """Issue 37, case 1: the classifier or upsampler chosen as a GPT first said 'does not record its image size'."""
    for size in (None, 64):
        with pytest.raises(CheckpointError) as e:
            load_model(embedded_path(member), embedded_path("vq"), image_size=size)
        msg = str(e.value)
        assert msg.startswith(f"gpt_path: {embedded_path(member)} {words}") and "not a LlamaGen GPT" in msg, msg
        assert "image size" not in msg


def test_load_model_names_every_missing_file_before_the_image_size(tmp_path):
    """Issue 37, case 3: a path that does not exist said the file 'does not record its image size'."""
    gpt, vq = str(tmp_path / "c2i_XL_384.pt"), str(tmp_path / "vq_ds16_c2i.pt")
    with pytest.raises(CheckpointError) as e:
        load_model(gpt, vq)
    msg = str(e.value)
    assert msg.startswith(f"gpt_path: {gpt}: no such file") and f"; vq_path: {vq}: no such file" in msg, msg
    with pytest.raises(CheckpointError, match=r"^vq_path: .*classifier\.safetensors is an image classifier"):
        load_model(embedded_path("target"), embedded_path("classifier"))
    with pytest.raises(CheckpointError, match=r"^gpt_path: .*: no such file"):   # a given tokenizer is not checked
        load_model(gpt, vq, vq=registry.load_vq(embedded_path("vq")))


def test_a_file_without_its_image_size_names_the_input_to_set(tmp_path):
    path = tmp_path / "c2i_tiny.pt"
    torch.save(tiny_gpt(0).state_dict(), path)
    with pytest.raises(ValueError, match=r"^image_size: .*c2i_tiny\.pt does not record the image size .*pass image_size"):
        load_model(str(path), embedded_path("vq"))


def test_the_full_loaders_name_the_packs_other_files_too():
    with pytest.raises(CheckpointError, match=r"expected a LlamaGen GPT checkpoint, but this file is an image classifier"):
        load_gpt(embedded_path("classifier"))
    with pytest.raises(CheckpointError, match=r"expected a VQ tokenizer checkpoint, but this file is a learned upsampler"):
        load_vq(embedded_path("upsampler"))
