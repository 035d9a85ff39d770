"""The objects MuLo-SD nodes pass to each other, and their ComfyUI types (one spelling each).

    MULOSD_MODEL       ModelHandle: a loaded LlamaGen model (GPT + VQ at an image size)
    MULOSD_UPSAMPLER   mulosd_core.upsample.UpsamplerConfig
    MULOSD_VERIFIER    mulosd_core.engine.VerifierConfig

Handles and configs are shared between nodes and between runs (ComfyUI caches outputs,
the loaders cache models): nodes read them and never change them.
"""
from __future__ import annotations

from dataclasses import dataclass

from comfy_api.latest import io

from mulosd_core.models.llamagen import LlamaGenModel

MulosdModel = io.Custom("MULOSD_MODEL")
MulosdUpsampler = io.Custom("MULOSD_UPSAMPLER")
MulosdVerifier = io.Custom("MULOSD_VERIFIER")


@dataclass(frozen=True)
class ModelHandle:
    """A loaded model plus where it came from, as the loaders hand it to the samplers."""

    model: LlamaGenModel
    name: str          # the file name as the loader's list shows it, e.g. "embedded/target.safetensors"
    path: str          # full path of the GPT file
    vq_path: str       # full path of the VQ tokenizer file

    @property
    def description(self) -> str:
        m, cfg = self.model, self.model.gpt.config
        cond = f"{m.num_classes} classes" if m.model_type == "c2i" else f"{m.cond_len} caption tokens"
        return (f"{self.name}: LlamaGen {m.model_type} GPT {cfg.name} ({cfg.n_layer} layers x {cfg.dim}), "
                f"{m.image_size} px, grid {m.grid}x{m.grid}, {cond}, codebook {m.vocab_size}, "
                f"{str(m.dtype).replace('torch.', '')} on {m.device}")
