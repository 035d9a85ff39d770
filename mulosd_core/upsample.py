"""Upsamplers U_r: drafted low-res rows -> target rows (SPEC section 2 step 2).

Each takes the drafted band of low-res token rows, plus one context row above it (a
"halo" that keeps the pixel route's convolutions from seeing an artificial top edge),
and returns the target tokens of the r x rows rows under the drafted rows.
"""
from __future__ import annotations

from dataclasses import dataclass, asdict
from typing import Optional

import torch
import torch.nn.functional as F

from .imageops import FILTERS, resize
from .models.protocol import ImageARModel

KINDS = ("pixel", "nearest", "embedding")


@dataclass
class UpsamplerConfig:
    kind: str = "pixel"
    ratio: Optional[int] = None      # derived from the two models when None
    filter: str = "bicubic"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"upsampler kind must be one of {KINDS}, got {self.kind!r}"
                             + (" (the learned upsampler is not shipped: it did not beat the training-free routes)" if self.kind == "learned" else ""))
        if self.filter not in FILTERS:
            raise ValueError(f"upsampler filter must be one of {FILTERS}, got {self.filter!r}")
        if self.ratio is not None and (int(self.ratio) != self.ratio or self.ratio < 1):
            raise ValueError(f"upsampler ratio must be a positive integer, got {self.ratio}")

    def to_dict(self) -> dict:
        return asdict(self)


def resolution_ratio(target_grid: int, drafter_grid: int) -> int:
    """r = s_p / s_q; must be a positive integer (r = 1 is a same-resolution drafter)."""
    if drafter_grid > target_grid:
        raise ValueError(f"the drafter's grid ({drafter_grid}x{drafter_grid}) is larger than the target's "
                         f"({target_grid}x{target_grid}); the drafter must work at the same or a lower resolution")
    if target_grid % drafter_grid:
        raise ValueError(f"resolution ratio target/drafter = {target_grid}/{drafter_grid} is not an integer; "
                         f"pick image sizes whose token grids divide (e.g. r = 2 or 4)")
    return target_grid // drafter_grid


def upsample_rows(cfg: UpsamplerConfig, drafter: ImageARModel, target: ImageARModel, low: torch.Tensor,
                  rows: int, halo: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Low-res tokens [B, rows*s_q] (+ halo [B, s_q]) -> target tokens [B, rows*r*s_p]."""
    r = resolution_ratio(target.grid, drafter.grid)   # raises on a non-integer ratio or a larger drafter grid
    if cfg.ratio is not None and cfg.ratio != r:
        raise ValueError(f"upsampler ratio {cfg.ratio} does not match the models: target grid {target.grid} / "
                         f"drafter grid {drafter.grid} = {r}")
    if r == 1:
        return low
    band, n_rows = (low, rows) if halo is None else (torch.cat([halo, low], 1), rows + 1)
    if cfg.kind == "nearest":
        grid = low.reshape(-1, rows, drafter.grid)
        return grid.repeat_interleave(r, 1).repeat_interleave(r, 2).flatten(1)
    if cfg.kind == "pixel":
        images = drafter.decode_rows(band, n_rows)
        h, w = images.shape[-2:]
        tokens = target.encode(resize(images, (h * r, w * r), cfg.filter))
    else:  # embedding: interpolate code vectors in latent space, then re-quantise
        z = drafter.code_latent(band, n_rows).float()
        mode = cfg.filter if cfg.filter in ("bilinear", "bicubic") else "nearest"
        z = F.interpolate(z, scale_factor=r, mode=mode, **({} if mode == "nearest" else {"align_corners": False}))
        tokens = target.nearest_codes(z)
    skip = 0 if halo is None else r * target.grid
    return tokens[:, skip:].to(low.device)
