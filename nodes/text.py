"""Load Text Encoder and MuLo-SD Text Prompt: a prompt -> LlamaGen t2i caption conditioning.

The encoder is a local FLAN-T5 folder (config.json, weights, tokenizer files), listed from
ComfyUI's model folder "text_encoders" and from our "mulosd" folder; nothing is
downloaded. The prompt is encoded in its own node, as ComfyUI's CLIP Text Encode does, so
one encoding feeds both samplers, ComfyUI caches it across seeds, and the encoder can go
back to the CPU (offload) before the two GPTs run.
"""
from __future__ import annotations

import logging

import comfy.model_management
import torch
from comfy_api.latest import io

from mulosd_core.api import DTYPES, T5CaptionEncoder, clean_caption

from .folders import base_paths, folder_stamp, model_folders
from .loaders import FOLDER, ModelCache, device_options, resolve_device
from .types import Conditioning, MulosdConditioning, MulosdTextEncoder, TextEncoderHandle

log = logging.getLogger("mulosd.nodes")

TEXT_FOLDERS = ("text_encoders", FOLDER)
DEFAULT_ENCODER = "flan-t5-xl"
DTYPE_OPTIONS = ["auto", *DTYPES]   # auto: bfloat16 on GPUs that have it, else float32 (resolve_dtype)
CACHE_SIZE = 2
_encoders = ModelCache(CACHE_SIZE)
EXAMPLE_PROMPT = ("A portrait photo of a kangaroo wearing an orange hoodie and blue sunglasses standing on the grass "
                  "in front of the Sydney Opera House holding a sign on the chest that says Welcome Friends!")


def encoder_folders() -> dict[str, str]:
    """Listed name -> full path of every T5 folder (a folder with a T5 config.json) under the model folders."""
    return model_folders(TEXT_FOLDERS, ("t5", "mt5"))


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name not in DTYPE_OPTIONS:
        raise ValueError(f"dtype: expected one of {DTYPE_OPTIONS}, got {name!r}")
    if name != "auto":
        return DTYPES[name]
    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    return torch.bfloat16 if cuda_bf16 else torch.float32  # upstream encodes in bf16 on GPUs


def load_encoder(encoder_name: str, device: str, dtype: str, offload: bool) -> TextEncoderHandle:
    """The cached load behind Load Text Encoder; with offload the weights wait on the CPU."""
    folders = encoder_folders()
    if encoder_name not in folders:
        raise ValueError(_missing(encoder_name, folders))
    path, dev = folders[encoder_name], resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    key = (folder_stamp(path), dt)
    home = torch.device("cpu") if offload else dev

    def build() -> T5CaptionEncoder:
        encoder = T5CaptionEncoder(path, home, dt)
        log.info("MuLo-SD: loaded text encoder %s (%s) on %s", encoder_name, dt, home)
        return encoder
    encoder = _encoders.get(key, build)
    encoder.to(home)   # a cached encoder may have been loaded with the other offload setting
    return TextEncoderHandle(encoder, encoder_name, path, dev, bool(offload))


def check_prompt(prompt) -> None:
    if not isinstance(prompt, str) or not clean_caption(prompt):
        raise ValueError(f"prompt: expected a caption for the text-to-image model (non-empty text; use cfg, not an "
                         f"empty prompt, for unconditional guidance), got {prompt!r}")


def validate_prompt(check, prompt) -> bool | str:
    """A prompt node's validate_inputs answer: True, or the message of the ValueError `check` raises."""
    if prompt is None:
        return True
    try:
        check(prompt)
    except ValueError as e:
        return str(e)
    return True


def encode(handle: TextEncoderHandle, prompt: str) -> Conditioning:
    """Encode on the handle's device; with offload the encoder goes back to the CPU afterwards, even on errors."""
    check_prompt(prompt)
    enc = handle.encoder
    try:
        enc.to(handle.device)
        features, mask = enc.encode([prompt])
    finally:
        if handle.offload and handle.device.type != "cpu":
            enc.to("cpu")
            comfy.model_management.soft_empty_cache()
    out = comfy.model_management.intermediate_device()
    return Conditioning(features.to(out), mask.to(out), prompt, handle.name)


def _missing(name, folders: dict) -> str:
    where = base_paths(TEXT_FOLDERS)
    return (f"encoder_name: expected one of the {len(folders)} T5 folders (a folder with config.json, weights and "
            f"tokenizer files) in {where}, got {name!r}")


class MuLoSDLoadTextEncoder(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        names = list(encoder_folders())
        return io.Schema(
            node_id="MuLoSDLoadTextEncoder", display_name="Load Text Encoder", category="MuLo-SD/loaders",
            description="Loads the caption encoder of LlamaGen text-to-image models: a local FLAN-T5 folder "
                        "(flan-t5-xl for the released t2i models) from ComfyUI/models/text_encoders or "
                        "ComfyUI/models/mulosd. Connect it to a MuLo-SD Text Prompt node.",
            inputs=[
                io.Combo.Input("encoder_name", options=names, default=DEFAULT_ENCODER if DEFAULT_ENCODER in names else None,
                               tooltip="A T5 folder (config.json, weights, tokenizer files) under ComfyUI/models/"
                                       "text_encoders or ComfyUI/models/mulosd, e.g. flan-t5-xl (google/flan-t5-xl) "
                                       "for the released LlamaGen t2i models."),
                io.Combo.Input("device", options=device_options(), default="auto",
                               tooltip="Where the encoder runs; auto = ComfyUI's compute device (honours --cpu)."),
                io.Combo.Input("dtype", options=DTYPE_OPTIONS, default="auto",
                               tooltip="Weight precision; auto = bfloat16 on GPUs that have it (as LlamaGen encodes), "
                                       "else float32. float16 can overflow inside T5."),
                io.Boolean.Input("offload", default=True,
                                 tooltip="Keep the encoder on the CPU and move it to the device only while a prompt "
                                         "is encoded, so the drafter and target have the GPU to themselves."),
            ],
            outputs=[MulosdTextEncoder.Output("text_encoder", display_name="text_encoder",
                                              tooltip="The loaded caption encoder, for MuLo-SD Text Prompt.")],
        )

    @classmethod
    def validate_inputs(cls, encoder_name=None) -> bool | str:
        folders = encoder_folders()
        return True if encoder_name is None or encoder_name in folders else _missing(encoder_name, folders)

    @classmethod
    def execute(cls, encoder_name, device, dtype, offload) -> io.NodeOutput:
        handle = load_encoder(encoder_name, device, dtype, offload)
        return io.NodeOutput(handle, ui={"text": [handle.description]})


class MuLoSDTextPrompt(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="MuLoSDTextPrompt", display_name="MuLo-SD Text Prompt", category="MuLo-SD/conditioning",
            description="Encodes a prompt for a text-to-image (t2i) target as LlamaGen does: T5 features of up to 120 "
                        "caption tokens, padded on the left. Connect the output to the conditioning input of the "
                        "MuLo-SD Sampler and the AR Sampler; one encoding serves both.",
            inputs=[
                MulosdTextEncoder.Input("text_encoder", tooltip="The caption encoder (Load Text Encoder)."),
                io.String.Input("prompt", multiline=True, default=EXAMPLE_PROMPT,
                                tooltip="What to draw. Lower-cased and whitespace-collapsed as LlamaGen does; longer "
                                        "prompts are cut at the encoder's caption length (120 tokens). Must not be empty."),
            ],
            outputs=[MulosdConditioning.Output("conditioning", display_name="conditioning",
                                               tooltip="Caption features and mask of the prompt, for the samplers' "
                                                       "conditioning input (t2i targets only).")],
        )

    @classmethod
    def validate_inputs(cls, prompt=None) -> bool | str:
        return validate_prompt(check_prompt, prompt)

    @classmethod
    def execute(cls, text_encoder: TextEncoderHandle, prompt: str) -> io.NodeOutput:
        cond = encode(text_encoder, prompt)
        length = cond.features.shape[1]
        note = f"{cond.tokens} of {length} caption tokens" + (" (prompt cut at the limit)" if cond.tokens >= length else "")
        return io.NodeOutput(cond, ui={"text": [note]})
