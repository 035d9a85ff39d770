"""Load Drafter / Load Target: a LlamaGen GPT file + its VQ tokenizer -> MULOSD_MODEL.

Files are listed from ComfyUI's model folder "mulosd" (ComfyUI/models/mulosd, any
`mulosd:` entry of extra_model_paths.yaml) plus the pack's own models/ folder, whose
embedded/ family is the default. Each list offers only the files of its kind, told by a cheap
read of their header (check_file): GPTs for model_name, tokenizers for vq_name.
Official LlamaGen .pt files load as released (weights
nested under "model", "module" or "state_dict", or flat); the loader's text output says
what was found: family, c2i/t2i, size, image size, grid and VQ. Loading the same file with the same settings again
reuses the loaded model.
"""
from __future__ import annotations

import logging
import os
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import comfy.model_management
import folder_paths
import torch
from comfy_api.latest import io

from mulosd_core.api import (DEFAULT_WEIGHT_MODE, DTYPES, EMBEDDED_DIR, EMBEDDED_MEMBERS, WEIGHT_MODES, CheckpointError,
                             LlamaGenModel, check_file, check_weight_mode, load_device, load_model, load_vq,
                             place_weights, self_drafter, stored_image_size, weights_report)

from .folders import file_stamp, weights_files
from .types import ModelHandle, MulosdModel

log = logging.getLogger("mulosd.nodes")

FOLDER = "mulosd"
DEVICES = ["auto", "cpu", "cuda", "mps"]


def device_options() -> list[str]:
    """The device choices: DEVICES plus cuda:0, cuda:1, ... when torch sees more than one GPU, so the
    drafter and the target can sit on different GPUs (or the drafter on the CPU)."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return DEVICES + ([f"cuda:{i}" for i in range(n)] if n > 1 else [])
CACHE_SIZE = 4


class ModelCache:
    """The loads behind the loader nodes: the `size` most recently used objects by key (the files' stamps
    and the load settings). `get` returns the object a key holds, else calls `load`, keeps its result and
    forgets the least recently used beyond `size`."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple, Any] = OrderedDict()

    def get(self, key: tuple, load: Callable[[], Any]) -> Any:
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        value = load()
        self._items[key] = value
        while len(self._items) > self.size:
            self._items.popitem(last=False)
        return value

    def values(self) -> list:
        return list(self._items.values())

    def keep(self, wanted: Callable[[Any], bool]) -> None:
        """Forget every entry `wanted` refuses."""
        for key in [k for k, v in self._items.items() if not wanted(v)]:
            del self._items[key]

    def __len__(self) -> int:
        return len(self._items)


_models = ModelCache(CACHE_SIZE)
_vqs = ModelCache(CACHE_SIZE + 1)   # the tokenizers the cached models use (+ one of a failed load)


def register_model_folders() -> None:
    """Append (never replace) our folders, so extra_model_paths.yaml entries keep working."""
    folder_paths.add_model_folder_path(FOLDER, os.path.join(folder_paths.models_dir, FOLDER), is_default=False)
    folder_paths.add_model_folder_path(FOLDER, os.path.dirname(EMBEDDED_DIR), is_default=False)
    folder_paths.folder_names_and_paths[FOLDER][1].update(folder_paths.supported_pt_extensions)


register_model_folders()  # at import: ComfyUI 0.3.75 never calls ComfyExtension.on_load


def model_files() -> list[str]:
    """Weights files in the mulosd folders, less those inside a transformers model folder (one with a
    config.json, e.g. a FLAN-T5 text encoder kept there): those are not LlamaGen GPT or VQ files."""
    return weights_files(FOLDER)


def files_of(kind: str) -> list[str]:
    """The model_files() that may be `kind` ('gpt' or 'vq') by a cheap look at their header
    (check_file): a tokenizer, the embedded classifier or upsampler are left out of the GPT list;
    a damaged file, whose header cannot tell, stays in both (loading it says what is wrong with it)."""
    found = ((f, folder_paths.get_full_path(FOLDER, f)) for f in model_files())
    return [f for f, path in found if path is not None and check_file(path, kind) is None]


def gpt_files() -> list[str]:
    return files_of("gpt")


def vq_files() -> list[str]:
    return files_of("vq")


def _is_embedded(path: str) -> bool:
    """A file of a shipped family: in models/embedded (scenes) or one of its sub-folders (patterns)."""
    folder, root = os.path.dirname(os.path.realpath(path)), os.path.realpath(EMBEDDED_DIR)
    return folder == root or folder.startswith(root + os.sep)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return comfy.model_management.get_torch_device()
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: expected a device torch can use; 'cuda' was chosen but torch sees no CUDA GPU (pick auto or cpu)")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ValueError("device: expected a device torch can use; 'mps' was chosen but this machine has no Apple GPU (pick auto or cpu)")
    if name.startswith("cuda:"):
        index = name[5:]
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not n:
            raise ValueError(f"device: expected a device torch can use; {name!r} was chosen but torch sees no CUDA GPU "
                             "(pick auto or cpu)")
        if not index.isdigit() or int(index) >= n:
            raise ValueError(f"device: expected one of the GPUs torch sees (cuda:0 to cuda:{n - 1}), got {name!r}")
        return torch.device(name)
    if name not in DEVICES:
        raise ValueError(f"device: expected one of {device_options()}, got {name!r}")
    return torch.device(name)


def resolve_vq(gpt_name: str, gpt_path: str, vq_name: str) -> tuple[str, str]:
    """The VQ tokenizer's full path and its name as the list shows it (for 'auto', the embedded one beside the GPT)."""
    if vq_name != "auto":
        return folder_paths.get_full_path_or_raise(FOLDER, vq_name), vq_name
    if _is_embedded(gpt_path):   # each shipped family keeps its tokenizer beside its GPTs
        vq = EMBEDDED_MEMBERS["vq"]
        return os.path.join(os.path.dirname(gpt_path), vq), "/".join(filter(None, (os.path.dirname(gpt_name), vq)))
    raise ValueError(f"vq_name: 'auto' only knows the tokenizer of the embedded models; choose the VQ tokenizer file of "
                     f"{gpt_name} (LlamaGen: vq_ds16_c2i.pt for c2i models, vq_ds16_t2i.pt for t2i models)")


def resolve_image_size(gpt_name: str, gpt_path: str, image_size: int) -> int:
    """0 = the size the file records (our safetensors), else the number ending the file name (c2i_XL_384.pt)."""
    if image_size:
        return image_size
    size = stored_image_size(gpt_path)
    if size is None:
        m = re.search(r"_(\d{2,4})\.[a-z]+$", os.path.basename(gpt_name))
        size = int(m.group(1)) if m else None
    if size is None:
        raise ValueError(f"image_size: {gpt_name} does not record the image size it generates at; set image_size (e.g. 256, 384, 512)")
    return size


def read_file(path: str, what: str, read):
    """`read()`, with any failure that is not already the loader's own error (CheckpointError, which names
    the file and the problem) turned into one that names the file and says what went wrong."""
    try:
        return read()
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{path}: could not be loaded as a {what} ({type(e).__name__}: "
                              f"{str(e).strip()[:300]})") from None


def load(gpt_name: str, vq_name: str, image_size: int, device: str, dtype: str, weights: str = DEFAULT_WEIGHT_MODE) -> ModelHandle:
    """The cached load behind both loader nodes."""
    problems = check_names(gpt_name, vq_name)   # a missing file or one of another kind, before its image size
    if problems is not True:
        raise ValueError(problems)
    gpt_path = folder_paths.get_full_path_or_raise(FOLDER, gpt_name)
    vq_path, vq_shown = resolve_vq(gpt_name, gpt_path, vq_name)
    size = resolve_image_size(gpt_name, gpt_path, image_size)
    dev = resolve_device(device)
    if dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {list(DTYPES)}, got {dtype!r}")
    check_weight_mode(weights)
    key = (file_stamp(gpt_path), file_stamp(vq_path), size, str(dev), dtype, weights)
    model = _models.get(key, lambda: _load_model(gpt_name, gpt_path, vq_path, size, dev, dtype, weights, vq_shown))
    used = {id(m.vq) for m in _models.values()}
    _vqs.keep(lambda vq: id(vq) in used)
    return ModelHandle(model, gpt_name, gpt_path, vq_path, vq_shown)


def _load_model(gpt_name: str, gpt_path: str, vq_path: str, size: int, dev: torch.device, dtype: str,
                weights: str, vq_shown: str) -> LlamaGenModel:
    """GPT + VQ tokenizer (shared with the cached models that use the same file on the same device)."""
    vq = _vqs.get((file_stamp(vq_path), str(dev)),
                  lambda: read_file(vq_path, "VQ tokenizer", lambda: load_vq(vq_path, device=dev)))
    if size % vq.downsample:
        raise ValueError(f"image_size: expected a multiple of {vq.downsample} (the downsampling of the tokenizer "
                         f"{vq_shown}), got {size}")
    name = os.path.splitext(gpt_name.replace("\\", "/"))[0]
    model = read_file(gpt_path, "LlamaGen GPT", lambda: load_model(
        gpt_path, vq_path, size, DTYPES[dtype], load_device(weights, dev), name=name, vq=vq))
    place_weights(model, dev, weights)
    log.info("MuLo-SD: loaded %s (%d px, grid %d) on %s; %s", gpt_name, size, model.grid, dev,
             weights_report(model))
    return model


def loader_inputs(default: str, role: str) -> list:
    return [
        io.Combo.Input("model_name", options=gpt_files(), default=default,
                       tooltip=f"The {role}'s LlamaGen GPT weights (.safetensors or .pt), from ComfyUI/models/mulosd or the "
                               "pack's models/ folder; embedded/* are the small models shipped with the pack."),
        io.Combo.Input("vq_name", options=["auto"] + vq_files(), default="auto",
                       tooltip="The VQ tokenizer the GPT was trained with. auto = the embedded tokenizer (embedded models only); "
                               "LlamaGen files need theirs, e.g. vq_ds16_c2i.pt or vq_ds16_t2i.pt."),
        io.Int.Input("image_size", default=0, min=0, max=4096, step=16,
                     tooltip="Image size in pixels to generate at; the token grid is image_size / the tokenizer's downsampling. "
                             "0 = the size the file records (or the number ending its name, e.g. c2i_XL_384.pt)."),
        io.Combo.Input("device", options=device_options(), default="auto",
                       tooltip="Where the model runs; auto = ComfyUI's compute device (honours --cpu). With several "
                               "GPUs, cuda:N places this model on GPU N, e.g. the drafter on one GPU and the target on "
                               "another; a small drafter can also run on the cpu."),
        io.Combo.Input("dtype", options=list(DTYPES), default="float32",
                       tooltip="Weight precision of the GPT (the VQ tokenizer stays float32); bfloat16/float16 halve memory on GPUs."),
        weights_input(),
    ]


def weights_input():
    return io.Combo.Input(
        "weights", options=list(WEIGHT_MODES), default=DEFAULT_WEIGHT_MODE,
        tooltip="Where the weights wait between uses on a GPU. 'stream from cpu' keeps the transformer blocks in CPU "
                "memory and copies each to the GPU only while it runs: the GPU then holds little more than the caches, "
                "so a drafter and a target fit where one model did, at the cost of one copy of the weights per call "
                "(cheapest for the target, which MuLo-SD calls least). auto streams only when the weights would not "
                "fit in three quarters of the free GPU memory; 'on device' never streams. No effect on the cpu.")


def check_names(model_name, vq_name) -> bool | str:
    """Before anything runs (ComfyUI 0.3.75 does not check V3 combo values itself): every file that is missing
    or of another kind, each after its input. ComfyUI shows the one message on both inputs, so it names both."""
    files = model_files()
    problems = [p for p in (_name_problem("model_name", model_name, "gpt", files),
                            _name_problem("vq_name", None if vq_name == "auto" else vq_name, "vq", files)) if p]
    return "; ".join(problems) or True


def _name_problem(input_name: str, name, kind: str, files: list[str]) -> str | None:
    if name is None:   # linked from another node: checked when it runs
        return None
    path = folder_paths.get_full_path(FOLDER, name) if name in files else None
    if path is None:
        folders = folder_paths.get_folder_paths(FOLDER)
        return (f"{input_name}: {name!r} is not in the mulosd model folders ({', '.join(folders)}); download it into "
                f"{folders[0]} (LlamaGen's files: huggingface.co/FoundationVision/LlamaGen), or choose a listed file")
    problem = check_file(path, kind, shown=name)
    return f"{input_name}: {problem}" if problem else None


class _ModelLoader(io.ComfyNode):
    """What Load Target and Load Drafter share: they differ only in their schema (default file, texts)."""

    @classmethod
    def validate_inputs(cls, model_name, vq_name) -> bool | str:
        return check_names(model_name, vq_name)

    @classmethod
    def execute(cls, model_name, vq_name, image_size, device, dtype, weights=DEFAULT_WEIGHT_MODE) -> io.NodeOutput:
        handle = load(model_name, vq_name, image_size, device, dtype, weights)
        return io.NodeOutput(handle, ui={"text": [handle.description]})


class MuLoSDLoadTarget(_ModelLoader):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="MuLoSDLoadTarget", display_name="Load Target", category="MuLo-SD/loaders",
            description="Loads the target model: the high-resolution autoregressive model whose samples MuLo-SD "
                        "reproduces. It verifies the drafter's proposals and resamples what it rejects.",
            inputs=loader_inputs("embedded/target.safetensors", "target"),
            outputs=[MulosdModel.Output("target", display_name="target",
                                        tooltip="The loaded target model (GPT + VQ tokenizer at the chosen image size).")],
        )


class MuLoSDLoadDrafter(_ModelLoader):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="MuLoSDLoadDrafter", display_name="Load Drafter", category="MuLo-SD/loaders",
            description="Loads the drafter: a cheaper model sharing the target's VQ tokenizer. A lower-resolution drafter "
                        "(embedded/drafter) is MuLo-SD's multi-scale case; a same-resolution one (embedded/sd_drafter) "
                        "gives classic speculative decoding and LANTERN.",
            inputs=loader_inputs("embedded/drafter.safetensors", "drafter"),
            outputs=[MulosdModel.Output("drafter", display_name="drafter",
                                        tooltip="The loaded drafter model (GPT + VQ tokenizer at the chosen image size).")],
        )



class MuLoSDSelfDrafter(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="MuLoSDSelfDrafter", display_name="Self Drafter", category="MuLo-SD/loaders",
            description="The target drafts for itself: the same weights run at 1/ratio of its grid with their own KV "
                        "cache. No file is loaded and no weights are added in memory. Its drafts are good only if "
                        "the target was trained at that grid too: embedded/self_target is (both grids); other "
                        "LlamaGen-format targets run, but self-drafting is untested on released weights.",
            inputs=[
                MulosdModel.Input("target", tooltip="The target (Load Target) that drafts for itself."),
                io.Int.Input("ratio", default=2, min=2, max=8,
                             tooltip="The drafter's grid is the target's divided by this (2: a 16 x 16 target drafts "
                                     "at 8 x 8); it must divide the target's grid."),
                io.Int.Input("layers", default=0, min=0, max=128, optional=True,
                             tooltip="Blocks the drafter runs before the target's head (an early exit). 0: what the "
                                     "checkpoint records for this grid (embedded/self_target records its exit), "
                                     "else all of them."),
            ],
            outputs=[MulosdModel.Output("drafter", display_name="drafter",
                                        tooltip="The target at the lower grid, for the MuLo-SD Sampler's drafter input.")],
        )

    @classmethod
    def execute(cls, target: ModelHandle, ratio: int = 2, layers: int = 0) -> io.NodeOutput:
        model = self_drafter(target.model, ratio, layers or None)
        blocks = model.num_blocks
        depth = f"{model.exit_layers} of {blocks} blocks" if model.exit_layers else f"all {blocks} blocks"
        handle = ModelHandle(model, f"{target.name} @ {model.grid} x {model.grid} (self)", target.path, target.vq_path,
                             target.vq_name)
        text = (f"{handle.name}: no second file loaded; the target's own weights at a {model.grid} x {model.grid} "
                f"grid, {depth}")
        return io.NodeOutput(handle, ui={"text": [text]})
