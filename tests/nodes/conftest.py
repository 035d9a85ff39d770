"""Unit tests of the nodes against the real ComfyUI code (no server, no mocks).

ComfyUI's `comfy_api`, `comfy` and `folder_paths` come from the installed ComfyUI
(MULOSD_COMFYUI or mulosd_core.devenv.comfyui_dir(), made by scripts/setup_comfyui.sh). The
pack's `nodes` package is imported as `mulosd_pack.nodes` without running the root
__init__.py (a package module whose path is the repo root), as ComfyUI imports it
from custom_nodes/ under its own name. Tiny random LlamaGen models are written to a
temporary model folder registered with folder_paths, as a user's files would be.
"""
from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

import pytest
import torch

from mulosd_core import devenv

ROOT = Path(__file__).resolve().parents[2]
COMFYUI = devenv.comfyui_dir()


def _import_pack():
    if not (COMFYUI / "comfy_api").is_dir():
        msg = f"No ComfyUI at {COMFYUI}: install it with bash scripts/setup_comfyui.sh (or run bash scripts/test.sh)"
        if os.environ.get("MULOSD_SKIP_INTEGRATION") == "1":
            pytest.skip(msg + " [MULOSD_SKIP_INTEGRATION=1]", allow_module_level=True)
        pytest.fail(msg, pytrace=False)
    if str(COMFYUI) not in sys.path:
        sys.path.insert(0, str(COMFYUI))
    from comfy.cli_args import args
    if not torch.cuda.is_available():
        args.cpu = True  # as the test server runs (--cpu); comfy.model_management reads it at import
    if "mulosd_pack" not in sys.modules:
        pkg = types.ModuleType("mulosd_pack")
        pkg.__path__ = [str(ROOT)]
        sys.modules["mulosd_pack"] = pkg
    return importlib.import_module("mulosd_pack.nodes")


@pytest.fixture(scope="session")
def pack():
    return _import_pack()


def _save_family(folder: Path, vq_seed: int = 1000) -> dict:
    """A tiny c2i family: target grid 8 (32 px), drafter grid 4 (16 px), same-res drafter, shared VQ."""
    from mulosd_core.models.checkpoints import save_safetensors
    from mulosd_core.testing import tiny_gpt, tiny_vq

    folder.mkdir(parents=True, exist_ok=True)
    vq = tiny_vq(seed=vq_seed, codebook_size=64, downsample=4)
    save_safetensors(vq.state_dict(), str(folder / "vq.safetensors"), {"mulosd_config": vq.config.to_dict(), "kind": "vq"})
    for name, grid, seed in (("target", 8, 0), ("drafter", 4, 1), ("sd_drafter", 8, 2)):
        gpt = tiny_gpt(seed, vocab_size=64, num_classes=10)
        meta = {"mulosd_config": {**gpt.config.to_dict(), "image_size": grid * 4}, "kind": "gpt"}
        save_safetensors(gpt.state_dict(), str(folder / f"{name}.safetensors"), meta)
    # trained (as its metadata says) to draft for itself at grid 4 after its first block
    gpt = tiny_gpt(3, vocab_size=64, num_classes=10)
    meta = {"mulosd_config": {**gpt.config.to_dict(), "image_size": 32}, "kind": "gpt",
            "mulosd_self_draft": {"grid": 4, "layers": 1}}
    save_safetensors(gpt.state_dict(), str(folder / "self_target.safetensors"), meta)
    return {"vq": folder / "vq.safetensors"}


@pytest.fixture(scope="session")
def tiny_models(pack, tmp_path_factory):
    """The pack's embedded folder pointed at a tiny family (<tmp>/models/embedded/*), plus a user folder.

    Returns the user folder (registered under "mulosd"), which holds `c2i_tiny_32.pt` (a
    flat torch state dict: no head count, no image size) and `vq_other.safetensors`, a
    tokenizer with a different codebook.
    """
    import folder_paths

    from mulosd_core.models.checkpoints import save_safetensors
    from mulosd_core.testing import tiny_gpt, tiny_vq

    loaders = importlib.import_module("mulosd_pack.nodes.loaders")
    base = tmp_path_factory.mktemp("mulosd-models")
    _save_family(base / "models" / "embedded")
    _save_family(base / "models" / "embedded" / "patterns", vq_seed=2000)   # a second shipped family, own tokenizer
    user = base / "user"
    user.mkdir()
    torch.save(tiny_gpt(5, vocab_size=64, num_classes=10).state_dict(), user / "c2i_tiny_32.pt")
    other = tiny_vq(seed=77, codebook_size=64, downsample=4)
    save_safetensors(other.state_dict(), str(user / "vq_other.safetensors"), {"mulosd_config": other.config.to_dict()})
    old_embedded = loaders.EMBEDDED_DIR
    paths = folder_paths.folder_names_and_paths[loaders.FOLDER][0]
    shipped = os.path.dirname(old_embedded)
    paths.remove(shipped)  # the real embedded models (if trained) would shadow the tiny ones
    loaders.EMBEDDED_DIR = str(base / "models" / "embedded")
    loaders.register_model_folders()
    folder_paths.add_model_folder_path(loaders.FOLDER, str(user))
    yield user
    loaders.EMBEDDED_DIR = old_embedded
    for p in (str(user), str(base / "models")):
        paths.remove(p)
    paths.append(shipped)


T5_WORDS = "a an the red green blue cat dog bird sits on mat in garden under tree photo of with small big".split()
T5_DIM = 24


def save_tiny_t5(folder: Path) -> Path:
    """A tiny random FLAN-T5-style folder (config.json, weights, word-level tokenizer), built offline."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(T5_WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                            model_max_length=512).save_pretrained(str(folder))
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=100, d_model=T5_DIM, d_kv=8, d_ff=48, num_layers=2, num_heads=3,
                   pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    T5EncoderModel(cfg).eval().save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def tiny_t2i(tiny_models):
    """A tiny t2i family in the user's mulosd folder, beside a tiny T5 folder (the text encoder).

    `t2i_tiny_target.safetensors` (grid 8, 32 px) and `t2i_tiny_drafter.safetensors` (grid 4,
    16 px) take 120 caption tokens of width 24 (the tiny T5's d_model) and share the tiny
    family's VQ (`embedded/vq.safetensors`); the encoder is listed as `tiny-flan-t5`.
    """
    from mulosd_core.models.checkpoints import save_safetensors
    from mulosd_core.testing import tiny_gpt

    user = tiny_models
    save_tiny_t5(user / "tiny-flan-t5")
    for name, grid, seed in (("t2i_tiny_target", 8, 10), ("t2i_tiny_drafter", 4, 11)):
        gpt = tiny_gpt(seed, vocab_size=64, model_type="t2i", caption_dim=T5_DIM, cls_token_num=120)
        meta = {"mulosd_config": {**gpt.config.to_dict(), "image_size": grid * 4}, "kind": "gpt"}
        save_safetensors(gpt.state_dict(), str(user / f"{name}.safetensors"), meta)
    return user
