"""Plain PIL charts for the benchmark (no matplotlib dependency): scatter and stacked bars.

Deliberately simple: axes with a few ticks, labelled points, a legend. Good enough to see a
Pareto front or where the time goes; the numbers themselves live in the JSON and Markdown.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from PIL import Image, ImageDraw, ImageFont

PALETTE = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
           (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207), (0, 0, 0), (120, 60, 160),
           (60, 160, 120), (200, 120, 40)]


def _font():
    return ImageFont.load_default()


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not math.isfinite(lo) or not math.isfinite(hi):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(n - 1, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=raw)
    start = math.ceil(lo / step) * step
    out, v = [], start
    while v <= hi + 1e-12 and len(out) < 20:
        out.append(round(v, 10))
        v += step
    return out


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def scatter(points: Sequence[tuple[str, float, float]], xlabel: str, ylabel: str, title: str, path: str,
            size: tuple[int, int] = (720, 480), note: str | None = None) -> None:
    """points: (label, x, y); non-finite points are skipped."""
    pts = [(l, float(x), float(y)) for l, x, y in points if x is not None and y is not None
           and math.isfinite(float(x)) and math.isfinite(float(y))]
    W, H = size
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    f = _font()
    left, right, top, bottom = 70, W - 170, 40, H - 60
    d.text((left, 10), title, fill="black", font=f)
    if note:
        d.text((left, H - 20), note, fill=(120, 0, 0), font=f)
    d.rectangle([left, top, right, bottom], outline="black")
    if not pts:
        d.text((left + 10, top + 10), "no finite points", fill="black", font=f)
        img.save(path)
        return
    xs, ys = [p[1] for p in pts], [p[2] for p in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    px, py = (x1 - x0) * 0.08 or 0.5, (y1 - y0) * 0.08 or 0.5
    x0, x1, y0, y1 = x0 - px, x1 + px, y0 - py, y1 + py

    def tx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (right - left)

    def ty(y: float) -> float:
        return bottom - (y - y0) / (y1 - y0) * (bottom - top)

    for t in _ticks(x0, x1):
        d.line([tx(t), bottom, tx(t), bottom + 4], fill="black")
        d.text((tx(t) - 10, bottom + 6), _fmt(t), fill="black", font=f)
    for t in _ticks(y0, y1):
        d.line([left - 4, ty(t), left, ty(t)], fill="black")
        d.text((5, ty(t) - 5), _fmt(t), fill="black", font=f)
    d.text(((left + right) // 2 - 40, bottom + 22), xlabel, fill="black", font=f)
    d.text((5, top - 18), ylabel, fill="black", font=f)
    for i, (label, x, y) in enumerate(pts):
        c = PALETTE[i % len(PALETTE)]
        cx, cy = tx(x), ty(y)
        d.ellipse([cx - 4, cy - 4, cx + 4, cy + 4], fill=c, outline="black")
        d.rectangle([right + 12, top + 14 * i + 2, right + 20, top + 14 * i + 10], fill=c)
        d.text((right + 24, top + 14 * i), label, fill="black", font=f)
    img.save(path)


def stacked_bars(rows: Sequence[tuple[str, dict[str, float]]], parts: Sequence[str], title: str, path: str,
                 unit: str = "s", width: int = 760) -> None:
    """Horizontal stacked bars: rows of (label, {part: value})."""
    bar_h, gap = 16, 6
    left, right, top = 150, width - 20, 50
    H = top + len(rows) * (bar_h + gap) + 60
    img = Image.new("RGB", (width, H), "white")
    d = ImageDraw.Draw(img)
    f = _font()
    d.text((10, 10), title, fill="black", font=f)
    for j, part in enumerate(parts):
        c = PALETTE[j % len(PALETTE)]
        x = 10 + j * 95
        d.rectangle([x, 28, x + 8, 36], fill=c)
        d.text((x + 12, 26), part, fill="black", font=f)
    totals = [sum(max(v.get(p, 0.0) or 0.0, 0.0) for p in parts) for _, v in rows]
    vmax = max(totals + [1e-12])
    for i, (label, vals) in enumerate(rows):
        y = top + i * (bar_h + gap)
        d.text((10, y + 3), label, fill="black", font=f)
        x = float(left)
        for j, part in enumerate(parts):
            w = max(vals.get(part, 0.0) or 0.0, 0.0) / vmax * (right - left - 60)
            if w > 0:
                d.rectangle([x, y, x + w, y + bar_h], fill=PALETTE[j % len(PALETTE)])
            x += w
        d.text((x + 4, y + 3), f"{totals[i]:.3g} {unit}", fill="black", font=f)
    img.save(path)
