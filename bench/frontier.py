"""The frontier picture: wall-time speed-up over AR against C2ST against AR, for every method and every
swept setting the committed results hold, and each method's fastest setting per quality tier.

    python -m bench.frontier [--results bench/results/cpu-embedded.json ...] [--out bench/results]

No model runs here: the points are read from benchmark results (bench.compare's methods, bench.sweep's
stages). Every speed-up is a ratio to the AR runs of its own run (docs/DESIGN.md section 10), so points of
different runs share an axis but were timed apart; the table names each point's run. Rows measured on
fewer images than a tier needs (bench.sweep's screening at 48) are drawn hollow and get no tier: only a
row measured at bench.measures.TIER_MIN_SAMPLES images carries a verdict. The band is the
"indistinguishable" bound on this axis (every detector's C2ST against AR <= C2ST_MAX); "as good as AR"
is judged against real images, not on this axis, so it is a marker shape instead of a band.

Writes <out>/<tag>.json, .md and .png.
"""
from __future__ import annotations

import argparse
import json
import math
import os
from dataclasses import asdict, dataclass

from PIL import Image, ImageDraw

from mulosd_core import presets as P

from . import measures as Q
from .plots import PALETTE, _font, _fmt, _ticks

DEFAULT_RESULTS = ("bench/results/cpu-embedded.json", "bench/results/sweep-embedded-scenes.json",
                   "bench/results/cpu-embedded-lossless.json", "bench/results/baselines-embedded-scenes.json")


@dataclass
class Point:
    method: str        # the method's family: ar, zipar, sjd, gsd, sd, lantern, mulo
    label: str         # the row's name in its run
    run: str           # the results file's tag
    speedup: float     # wall_ratio_vs_ar (AR's median wall time / this row's, same run)
    c2st_ar: float     # strongest detector's C2ST against AR
    samples: int
    tier: str | None   # the verdict at TIER_MIN_SAMPLES images, None below


def method_of(label: str, config: dict | None) -> str:
    """The method a row belongs to, by its config (method name and rule) or, for sweep rows, its label."""
    if label.startswith("drafter_alone") or label in ("ar_null", "vq_roundtrip"):
        return "control"
    if config:
        m, rule = config.get("method"), (config.get("verifier") or {}).get("rule")
        if m == "sjd":
            return "gsd" if rule == "gsd" else "sjd"
        if m == "speculative":
            return {"exact": "sd", "lantern": "lantern"}.get(rule, "mulo") if not label.startswith("mulo") else "mulo"
        return m or "mulo"
    head = label.split(":")[0]
    if head in P.BASELINES:          # bench.sweep --baselines-only: "<method>: <knobs>"
        return head
    return "lantern" if label.startswith("delta=") else "mulo"


def _point(method: str, label: str, run: str, row: dict) -> Point | None:
    m = row.get("measures") or {}
    c = m.get("c2st_ar") or {}
    ratio = row.get("wall_ratio_vs_ar")
    if not c or ratio is None or not math.isfinite(ratio):
        return None
    samples = int(m.get("samples") or 0)
    verdict = row.get("tier") if samples >= Q.TIER_MIN_SAMPLES else None
    return Point(method, label, run, float(ratio), float(c["max"]), samples, verdict["tier"] if verdict else None)


def points_of(res: dict, run: str) -> list[Point]:
    """Every measured row of a bench.compare or bench.sweep result, controls and AR itself left out."""
    out = []
    for label, row in (res.get("methods") or {}).items():
        kind = method_of(label, row.get("config"))
        if row.get("control") or kind in ("control", "ar"):
            continue
        p = _point(kind, label, run, row)
        out.append(p)
    for stage, st in ((res.get("sweep") or {}).get("stages") or {}).items():
        for row in st.get("rows", []):
            out.append(_point(method_of(row["label"], None), f"{stage}: {row['label']}", run, row))
    return [p for p in out if p is not None]


def fastest_per_tier(points: list[Point]) -> dict[str, dict[str, Point | None]]:
    """method -> tier -> its fastest point in that tier (as good as AR includes indistinguishable)."""
    table: dict[str, dict[str, Point | None]] = {}
    for p in points:
        row = table.setdefault(p.method, {Q.INDISTINGUISHABLE: None, Q.AS_GOOD: None})
        for tier in row:
            inside = p.tier == Q.INDISTINGUISHABLE or (tier == Q.AS_GOOD and p.tier == Q.AS_GOOD)
            if inside and (row[tier] is None or p.speedup > row[tier].speedup):
                row[tier] = p
    return table


TIER_SHAPES = {Q.INDISTINGUISHABLE: "circle", Q.AS_GOOD: "square", Q.OUTSIDE: "triangle", None: "hollow circle"}


def _marker(d: ImageDraw.ImageDraw, cx: float, cy: float, shape: str, colour: tuple) -> None:
    s = 4
    box = [cx - s, cy - s, cx + s, cy + s]
    if shape == "circle":
        d.ellipse(box, fill=colour, outline="black")
    elif shape == "square":
        d.rectangle(box, fill=colour, outline="black")
    elif shape == "triangle":
        d.polygon([(cx, cy - s - 1), (cx - s - 1, cy + s), (cx + s + 1, cy + s)], fill=colour, outline="black")
    else:
        d.ellipse(box, outline=colour, width=2)


def picture(points: list[Point], path: str, size: tuple[int, int] = (900, 560)) -> None:
    """Speed-up (log axis) against C2ST vs AR; the indistinguishable band shaded, colour by method, shape by
    tier (hollow: too few images measured for a tier)."""
    W, H = size
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    f = _font()
    left, right, top, bottom = 70, W - 230, 40, H - 60
    d.text((left, 10), "Speed-up over AR (log) against C2ST vs AR, scenes pair, CPU, one thread", fill="black", font=f)
    x0, x1 = 0.45, 1.02
    ys = [math.log10(p.speedup) for p in points] or [0.0]
    y0, y1 = min(min(ys), 0.0) - 0.08, max(max(ys), math.log10(4)) + 0.08
    tx = lambda x: left + (x - x0) / (x1 - x0) * (right - left)          # noqa: E731
    ty = lambda y: bottom - (y - y0) / (y1 - y0) * (bottom - top)       # noqa: E731
    d.rectangle([tx(x0), top, tx(Q.C2ST_MAX), bottom], fill=(225, 245, 225))
    d.text((tx(x0) + 4, top + 4), f"indistinguishable: C2ST <= {Q.C2ST_MAX}", fill=(30, 110, 30), font=f)
    d.rectangle([left, top, right, bottom], outline="black")
    for t in _ticks(x0, x1):
        d.line([tx(t), bottom, tx(t), bottom + 4], fill="black")
        d.text((tx(t) - 10, bottom + 6), _fmt(t), fill="black", font=f)
    for v in (0.25, 0.5, 1, 2, 4, 8):
        if y0 <= math.log10(v) <= y1:
            d.line([left - 4, ty(math.log10(v)), right, ty(math.log10(v))], fill=(0, 0, 0) if v == 1 else (220, 220, 220))
            d.text((20, ty(math.log10(v)) - 5), f"{v:g}x", fill="black", font=f)
    d.text(((left + right) // 2 - 60, bottom + 22), "C2ST against AR (strongest detector; 0.5 = chance)", fill="black", font=f)
    methods = sorted({p.method for p in points})
    colours = {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(methods)}
    for p in sorted(points, key=lambda p: p.tier is not None):   # tiered points drawn on top
        _marker(d, tx(min(max(p.c2st_ar, x0), x1)), ty(math.log10(p.speedup)), TIER_SHAPES[p.tier], colours[p.method])
    ly = top
    for m in methods:
        d.rectangle([right + 12, ly + 2, right + 20, ly + 10], fill=colours[m])
        d.text((right + 24, ly), m, fill="black", font=f)
        ly += 14
    ly += 8
    for tier, shape in TIER_SHAPES.items():
        _marker(d, right + 16, ly + 6, shape, (120, 120, 120))
        d.text((right + 24, ly), tier or f"fewer than {Q.TIER_MIN_SAMPLES} images", fill="black", font=f)
        ly += 14
    img.save(path)


def markdown(points: list[Point], table: dict, sources: list[str]) -> str:
    lines = ["# Frontier: speed-up against C2ST vs AR", "",
             "`python -m bench.frontier` (reads the results below; runs no model). Every speed-up is the wall-time "
             "ratio to AR's runs of the same results file. Tiers from bench.measures at "
             f"{Q.TIER_MIN_SAMPLES} images; rows with fewer images (the sweep's screening) carry none.", "",
             "Sources: " + ", ".join(f"`{s}`" for s in sources), "", "![frontier](frontier-embedded-scenes.png)", "",
             "## Fastest setting per method and tier", "",
             f"| method | {Q.INDISTINGUISHABLE} | {Q.AS_GOOD} |", "|---|---|---|"]
    cell = lambda p: "none in this tier" if p is None else f"{p.speedup:.2f}x `{p.label}` ({p.run})"   # noqa: E731
    for m, row in sorted(table.items()):
        lines.append(f"| {m} | {cell(row[Q.INDISTINGUISHABLE])} | {cell(row[Q.AS_GOOD])} |")
    lines += ["", "## Every point", "", "| method | row | run | images | speed-up | C2ST vs AR | tier |",
              "|---|---|---|---|---|---|---|"]
    for p in sorted(points, key=lambda p: (p.method, -p.speedup)):
        lines.append(f"| {p.method} | {p.label} | {p.run} | {p.samples} | {p.speedup:.2f}x | {p.c2st_ar:.3f} | "
                     f"{p.tier or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", nargs="+", default=list(DEFAULT_RESULTS), help="bench.compare / bench.sweep JSON files")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--tag", default="frontier-embedded-scenes")
    args = ap.parse_args(argv)
    points: list[Point] = []
    for path in args.results:
        if not os.path.isfile(path):
            raise SystemExit(f"--results: {path} does not exist (run the benchmark that writes it first)")
        with open(path, encoding="utf-8") as fh:
            points += points_of(json.load(fh), os.path.splitext(os.path.basename(path))[0])
    table = fastest_per_tier(points)
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, args.tag)
    picture(points, base + ".png")
    with open(base + ".md", "w", encoding="utf-8") as fh:
        fh.write(markdown(points, table, args.results).replace("frontier-embedded-scenes.png", f"{args.tag}.png"))
    with open(base + ".json", "w", encoding="utf-8") as fh:
        json.dump({"command": "python -m bench.frontier " + " ".join(argv or []), "sources": args.results,
                   "points": [asdict(p) for p in points],
                   "fastest": {m: {t: (asdict(p) if p else None) for t, p in row.items()} for m, row in table.items()}},
                  fh, indent=1)
    print(markdown(points, table, args.results).split("## Every point")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
