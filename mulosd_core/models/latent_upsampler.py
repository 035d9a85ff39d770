"""The learned upsampler: low-res token rows -> the target's tokens under them (docs/DESIGN.md section 3.2).

A small network in a latent space of its own: token embeddings, a few residual convolutions
that are row-causal (a 3x3 kernel whose bottom row is zero, so an output row sees its own
low-res row and the rows above, never the rows below, which are not drafted yet), then a 1x1
expansion, pixel shuffle by r and a linear head over the codebook. It predicts the tokens the
VQ would give the full-resolution image, where the pixel route (decode, resize, re-encode)
can only give the tokens of a blurred one; drafts land where the target's samples land.

Trained by `python -m mulosd_core.train.family` (stage "upsampler") on pairs of the same
images encoded at both resolutions; tied to one codebook (`codebook_id` in the file).
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .checkpoints import CheckpointError, check_and_load, read_safetensors, save_safetensors

UPSAMPLER_KIND = "latent_upsampler"   # the "kind" metadata of its files


@dataclass
class LatentUpsamplerConfig:
    codebook_size: int = 1024
    ratio: int = 2
    channels: int = 64
    layers: int = 4

    def to_dict(self) -> dict:
        return asdict(self)


class RowCausalConv(nn.Conv2d):
    """3x3 convolution that reads the row above and its own row only."""

    def __init__(self, channels: int) -> None:
        super().__init__(channels, channels, 3, padding=1)
        mask = torch.ones(1, 1, 3, 3)
        mask[..., 2, :] = 0
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight * self.mask, self.bias, padding=1)


class LatentUpsampler(nn.Module):
    def __init__(self, cfg: LatentUpsamplerConfig) -> None:
        super().__init__()
        self.config = cfg
        c, r = cfg.channels, cfg.ratio
        self.embed = nn.Embedding(cfg.codebook_size, c)
        self.norms = nn.ModuleList([nn.LayerNorm(c) for _ in range(cfg.layers)])   # per position: stays row-causal
        self.convs = nn.ModuleList([RowCausalConv(c) for _ in range(cfg.layers)])
        self.expand = nn.Conv2d(c, c * r * r, 1)
        self.head = nn.Linear(c, cfg.codebook_size)
        self.codebook_id = ""   # fingerprint of the VQ codebook it was trained on (set by load / training)

    def forward(self, tokens: torch.Tensor, rows: int, width: int) -> torch.Tensor:
        """Low-res tokens [B, rows*width] -> logits [B, rows*r*width*r, V] of the target tokens, raster order."""
        x = self.embed(tokens.long()).view(-1, rows, width, self.config.channels)   # channels last
        for norm, conv in zip(self.norms, self.convs):
            x = x + conv(F.gelu(norm(x)).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        x = F.pixel_shuffle(self.expand(x.permute(0, 3, 1, 2)), self.config.ratio)
        return self.head(x.permute(0, 2, 3, 1)).flatten(1, 2)

    @torch.no_grad()
    def upsample(self, tokens: torch.Tensor, rows: int, width: int) -> torch.Tensor:
        """The most likely target tokens [B, rows*r*width*r] (a deterministic draft)."""
        return self.forward(tokens, rows, width).argmax(-1)


def save_latent_upsampler(net: LatentUpsampler, path: str) -> None:
    meta = {"kind": UPSAMPLER_KIND, "mulosd_config": net.config.to_dict(), "codebook_id": net.codebook_id}
    save_safetensors({k: v.half() for k, v in net.state_dict().items()}, path, meta)


def load_latent_upsampler(path: str, device: str | torch.device = "cpu") -> LatentUpsampler:
    """Read a learned upsampler written by `save_latent_upsampler` (safetensors only)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no learned upsampler there; train one with "
                                "`python -m mulosd_core.train.family --stages upsampler` or use the pixel upsampler")
    sd, meta = read_safetensors(path)
    if meta.get("kind") != UPSAMPLER_KIND:
        raise CheckpointError(f"{path}: not a learned upsampler (kind {meta.get('kind')!r}, expected {UPSAMPLER_KIND!r})")
    net = LatentUpsampler(LatentUpsamplerConfig(**json.loads(meta["mulosd_config"])))
    check_and_load(net, {k: v.float() for k, v in sd.items()}, path, "learned upsampler")
    net.codebook_id = meta.get("codebook_id", "")
    return net.to(device).eval()


_cache: dict[tuple, LatentUpsampler] = {}
_lock = threading.Lock()


def cached_latent_upsampler(path: str, device: torch.device) -> LatentUpsampler:
    """`load_latent_upsampler` once per (file, its modification time and size, device)."""
    st = os.stat(path) if os.path.isfile(path) else None
    key = (os.path.abspath(path), st and st.st_mtime_ns, st and st.st_size, str(device))
    with _lock:
        net = _cache.get(key)
    if net is None:
        net = load_latent_upsampler(path, device)
        with _lock:
            for k in [k for k in _cache if k[0] == key[0]]:
                del _cache[k]
            _cache[key] = net
    return net
