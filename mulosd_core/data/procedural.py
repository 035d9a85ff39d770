"""Procedural class-conditional images for the embedded model family (docs/DESIGN.md section 9.3).

Every class is a pattern kind; colours (from a small palette, on a flat background),
positions, sizes, angles, periods and phases are nuisance variation. Some classes differ in their coarse layout
(a shape vs a texture, one blob vs two), others only in detail a low-resolution
drafter barely resolves (disc vs ring, square vs frame, stripes vs checkers), so
the drafter/target split of the embedded pair has something to do.

Rendering is analytic: each pattern is a signed distance field over normalised
coordinates in [0, 1], and coverage is a one-pixel linear ramp across the edge
(box-filter anti-aliasing). No pixel noise, so a 4x VQ reconstructs it well.
All random draws are independent of the output size, so the same rng state
renders the same scene at 32 px and at 64 px.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

from .keyed import render_keyed
from .sdf import coverage, length, pixel_grid

CLASS_NAMES: list[str] = [
    "disc",
    "ring",
    "square",
    "square_frame",
    "triangle",
    "cross",
    "stripes_horizontal",
    "stripes_vertical",
    "stripes_diagonal",
    "checkerboard",
    "two_discs",
    "polka_dots",
]
NUM_CLASSES: int = len(CLASS_NAMES)

_MIN_CONTRAST = 0.45  # RGB distance between pattern colour and background colours


def _frac(a: np.ndarray) -> np.ndarray:
    """a mod 1 (np.mod and np.hypot are ~10x slower than these plain ufunc forms)."""
    return a - np.floor(a)


def _rotate(x: np.ndarray, y: np.ndarray, cx: float, cy: float, angle: float):
    ca, sa = np.cos(angle), np.sin(angle)
    dx, dy = x - cx, y - cy
    return ca * dx + sa * dy, -sa * dx + ca * dy


def _box(u: np.ndarray, v: np.ndarray, hu: float, hv: float) -> np.ndarray:
    """Signed distance to an axis-aligned box of half sizes (hu, hv) (exact)."""
    qu, qv = np.abs(u) - hu, np.abs(v) - hv
    outside = length(np.maximum(qu, 0.0), np.maximum(qv, 0.0))
    return outside + np.minimum(np.maximum(qu, qv), 0.0)


def _stripe_sdf(u: np.ndarray, period: float, phase: float, duty: float) -> np.ndarray:
    """Signed distance to periodic stripes along u (inside where sdf < 0)."""
    t = _frac(u / period + phase)
    return period * (np.abs(t - 0.5) - duty / 2.0)


# ---------------------------------------------------------------- colours / background

# A small palette of well-separated colours: identity lives in the pattern, and a tiny
# CPU-trained tokenizer can represent every colour exactly (PSNR target of the embedded VQ).
PALETTE = np.array([
    [0.90, 0.20, 0.20], [0.20, 0.70, 0.30], [0.20, 0.35, 0.90], [0.95, 0.85, 0.20],
    [0.85, 0.40, 0.85], [0.15, 0.80, 0.85], [0.95, 0.95, 0.95], [0.12, 0.12, 0.15],
], dtype=np.float32)


_ALIGNED_BACKGROUNDS = (6, 7)  # white, near-black
_ALIGNED_PATTERNS = (0, 1, 2, 3)  # red, green, blue, yellow: each contrasts with both backgrounds


def _background(rng: np.random.Generator, size: int, aligned: bool) -> tuple[np.ndarray, list[np.ndarray]]:
    """Flat background in one palette colour. Returns (HxWx3, its colours)."""
    i = int(rng.integers(len(PALETTE)))
    c0 = PALETTE[_ALIGNED_BACKGROUNDS[i % 2] if aligned else i]
    img = np.broadcast_to(c0[None, None, :], (size, size, 3)).astype(np.float32)
    return img, [c0]


def _contrasting_colour(rng: np.random.Generator, against: Sequence[np.ndarray], aligned: bool) -> np.ndarray:
    """A palette colour far from every background colour."""
    ok = [c for c in PALETTE if min(float(np.linalg.norm(c - a)) for a in against) >= _MIN_CONTRAST]
    i = int(rng.integers(len(ok)))
    return PALETTE[_ALIGNED_PATTERNS[i % 4]] if aligned else ok[i]


# ---------------------------------------------------------------- nuisance draws

VARIATIONS = ("wide", "aligned")
GPT_VARIATION = "aligned"  # what the embedded GPTs learn (and what their samples are compared with)
_ALIGN = 16  # aligned lengths and positions are multiples of 1/16: one token of the 16x16 target grid


class _Draws:
    """Nuisance draws for one scene.

    Wide draws stay numpy float64 scalars (not Python floats): under NumPy 2 promotion
    that keeps the rendering arithmetic, and so every image, bit-identical to the data
    the shipped tokenizer and classifier were trained on.

    "wide": continuous sizes, positions, angles and phases over the whole palette (the
    tokenizer and the classifier learn this). "aligned": the same rng draws, snapped to
    the target's token grid, shapes upright, two backgrounds and four pattern colours,
    a subset of "wide" that the small CPU-trained GPTs can learn in minutes.
    Both consume the rng identically, so a scene's class and layout agree across them.
    """

    def __init__(self, rng: np.random.Generator, variation: str) -> None:
        if variation not in VARIATIONS:
            raise ValueError(f"variation {variation!r}: expected one of {VARIATIONS}")
        self.rng, self.aligned = rng, variation == "aligned"

    def _snap(self, v: float) -> float:
        return max(1.0, round(v * _ALIGN)) / _ALIGN if self.aligned else v

    def length(self, lo: float, hi: float) -> float:
        return self._snap(self.rng.uniform(lo, hi))

    def lengths(self, lo: float, hi: float, n: int) -> list[float]:
        return [self._snap(v) for v in self.rng.uniform(lo, hi, size=n)]

    def fraction(self, lo: float, hi: float, aligned_value: float | None = None) -> float:
        """A ratio (stripe duty, dot size); `aligned_value` replaces it in the aligned variation."""
        v = self.rng.uniform(lo, hi)
        return aligned_value if self.aligned and aligned_value is not None else v

    def angle(self, lo: float, hi: float, upright: float = 0.0) -> float:
        a = self.rng.uniform(lo, hi)
        return upright if self.aligned else a

    def choice(self, n: int) -> int:
        return int(self.rng.integers(n))

    def centre(self, extent: float) -> tuple[float, float]:
        lo, hi = extent + 0.03, 1.0 - extent - 0.03
        u, v = float(self.rng.uniform(lo, hi)), float(self.rng.uniform(lo, hi))
        if not self.aligned:
            return u, v
        a, b = np.ceil(lo * _ALIGN) / _ALIGN, np.floor(hi * _ALIGN) / _ALIGN
        return (float(np.clip(round(u * _ALIGN) / _ALIGN, a, b)), float(np.clip(round(v * _ALIGN) / _ALIGN, a, b)))

    def phase(self, period: float) -> float:
        """A phase in periods; aligned phases shift the pattern by whole grid steps."""
        t = self.rng.uniform(0, 1)
        return round(t * period * _ALIGN) / (_ALIGN * period) if self.aligned else t


# ---------------------------------------------------------------- pattern SDFs

def _disc(d, x, y):
    r = d.length(0.18, 0.32)
    cx, cy = d.centre(r)
    return length(x - cx, y - cy) - r


def _ring(d, x, y):
    r = d.length(0.22, 0.35)
    w = d.length(0.07, 0.10)
    cx, cy = d.centre(r + w / 2)
    return np.abs(length(x - cx, y - cy) - r) - w / 2


def _square(d, x, y):
    h = d.length(0.14, 0.24)
    cx, cy = d.centre(h * 1.42)
    u, v = _rotate(x, y, cx, cy, d.angle(0, np.pi / 2))
    return _box(u, v, h, h)


def _square_frame(d, x, y):
    h = d.length(0.18, 0.26)
    w = d.length(0.07, 0.10)
    cx, cy = d.centre(h * 1.42)
    u, v = _rotate(x, y, cx, cy, d.angle(0, np.pi / 2))
    return np.maximum(_box(u, v, h, h), -_box(u, v, h - w, h - w))


def _triangle(d, x, y):
    r_in = d.length(0.11, 0.17)  # circumradius is twice this
    cx, cy = d.centre(2 * r_in)
    u, v = _rotate(x, y, cx, cy, d.angle(0, 2 * np.pi / 3))
    dist = None
    for k in range(3):
        a = np.pi / 2 + k * 2 * np.pi / 3
        e = u * np.cos(a) + v * np.sin(a) - r_in
        dist = e if dist is None else np.maximum(dist, e)
    return dist


def _cross(d, x, y):
    arm = d.length(0.2, 0.3)
    w = d.length(0.06, 0.09)
    cx, cy = d.centre(arm * 1.1)
    u, v = _rotate(x, y, cx, cy, d.angle(0, np.pi / 2))
    return np.minimum(_box(u, v, arm, w), _box(u, v, w, arm))


def _stripes(*angle_centres: float) -> Callable:
    """Stripes whose normal is one of `angle_centres` (0 = vertical stripes) +- 6 degrees."""
    def sdf(d, x, y):
        period = d.length(0.125, 0.2)  # 8-13 px at 64 px, 4-6 px at 32 px
        centre = angle_centres[d.choice(len(angle_centres))]
        angle = centre + d.angle(-0.1, 0.1)
        u, _ = _rotate(x, y, 0.5, 0.5, angle)
        return _stripe_sdf(u, period, d.phase(period), d.fraction(0.4, 0.6, 0.5))
    return sdf


def _checkerboard(d, x, y, size):
    cell = d.length(0.1, 0.16)  # 6-10 px cells at 64 px
    u, v = _rotate(x, y, 0.5, 0.5, d.angle(-0.1, 0.1))
    a = coverage(_stripe_sdf(u, 2 * cell, d.phase(2 * cell), 0.5), size)
    b = coverage(_stripe_sdf(v, 2 * cell, d.phase(2 * cell), 0.5), size)
    return a + b - 2.0 * a * b  # soft XOR: already a coverage, not an sdf


def _two_discs(d, x, y):
    r1, r2 = d.lengths(0.1, 0.15, 2)
    c1 = d.centre(r1)
    for _ in range(32):
        c2 = d.centre(r2)
        if np.hypot(c1[0] - c2[0], c1[1] - c2[1]) > r1 + r2 + 0.1:
            break
    else:  # place it in the opposite corner, always far enough
        c2 = (1.0 - c1[0], 1.0 - c1[1]) if abs(c1[0] - 0.5) + abs(c1[1] - 0.5) > 0.25 else (0.15 + r2 / 2, 0.15 + r2 / 2)
    return np.minimum(length(x - c1[0], y - c1[1]) - r1, length(x - c2[0], y - c2[1]) - r2)


def _polka_dots(d, x, y):
    period = d.length(0.16, 0.22)  # 10-14 px at 64 px
    r = period * d.fraction(0.25, 0.33)
    u, v = _rotate(x, y, 0.5, 0.5, d.angle(-0.3, 0.3))
    pu = _frac(u / period + d.phase(period)) - 0.5
    pv = _frac(v / period + d.phase(period)) - 0.5
    return length(pu, pv) * period - r


_SDFS: dict[str, Callable] = {
    "disc": _disc,
    "ring": _ring,
    "square": _square,
    "square_frame": _square_frame,
    "triangle": _triangle,
    "cross": _cross,
    "stripes_horizontal": _stripes(np.pi / 2),
    "stripes_vertical": _stripes(0.0),
    "stripes_diagonal": _stripes(np.pi / 4, 3 * np.pi / 4),
    "two_discs": _two_discs,
    "polka_dots": _polka_dots,
}


# ---------------------------------------------------------------- public API

def make_image(class_id: int, rng: np.random.Generator, size: int = 64, variation: str = "wide") -> np.ndarray:
    """Render one image of class `class_id`: float32 [size, size, 3] in [0, 1] (see `_Draws` for `variation`)."""
    if not 0 <= int(class_id) < NUM_CLASSES:
        raise ValueError(f"class_id {class_id} outside 0..{NUM_CLASSES - 1}")
    if size < 8:
        raise ValueError(f"size {size} too small (need >= 8)")
    name = CLASS_NAMES[int(class_id)]
    x, y = pixel_grid(size)
    draws = _Draws(rng, variation)
    bg, bg_colours = _background(rng, size, draws.aligned)
    fg = _contrasting_colour(rng, bg_colours, draws.aligned)
    if name == "checkerboard":
        alpha = _checkerboard(draws, x, y, size)
    else:
        alpha = coverage(_SDFS[name](draws, x, y), size)
    img = bg + alpha[..., None] * (fg[None, None, :] - bg)
    return np.clip(img, 0.0, 1.0).astype(np.float32, copy=False)


def make_keyed_batch(class_ids: Sequence[int] | torch.Tensor | np.ndarray, key: Sequence[int], size: int = 64,
                     variation: str = "wide") -> torch.Tensor:
    """Render a batch where sample i uses `np.random.default_rng([*key, i])`."""
    return render_keyed(make_image, class_ids, key, size, variation)


def make_batch(class_ids: Sequence[int] | torch.Tensor | np.ndarray, seed: int, size: int = 64,
               variation: str = "wide") -> torch.Tensor:
    """Deterministic batch [B, 3, size, size] in [0, 1]; sample i uses rng([seed, i]).

    The same (class_ids, seed) at size 32 and 64 gives the same scenes, so a
    drafter sample can be compared with its target-resolution counterpart.
    """
    return make_keyed_batch(class_ids, (int(seed),), size, variation)


class PatternDataset:
    """Endless labelled batches, a pure function of (seed, step) so training can resume.

    `sample` draws the labels uniformly from `classes` (all by default); the
    images use rng keys (seed, 0, step, i), disjoint from `make_batch` keys.
    """

    def __init__(self, size: int = 64, seed: int = 0, classes: Sequence[int] | None = None):
        self.size = int(size)
        self.seed = int(seed)
        self.classes = np.arange(NUM_CLASSES) if classes is None else np.asarray(classes, dtype=np.int64)

    def labels(self, batch_size: int, step: int, seed: int | None = None) -> torch.Tensor:
        seed = self.seed if seed is None else int(seed)
        rng = np.random.default_rng([seed, 1, int(step)])
        return torch.from_numpy(rng.choice(self.classes, size=int(batch_size)).astype(np.int64))

    def sample(self, batch_size: int, step: int, seed: int | None = None, size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(images [B, 3, S, S] float32 in [0, 1], labels [B] int64) for this step."""
        seed = self.seed if seed is None else int(seed)
        labels = self.labels(batch_size, step, seed)
        images = make_keyed_batch(labels, (seed, 0, int(step)), self.size if size is None else int(size))
        return images, labels

    def batches(self, batch_size: int, start_step: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Iterate `sample(batch_size, step)` for step = start_step, start_step + 1, ..."""
        step = int(start_step)
        while True:
            yield self.sample(batch_size, step)
            step += 1
