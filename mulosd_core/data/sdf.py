"""Analytic rendering primitives both procedural families draw with (docs/DESIGN.md section 9.3).

Shapes are signed distance fields over normalised coordinates in [0, 1]; coverage is a one-pixel
ramp across the edge, so the same scene renders at any size.
"""
from __future__ import annotations

import functools

import numpy as np


@functools.lru_cache(maxsize=8)
def pixel_grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates in [0, 1] (x grows right, y grows down); read-only, cached per size."""
    c = (np.arange(size, dtype=np.float32) + 0.5) / size
    y, x = np.meshgrid(c, c, indexing="ij")
    y.flags.writeable = False
    x.flags.writeable = False
    return x, y


def length(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean length of (a, b) (np.hypot is ~10x slower)."""
    return np.sqrt(a * a + b * b)


def coverage(sdf: np.ndarray, size: int) -> np.ndarray:
    """Anti-aliased coverage of the region sdf < 0 (one-pixel ramp)."""
    return np.clip(0.5 - sdf * size, 0.0, 1.0)
