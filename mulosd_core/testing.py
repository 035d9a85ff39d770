"""Tiny randomly initialised LlamaGen-format models for tests, examples and property checks."""
from __future__ import annotations

import torch

from .models.llamagen import LlamaGenModel
from .models.llamagen_gpt import GPTConfig, LlamaGenGPT
from .models.llamagen_vq import VQConfig, VQModel


def tiny_vq_config(codebook_size: int = 64, downsample: int = 4) -> VQConfig:
    mult = [1] + [2] * (downsample.bit_length() - 1)
    return VQConfig(codebook_size=codebook_size, codebook_embed_dim=4, encoder_ch_mult=mult, decoder_ch_mult=mult,
                    z_channels=16, ch=8, num_res_blocks=1, norm_groups=4)


def tiny_gpt_config(vocab_size: int = 64, model_type: str = "c2i", dim: int = 32, n_layer: int = 2,
                    n_head: int = 2, num_classes: int = 10, **kw) -> GPTConfig:
    extra = dict(caption_dim=24, cls_token_num=7) if model_type == "t2i" else {}
    extra.update(kw)
    return GPTConfig(dim=dim, n_layer=n_layer, n_head=n_head, vocab_size=vocab_size, num_classes=num_classes,
                     model_type=model_type, multiple_of=16, name="tiny", **extra)


def randomize_(module: torch.nn.Module, seed: int, std: float = 0.2) -> torch.nn.Module:
    """Give every parameter and buffer random values (LlamaGen zero-inits its output head)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if t.is_floating_point():
                if name.endswith("norm.weight") or ".norm" in name and name.endswith("weight"):
                    t.copy_(1.0 + 0.1 * torch.randn(t.shape, generator=g))
                else:
                    t.copy_(std * torch.randn(t.shape, generator=g))
    return module


def tiny_vq(seed: int = 0, codebook_size: int = 64, downsample: int = 4) -> VQModel:
    return randomize_(VQModel(tiny_vq_config(codebook_size, downsample)), seed).eval()


def tiny_gpt(seed: int = 0, **kw) -> LlamaGenGPT:
    return randomize_(LlamaGenGPT(tiny_gpt_config(**kw)), seed).eval()


def tiny_model(grid: int = 4, seed: int = 0, vq: VQModel | None = None, dtype=torch.float32, **kw) -> LlamaGenModel:
    """A LlamaGen model with a grid x grid token grid over a tiny VQ (shared when `vq` is given)."""
    vq = vq if vq is not None else tiny_vq(seed + 1000, kw.get("vocab_size", 64))
    gpt = tiny_gpt(seed, vocab_size=vq.config.codebook_size, **kw).to(dtype)
    return LlamaGenModel(gpt, vq, grid * vq.downsample, name=f"tiny{grid}")


class CountingModel:
    """Wraps a model and counts the forward calls (prefill + forward_tokens) the engine really makes."""

    def __init__(self, inner) -> None:
        self.inner, self.calls = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def prefill(self, rows, cache):
        self.calls += 1
        return self.inner.prefill(rows, cache)

    def forward_tokens(self, tokens, positions, cache, fed_at=None):
        self.calls += 1
        return self.inner.forward_tokens(tokens, positions, cache, fed_at)
