"""Image resizing shared by training and the pixel upsampler, so both see the same pipeline."""
from __future__ import annotations

import torch
import torch.nn.functional as F

FILTERS = ("bicubic", "bilinear", "nearest", "area")


def resize(images: torch.Tensor, size: tuple[int, int] | int, mode: str = "bicubic") -> torch.Tensor:
    """Resize [B, 3, H, W] images in [0, 1]; downscaling antialiases (bicubic/bilinear) or averages (area)."""
    if mode not in FILTERS:
        raise ValueError(f"resize filter must be one of {FILTERS}, got {mode!r}")
    size = (size, size) if isinstance(size, int) else tuple(size)
    if tuple(images.shape[-2:]) == size:
        return images
    if mode in ("bicubic", "bilinear"):
        down = size[0] < images.shape[-2]
        out = F.interpolate(images, size=size, mode=mode, align_corners=False, antialias=down)
    else:
        out = F.interpolate(images, size=size, mode=mode)
    return out.clamp(0, 1)
