"""The objects MuLo-SD nodes pass to each other, and their ComfyUI types (one spelling each).

    MULOSD_MODEL          ModelHandle: a loaded LlamaGen model (GPT + VQ at an image size) or Janus-Pro model
    MULOSD_UPSAMPLER      mulosd_core.upsample.UpsamplerConfig
    MULOSD_VERIFIER       mulosd_core.api.VerifierConfig
    MULOSD_TEXT_ENCODER   TextEncoderHandle: a FLAN-T5 caption encoder (t2i models)
    MULOSD_CONDITIONING   Conditioning: one prompt's caption features and mask (LlamaGen t2i), or
                          JanusPrompt: one prompt as text (Janus-Pro formats and tokenises it itself)

Handles and configs are shared between nodes and between runs (ComfyUI caches outputs,
the loaders cache models): nodes read them and never change them. The one exception is
where a text encoder's weights sit (GPU while encoding, CPU when offloaded), which the
text prompt node manages.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from comfy_api.latest import io

from mulosd_core.api import ImageARModel, T5CaptionEncoder, is_streamed, weights_report

MulosdModel = io.Custom("MULOSD_MODEL")
MulosdUpsampler = io.Custom("MULOSD_UPSAMPLER")
MulosdVerifier = io.Custom("MULOSD_VERIFIER")
MulosdTextEncoder = io.Custom("MULOSD_TEXT_ENCODER")
MulosdConditioning = io.Custom("MULOSD_CONDITIONING")


@dataclass(frozen=True)
class ModelHandle:
    """A loaded model plus where it came from, as the loaders hand it to the samplers."""

    model: ImageARModel   # a LlamaGen (GPT + VQ at an image size) or Janus-Pro adapter
    name: str          # as the loader's list shows it, e.g. "embedded/target.safetensors" or "janus/Janus-Pro-7B"
    path: str          # full path of the GPT file (Janus-Pro: of the model folder)
    vq_path: str       # full path of the VQ tokenizer file (Janus-Pro: the model folder, which holds the VQ)
    vq_name: str = ""  # the VQ file as the loader's list shows it, e.g. "embedded/patterns/vq.safetensors"

    @property
    def description(self) -> str:
        """The loader's text output: the listed name, what the model says it is and, when streamed, where its
        weights live."""
        return f"{self.name}: {self.model.describe(self.vq_name or os.path.basename(self.vq_path))}{self._streaming}"

    @property
    def _streaming(self) -> str:
        return f"; {weights_report(self.model)}" if is_streamed(self.model) else ""


@dataclass(frozen=True)
class TextEncoderHandle:
    """A loaded caption encoder and where it computes; `offload` = keep it on the CPU between prompts."""

    encoder: T5CaptionEncoder
    name: str              # the folder as the loader's list shows it, e.g. "flan-t5-xl"
    path: str              # full path of the folder
    device: torch.device   # where it encodes
    offload: bool

    @property
    def description(self) -> str:
        e = self.encoder
        where = f"encodes on {self.device}" + (", waits on cpu (offload)" if self.offload else "")
        return (f"{self.name}: T5 encoder, {e.dim}-wide features, {e.max_length} caption tokens, "
                f"{str(e.dtype).replace('torch.', '')}, {where}")


@dataclass(frozen=True)
class Conditioning:
    """Caption features of one prompt, as LlamaGen t2i takes them (left-padded, padded rows zero)."""

    features: torch.Tensor   # [1, T, C], T = the encoder's max_length (120), C = its width (2048 for FLAN-T5-XL)
    mask: torch.Tensor       # [1, T] long, 1 = a real caption token
    prompt: str
    encoder: str             # the text encoder's name, for messages

    @property
    def tokens(self) -> int:
        return int(self.mask.sum())

    def batch(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The prompt repeated for a batch of n: features [n, T, C], mask [n, T]."""
        return self.features.repeat(n, 1, 1), self.mask.repeat(n, 1)


@dataclass(frozen=True)
class JanusPrompt:
    """One prompt as text, for Janus-Pro: each model formats it (chat turn + image-start) with its own processor."""

    prompt: str
