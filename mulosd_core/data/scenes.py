"""Procedural natural-looking scenes: the `scenes` data family (the default embedded family).

Why: an AR image model spreads its next-token mass over many visually equivalent tokens
because photographs carry stochastic texture everywhere, while what a scene *is* lives in
its low frequencies. These scenes are built the same way: the class decides the layout and
the palette (horizon height, sky gradient, sun or moon, mountains, water, trees, fields,
clouds, buildings), and every region carries several octaves of value noise plus grain and
small random elements (stars, flowers, windows, bubbles). So a 2x smaller render still shows
the scene, and at most token positions many codes are valid.

Rendering is analytic over normalised coordinates in [0, 1]: every random draw (noise
lattices included) has a fixed shape that does not depend on the output size, so one rng
state renders the same scene at 32, 64 and 128 px.
"""
from __future__ import annotations

import numpy as np

from .sdf import coverage, length, pixel_grid

CLASS_NAMES: list[str] = [
    "beach",
    "desert",
    "snowy_mountains",
    "forest",
    "night_moon",
    "sunset_sea",
    "meadow",
    "city",
    "lavender_field",
    "storm",
    "autumn_park",
    "underwater",
]
NUM_CLASSES: int = len(CLASS_NAMES)
VARIATIONS = ("natural",)
GPT_VARIATION = "natural"

_OCTAVES = (4, 8, 16, 32)   # texture lattices (cells across the image): 16 px down to 2 px blobs at 64 px
_GRAIN_CELLS = 64           # about one pixel at 64 px: film grain
_TOKEN_GRAIN_CELLS = 16     # one lattice cell per 4 px: the size of a target token at 64 px ...
_TOKEN_GRAIN = 0.12         # ... so every token's brightness carries its own draw (many codes stay valid)
_TEXTURE_FLOOR = 0.5        # additive share of a region's texture, so dark regions are textured too


def _c(*rgb: float) -> np.ndarray:
    return np.array(rgb, dtype=np.float32)


# ------------------------------------------------------------------------------ noise

def _lattice_noise(rng: np.random.Generator, cells: int, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Value noise in [-1, 1]: a (cells+1)^2 random lattice, smoothstep-interpolated at (x, y)."""
    lat = rng.uniform(-1.0, 1.0, size=(cells + 1, cells + 1)).astype(np.float32)
    u, v = np.clip(x * cells, 0, cells - 1e-4), np.clip(y * cells, 0, cells - 1e-4)
    i, j = u.astype(np.int64), v.astype(np.int64)
    fu, fv = u - i, v - j
    fu, fv = fu * fu * (3 - 2 * fu), fv * fv * (3 - 2 * fv)
    top = lat[j, i] * (1 - fu) + lat[j, i + 1] * fu
    bottom = lat[j + 1, i] * (1 - fu) + lat[j + 1, i + 1] * fu
    return top * (1 - fv) + bottom * fv


def _fbm(rng: np.random.Generator, x: np.ndarray, y: np.ndarray, octaves=_OCTAVES, gain: float = 0.6) -> np.ndarray:
    """Fractal noise, roughly in [-1, 1]: octaves from coarse to fine, amplitude x gain per octave."""
    total, amp, norm = np.zeros_like(x), 1.0, 0.0
    for cells in octaves:
        total += amp * _lattice_noise(rng, cells, x, y)
        norm += amp
        amp *= gain
    return total / norm


def _ridge(rng: np.random.Generator, x: np.ndarray, cells: int, amp: float) -> np.ndarray:
    """A 1-D noise profile along x (for horizons, ridges, shore lines)."""
    lat = rng.uniform(-1.0, 1.0, size=cells + 1).astype(np.float32)
    u = np.clip(x * cells, 0, cells - 1e-4)
    i = u.astype(np.int64)
    f = u - i
    f = f * f * (3 - 2 * f)
    return amp * (lat[i] * (1 - f) + lat[i + 1] * f)


def _jitter(rng: np.random.Generator, colour: np.ndarray, amount: float = 0.05) -> np.ndarray:
    """A palette colour with per-image brightness and tint variation."""
    return np.clip(colour * rng.uniform(0.9, 1.1) + rng.uniform(-amount, amount, size=3), 0, 1).astype(np.float32)


class _Canvas:
    """An image being painted: layers are blended in by coverage masks."""

    def __init__(self, rng: np.random.Generator, size: int) -> None:
        self.rng, self.size = rng, size
        self.x, self.y = pixel_grid(size)
        self.img = np.zeros((size, size, 3), dtype=np.float32)
        self.tex = _fbm(rng, self.x, self.y)          # one texture field, scaled per region
        self.tex2 = _fbm(rng, self.x, self.y, (8, 16, 32))

    def fill(self, colour: np.ndarray, mask: np.ndarray | float = 1.0, texture: float = 0.12) -> None:
        """Blend a textured colour in where `mask` (coverage in [0, 1]) is set."""
        col = colour[None, None, :] * (1.0 + texture * self.tex[..., None]) + _TEXTURE_FLOOR * texture * self.tex2[..., None]
        m = np.asarray(mask, dtype=np.float32)
        m = m[..., None] if m.ndim == 2 else m
        self.img += m * (col - self.img)

    def gradient(self, top: np.ndarray, bottom: np.ndarray, y0: float, y1: float, texture: float = 0.08,
                 mask: np.ndarray | float = 1.0) -> None:
        t = np.clip((self.y - y0) / max(y1 - y0, 1e-3), 0, 1)[..., None]
        col = (top * (1 - t) + bottom * t) * (1.0 + texture * self.tex2[..., None]) + _TEXTURE_FLOOR * texture * self.tex[..., None]
        m = np.asarray(mask, dtype=np.float32)
        m = m[..., None] if m.ndim == 2 else m
        self.img += m * (col - self.img)

    def below(self, profile: np.ndarray) -> np.ndarray:
        """Coverage of the region under a horizon profile y = profile(x)."""
        return coverage(profile - self.y, self.size)

    def disc(self, cx: float, cy: float, r: float) -> np.ndarray:
        return coverage(length(self.x - cx, self.y - cy) - r, self.size)

    def box(self, x0: float, x1: float, y0: float, y1: float) -> np.ndarray:
        d = np.maximum(np.maximum(x0 - self.x, self.x - x1), np.maximum(y0 - self.y, self.y - y1))
        return coverage(d, self.size)

    def dots(self, n: int, colour: np.ndarray, r: tuple[float, float], y_range: tuple[float, float],
             x_range: tuple[float, float] = (0.0, 1.0)) -> None:
        """Small random elements (stars, flowers, bubbles): `n` discs drawn from the rng."""
        xs = self.rng.uniform(*x_range, size=n)
        ys = self.rng.uniform(*y_range, size=n)
        rs = self.rng.uniform(*r, size=n)
        tints = self.rng.uniform(0.85, 1.1, size=n)
        for cx, cy, rr, t in zip(xs, ys, rs, tints):
            self.fill(np.clip(colour * t, 0, 1), self.disc(cx, cy, rr), texture=0.05)

    def grain(self, amount: float = 0.06) -> np.ndarray:
        """Finish the image: pixel grain plus token-sized mottling.

        The mottling is what makes the target uncertain like a real model: without it most tokens
        are decided by their neighbours (24% of positions had top-1 below 0.2); with it, each token's
        brightness is a fresh draw the prefix cannot predict (docs/DESIGN.md, scenes)."""
        g = _lattice_noise(self.rng, _GRAIN_CELLS, self.x, self.y)
        m = _lattice_noise(self.rng, _TOKEN_GRAIN_CELLS, self.x, self.y)
        return np.clip(self.img + amount * g[..., None] + _TOKEN_GRAIN * m[..., None], 0.0, 1.0).astype(np.float32)


# ------------------------------------------------------------------------------ the classes

def _beach(cv: _Canvas, rng) -> None:
    h = rng.uniform(0.35, 0.5)
    cv.gradient(_jitter(rng, _c(0.35, 0.6, 0.95)), _jitter(rng, _c(0.75, 0.88, 0.98)), 0.0, h)
    sea = cv.below(h + _ridge(rng, cv.x, 6, 0.004))
    cv.fill(_jitter(rng, _c(0.1, 0.45, 0.7)), sea, texture=0.18)
    shore = h + rng.uniform(0.2, 0.3) + _ridge(rng, cv.x, 5, 0.05)
    cv.fill(_jitter(rng, _c(0.9, 0.8, 0.6)), cv.below(shore), texture=0.15)
    foam = np.clip(1 - np.abs(cv.y - shore) * 40, 0, 1) * (cv.tex2 > -0.1)
    cv.fill(_c(0.95, 0.97, 0.97), foam * 0.8, texture=0.05)


def _desert(cv: _Canvas, rng) -> None:
    h = rng.uniform(0.4, 0.55)
    cv.gradient(_jitter(rng, _c(0.95, 0.75, 0.45)), _jitter(rng, _c(0.98, 0.9, 0.7)), 0.0, h)
    cv.fill(_jitter(rng, _c(1.0, 0.95, 0.7), 0.02), cv.disc(rng.uniform(0.15, 0.85), rng.uniform(0.1, 0.25),
                                                          rng.uniform(0.06, 0.1)), texture=0.03)
    sand = _jitter(rng, _c(0.85, 0.6, 0.3))
    cv.fill(sand, cv.below(h + _ridge(rng, cv.x, 3, 0.05)), texture=0.15)
    period, phase = rng.uniform(0.1, 0.18), rng.uniform(0, 1)
    bands = 0.5 + 0.5 * np.sin((cv.y + 0.15 * _ridge(rng, cv.x, 4, 1.0)) / period * 2 * np.pi + phase * 6.28)
    cv.fill(sand * 0.75, cv.below(h + 0.08 + _ridge(rng, cv.x, 4, 0.03)) * bands * 0.6, texture=0.1)


def _snowy_mountains(cv: _Canvas, rng) -> None:
    cv.gradient(_jitter(rng, _c(0.15, 0.3, 0.7)), _jitter(rng, _c(0.55, 0.7, 0.9)), 0.0, 0.6)
    peak = rng.uniform(0.15, 0.3)
    ridge = peak + 0.25 * np.abs(np.sin((cv.x - rng.uniform(0, 1)) * np.pi * rng.uniform(1.5, 2.5))) \
        + _ridge(rng, cv.x, 12, 0.04)
    rock = cv.below(ridge)
    cv.fill(_jitter(rng, _c(0.45, 0.45, 0.5)), rock, texture=0.2)
    snowline = ridge + rng.uniform(0.06, 0.12) + _ridge(rng, cv.x, 10, 0.03)
    cv.fill(_jitter(rng, _c(0.93, 0.95, 0.98), 0.02), rock * (1 - cv.below(snowline)), texture=0.06)
    ground = rng.uniform(0.7, 0.8)
    cv.fill(_jitter(rng, _c(0.9, 0.92, 0.96), 0.02), cv.below(ground + _ridge(rng, cv.x, 4, 0.03)), texture=0.08)


def _forest(cv: _Canvas, rng) -> None:
    h = rng.uniform(0.45, 0.6)
    cv.gradient(_jitter(rng, _c(0.7, 0.75, 0.8)), _jitter(rng, _c(0.85, 0.88, 0.85)), 0.0, h)
    cv.fill(_jitter(rng, _c(0.15, 0.3, 0.12)), cv.below(h + _ridge(rng, cv.x, 5, 0.02)), texture=0.25)
    n = int(rng.integers(9, 15))
    xs = np.sort(rng.uniform(0, 1, size=n))
    heights = rng.uniform(0.2, 0.4, size=n)
    widths = rng.uniform(0.05, 0.09, size=n)
    greens = rng.uniform(0.7, 1.2, size=n)
    for cx, th, w, g in zip(xs, heights, widths, greens):
        top = h - th
        d = np.maximum(np.abs(cv.x - cx) * th / w - (cv.y - top), cv.y - (h + 0.05))
        cv.fill(np.clip(_c(0.08, 0.3, 0.1) * g, 0, 1), coverage(d, cv.size), texture=0.3)


def _night_moon(cv: _Canvas, rng) -> None:
    cv.gradient(_jitter(rng, _c(0.02, 0.03, 0.1), 0.02), _jitter(rng, _c(0.1, 0.12, 0.3), 0.03), 0.0, 0.8, texture=0.25)
    cv.dots(int(rng.integers(20, 40)), _c(0.9, 0.9, 0.8), (0.004, 0.009), (0.0, 0.6))
    cv.fill(_jitter(rng, _c(0.95, 0.93, 0.75), 0.02), cv.disc(rng.uniform(0.15, 0.85), rng.uniform(0.12, 0.35),
                                                           rng.uniform(0.07, 0.11)), texture=0.06)
    h = rng.uniform(0.65, 0.78)
    cv.fill(_jitter(rng, _c(0.05, 0.07, 0.08), 0.02), cv.below(h + _ridge(rng, cv.x, 4, 0.07)), texture=0.3)


def _sunset_sea(cv: _Canvas, rng) -> None:
    h = rng.uniform(0.5, 0.62)
    cv.gradient(_jitter(rng, _c(0.55, 0.15, 0.35)), _jitter(rng, _c(1.0, 0.6, 0.2)), 0.0, h)
    sx, r = rng.uniform(0.25, 0.75), rng.uniform(0.08, 0.13)
    cv.fill(_jitter(rng, _c(1.0, 0.85, 0.4), 0.02), cv.disc(sx, h, r) * (cv.y < h), texture=0.03)
    cv.fill(_jitter(rng, _c(0.2, 0.1, 0.25)), cv.below(np.full_like(cv.x, h)), texture=0.2)
    column = np.clip(1 - np.abs(cv.x - sx) / (r * 1.2), 0, 1) * (cv.y > h) * (cv.tex2 > 0.0)
    cv.fill(_c(1.0, 0.6, 0.25), column * 0.8, texture=0.1)


def _meadow(cv: _Canvas, rng) -> None:
    h = rng.uniform(0.4, 0.55)
    cv.gradient(_jitter(rng, _c(0.25, 0.5, 0.95)), _jitter(rng, _c(0.6, 0.8, 1.0)), 0.0, h)
    clouds = np.clip((cv.tex2 + _fbm(rng, cv.x, cv.y, (4, 8)) - 0.3) * 3, 0, 1) * (cv.y < h - 0.05)
    cv.fill(_c(0.97, 0.97, 0.97), clouds, texture=0.05)
    cv.fill(_jitter(rng, _c(0.3, 0.7, 0.2)), cv.below(h + _ridge(rng, cv.x, 4, 0.03)), texture=0.25)
    cv.dots(int(rng.integers(15, 30)), _jitter(rng, _c(1.0, 0.9, 0.2), 0.05), (0.006, 0.012), (h + 0.08, 1.0))


def _city(cv: _Canvas, rng) -> None:
    cv.gradient(_jitter(rng, _c(0.6, 0.62, 0.68)), _jitter(rng, _c(0.8, 0.78, 0.75)), 0.0, 0.8)
    street = rng.uniform(0.82, 0.9)
    x = 0.0
    while x < 1.0:
        w = rng.uniform(0.08, 0.18)
        top = rng.uniform(0.2, 0.6)
        shade = rng.uniform(0.6, 1.1)
        cv.fill(np.clip(_c(0.45, 0.4, 0.38) * shade, 0, 1), cv.box(x, x + w - 0.01, top, street), texture=0.15)
        lit = _jitter(rng, _c(0.95, 0.85, 0.4), 0.05)
        rows, cols = int((street - top) / 0.07), max(1, int(w / 0.05))
        on = rng.random((max(rows, 1), cols)) < 0.6
        for i in range(rows):
            for j in range(cols):
                if on[i, j]:
                    wx, wy = x + 0.015 + j * 0.05, top + 0.03 + i * 0.07
                    cv.fill(lit, cv.box(wx, wx + 0.02, wy, wy + 0.03), texture=0.05)
        x += w
    cv.fill(_jitter(rng, _c(0.2, 0.2, 0.22)), cv.below(np.full_like(cv.x, 1.1)) * (cv.y > street), texture=0.2)


def _lavender_field(cv: _Canvas, rng) -> None:
    h = rng.uniform(0.3, 0.45)
    cv.gradient(_jitter(rng, _c(0.75, 0.8, 0.95)), _jitter(rng, _c(0.95, 0.9, 0.9)), 0.0, h)
    cv.fill(_jitter(rng, _c(0.3, 0.4, 0.25)), cv.below(np.full_like(cv.x, h)), texture=0.2)
    vx, n_rows = rng.uniform(0.3, 0.7), rng.uniform(7, 11)
    angle = np.arctan2(cv.x - vx, np.maximum(cv.y - h, 1e-3))
    rows = 0.5 + 0.5 * np.cos(angle * n_rows * 2)
    cv.fill(_jitter(rng, _c(0.55, 0.35, 0.75)), np.clip(rows * 1.6 - 0.3, 0, 1) * cv.below(np.full_like(cv.x, h)) * (cv.y > h + 0.02),
            texture=0.3)


def _storm(cv: _Canvas, rng) -> None:
    h = rng.uniform(0.55, 0.7)
    cv.gradient(_jitter(rng, _c(0.2, 0.22, 0.25), 0.03), _jitter(rng, _c(0.4, 0.42, 0.45), 0.03), 0.0, h, texture=0.35)
    dark = np.clip((_fbm(rng, cv.x, cv.y, (4, 8, 16)) + 0.1) * 2, 0, 1) * (cv.y < h)
    cv.fill(_c(0.12, 0.12, 0.14), dark * 0.7, texture=0.2)
    slant = rng.uniform(0.2, 0.4)
    rain = (np.sin((cv.x + slant * cv.y) * 2 * np.pi * 24 + rng.uniform(0, 6.28)) > 0.85) * (cv.tex > -0.2)
    cv.fill(_c(0.55, 0.57, 0.6), rain * 0.35, texture=0.05)
    cv.fill(_jitter(rng, _c(0.18, 0.2, 0.12), 0.03), cv.below(h + _ridge(rng, cv.x, 4, 0.03)), texture=0.3)


def _autumn_park(cv: _Canvas, rng) -> None:
    h = rng.uniform(0.55, 0.7)
    cv.gradient(_jitter(rng, _c(0.55, 0.7, 0.85)), _jitter(rng, _c(0.85, 0.85, 0.8)), 0.0, h)
    cv.fill(_jitter(rng, _c(0.45, 0.3, 0.15)), cv.below(h + _ridge(rng, cv.x, 4, 0.02)), texture=0.25)
    n = int(rng.integers(3, 6))
    for cx in np.sort(rng.uniform(0.08, 0.92, size=n)):
        r = rng.uniform(0.1, 0.16)
        cy = h - r - rng.uniform(0.02, 0.08)
        cv.fill(_c(0.3, 0.2, 0.1), cv.box(cx - 0.015, cx + 0.015, cy, h + 0.03), texture=0.15)
        canopy = coverage(length(cv.x - cx, cv.y - cy) - r - 0.03 * cv.tex2, cv.size)
        cv.fill(_jitter(rng, _c(0.9, 0.4, 0.1), 0.08), canopy, texture=0.3)
    cv.dots(int(rng.integers(10, 20)), _c(0.85, 0.35, 0.1), (0.005, 0.01), (h + 0.05, 1.0))


def _underwater(cv: _Canvas, rng) -> None:
    cv.gradient(_jitter(rng, _c(0.1, 0.55, 0.65)), _jitter(rng, _c(0.02, 0.2, 0.35)), 0.0, 1.0, texture=0.15)
    ray_x, slant = rng.uniform(0, 1), rng.uniform(-0.4, 0.4)
    rays = np.clip(np.sin((cv.x - ray_x + slant * cv.y) * 2 * np.pi * rng.uniform(2, 4)), 0, 1) * (1 - cv.y)
    cv.fill(_c(0.5, 0.85, 0.85), rays * 0.3, texture=0.1)
    floor = rng.uniform(0.8, 0.9)
    cv.fill(_jitter(rng, _c(0.75, 0.7, 0.5)), cv.below(floor + _ridge(rng, cv.x, 5, 0.03)), texture=0.2)
    cv.dots(int(rng.integers(6, 14)), _c(0.75, 0.95, 1.0), (0.008, 0.02), (0.05, floor - 0.05))


_PAINTERS = {
    "beach": _beach, "desert": _desert, "snowy_mountains": _snowy_mountains, "forest": _forest,
    "night_moon": _night_moon, "sunset_sea": _sunset_sea, "meadow": _meadow, "city": _city,
    "lavender_field": _lavender_field, "storm": _storm, "autumn_park": _autumn_park, "underwater": _underwater,
}


def make_image(class_id: int, rng: np.random.Generator, size: int = 64, variation: str = GPT_VARIATION) -> np.ndarray:
    """Render one scene of class `class_id`: float32 [size, size, 3] in [0, 1]."""
    if not 0 <= int(class_id) < NUM_CLASSES:
        raise ValueError(f"class_id {class_id} outside 0..{NUM_CLASSES - 1}")
    if size < 8:
        raise ValueError(f"size {size} too small (need >= 8)")
    if variation not in VARIATIONS:
        raise ValueError(f"variation {variation!r}: expected one of {VARIATIONS}")
    cv = _Canvas(rng, size)
    _PAINTERS[CLASS_NAMES[int(class_id)]](cv, rng)
    return cv.grain()
