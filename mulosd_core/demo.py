"""Demo on the embedded models: the same classes with AR and MuLo-SD, side by side.

    python -m mulosd_core.demo [--family scenes] [--out outputs/demo] [--per-class 1] [--seed 0]

Shows a progress bar per method on stderr, writes ar.png, mulo.png, maps.png and side_by_side.png
(rows labelled AR, MuLo-SD and acceptance map, columns by class; green accepted, red rejected, yellow
resampled neighbour, blue target-sampled) and prints, per method, target calls, the wall-time ratio
measured in this process and the quality tier of the committed benchmark (bench/results, read as plain
JSON: a speed-up only counts inside a tier, docs/RESULTS.md).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw, ImageFont

from .data.families import data_family
from .decode import MAP_COLOURS, MethodConfig, generate
from .models.registry import DEFAULT_EMBEDDED_FAMILY, EMBEDDED_FAMILIES, load_embedded
from .presets import INDISTINGUISHABLE, MuloDefaults, mulo_config, resolve, same_settings
from .textbar import TextBar


GAP = 4          # pixels between the tiles of a row (and twice that between rows)
PAPER = 255      # the separators' and the legend's background: white
# acceptance-map codes in the engine's order (engine.MAP_COLOURS, ACCEPTED, REJECTED, NEIGHBOUR, TARGET)
MAP_LEGEND = ("accepted draft", "rejected draft", "resampled neighbour", "target only")
INK = (0, 0, 0)
METHODS = (("ar", "AR"), ("mulo_islands", "MuLo-SD"))   # preset name, what the picture and the print call it
ROOT = Path(__file__).resolve().parents[1]               # the clone (bench/results is not in the pack's sdist)
# each family's committed benchmark (python -m bench.compare), whose tiers the demo prints
RESULTS = {"scenes": "bench/results/cpu-embedded.json", "patterns": "bench/results/cpu-embedded-patterns.json"}
# ... and its committed tier sweep (python -m bench.sweep), read when the benchmark's row predates the defaults
SWEEPS = {"scenes": "bench/results/sweep-embedded-scenes.json"}
NOT_MEASURED = "not measured"


def _read_json(root: Path, rel: str | None) -> dict:
    path = root / rel if rel else None
    if path is None or not path.is_file():
        return {}
    with open(path) as f:
        return json.load(f)


def sweep_tier(family: str, config: MethodConfig, root: Path = ROOT) -> dict | None:
    """{"source", "speedup", "tier"} of MuLo-SD at `config` in the family's committed tier sweep (its fastest
    setting per tier, "settings" in MuloDefaults' names), None when no tier's setting is `config`."""
    tiers = (_read_json(root, SWEEPS.get(family)).get("sweep") or {}).get("tiers") or {}
    for tier in sorted(tiers, key=lambda t: t != INDISTINGUISHABLE):   # the stricter tier first
        v = tiers[tier]
        if v and mulo_config(MuloDefaults(**v["settings"], source=SWEEPS[family])) == config:
            return {"source": SWEEPS[family], "speedup": v["speed_up"], "tier": tier}
    return None


def benchmark_tiers(family: str, root: Path = ROOT, configs: dict | None = None) -> dict:
    """{"source": the results file (None when this copy has none), "methods": {name: {"speedup", "tier"}}} for
    the demo's methods, from the family's committed `bench.compare` JSON: "tier" is the row's
    methods[name]["tier"]["tier"], "reference" for AR, NOT_MEASURED when the run predates the tiers, the
    file is missing, or the row was measured at other settings than `configs[name]` (a MethodConfig: the
    presets changed since the benchmark ran). Such a MuLo-SD row takes the shipped settings' tier from the
    family's tier sweep where it has one ("source" then names both files)."""
    rows = _read_json(root, RESULTS.get(family)).get("methods", {})
    sources = [RESULTS[family]] if rows else []
    out = {}
    for name, _ in METHODS:
        m = rows.get(name) or {}
        if configs and name in configs and not same_settings(m.get("config"), configs[name]):
            m = {}                                        # measured at other settings: not these settings' tier
            if name == "mulo_islands" and (sw := sweep_tier(family, configs[name], root)):
                out[name] = {"speedup": sw["speedup"], "tier": sw["tier"]}
                sources.append(sw["source"])
                continue
        t = m.get("tier")
        out[name] = {"speedup": m.get("wall_ratio_vs_ar"),
                     "tier": "reference" if name == "ar" else t["tier"] if t else NOT_MEASURED}
    return {"source": " and ".join(sources) or None, "methods": out}


def font(size: int = 12):
    """PIL's own font (no file needed) at `size` where this Pillow can scale it."""
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):
        return ImageFont.load_default()


def to_grid(images: torch.Tensor, size: int, gap: int = 0) -> np.ndarray:
    """[B, 3, h, w] in [0, 1] -> one uint8 row image, each tile resized (nearest) to size x size, tiles
    `gap` white pixels apart."""
    tiles = F.interpolate(images.float().cpu(), size=(size, size), mode="nearest")
    tiles = (tiles.permute(0, 2, 3, 1).clamp(0, 1).numpy() * 255).round().astype(np.uint8)
    sep = np.full((size, gap, 3), PAPER, np.uint8)
    parts = [p for tile in tiles for p in (sep, tile)][1:] if gap else list(tiles)
    return np.concatenate(parts, 1)


def map_legend(width: int) -> np.ndarray:
    """A white strip naming the acceptance-map colours (a swatch and a label each)."""
    font = ImageFont.load_default()
    height = 24
    img = Image.new("RGB", (width, height), (PAPER,) * 3)
    draw = ImageDraw.Draw(img)
    x = GAP * 2
    for colour, label in zip(MAP_COLOURS.tolist(), MAP_LEGEND):
        draw.rectangle([x, 6, x + 11, 17], fill=tuple(round(c * 255) for c in colour), outline=(0, 0, 0))
        draw.text((x + 16, 6), label, fill=(0, 0, 0), font=font)
        x += 16 + round(draw.textlength(label, font=font)) + 14
    return np.asarray(img)


def side_by_side(rows: list[np.ndarray]) -> np.ndarray:
    """Rows of equal width stacked with white bands between them, the map legend below."""
    width = rows[0].shape[1]
    band = np.full((2 * GAP, width, 3), PAPER, np.uint8)
    parts = [p for row in rows for p in (band, row)][1:]
    return np.concatenate(parts + [band, map_legend(width)], 0)


def labelled(rows: list[np.ndarray], row_labels: list[list[str]], col_labels: list[str], tile: int,
             caption: list[str]) -> np.ndarray:
    """side_by_side(rows) with each row's label lines at its left, `col_labels` centred over the tiles of the
    top row (tiles `tile` px wide, GAP apart) and `caption` lines below the legend."""
    body = Image.fromarray(side_by_side(rows))
    big, small = font(13), font(11)
    probe = ImageDraw.Draw(body)
    left = 3 * GAP + max(round(probe.textlength(t, font=big if i == 0 else small))
                         for lines in row_labels for i, t in enumerate(lines))
    top, line = 22, 15
    width = max([left + body.width + 2 * GAP] + [2 * GAP + round(probe.textlength(t, font=small)) for t in caption])
    img = Image.new("RGB", (width, top + body.height + GAP + line * len(caption) + GAP), (PAPER,) * 3)
    img.paste(body, (left, top))
    draw = ImageDraw.Draw(img)
    for j, name in enumerate(col_labels):
        cx = left + j * (tile + GAP) + tile / 2
        draw.text((cx, top - 4), name, fill=INK, font=small, anchor="ms")
    for i, lines in enumerate(row_labels):
        y = top + i * (rows[0].shape[0] + 2 * GAP) + 4
        for k, t in enumerate(lines):
            draw.text((GAP, y), t, fill=INK, font=big if k == 0 else small)
            y += 17 if k == 0 else 14
    y = top + body.height + GAP
    for t in caption:
        draw.text((2 * GAP, y), t, fill=INK, font=small)
        y += line
    return np.asarray(img)


def run_demo(out: str, per_class: int = 1, seed: int = 0, device: str = "cpu",
             family: str = DEFAULT_EMBEDDED_FAMILY, classes: list[int] | None = None, progress: bool = True) -> dict:
    """Every class of an embedded family (or `classes`) with AR and MuLo-SD, each sampled as the family's card
    says, a progress bar per method on stderr; writes the pictures and returns what main prints."""
    target = load_embedded("target", device=device, family=family)
    drafter = load_embedded("drafter", device=device, vq=target.vq, family=family)
    sampling = target.default_sampling
    configs = {"ar": resolve(target), "mulo_islands": resolve(target, drafter)}   # the pair's shipped settings
    class_names = [n.replace("_", " ") for n in data_family(family).class_names]   # "snowy mountains"
    wanted = range(len(class_names)) if classes is None else classes
    classes = [c for c in wanted for _ in range(per_class)]
    results = {}
    for name, shown in METHODS:
        cfg, d = configs[name], drafter      # generate ignores the drafter of a target-only method
        generate(target, torch.tensor([0]), sampling, cfg, d, seed=10_000)  # warm-up, not timed
        bar = TextBar(len(classes), progress, f"{shown} ({name})")
        images, maps, calls, dcalls = [], [], 0, 0
        t0 = time.perf_counter()
        for i, c in enumerate(classes):  # batch size 1, the paper's setting
            r = generate(target, torch.tensor([c]), sampling, cfg, d, seed=seed + i)
            images.append(r.images)
            maps.append(r.maps)
            calls += r.stats.target_calls
            dcalls += r.stats.drafter_calls
            bar.step(class_names[c])
        results[name] = dict(seconds=time.perf_counter() - t0, images=torch.cat(images), maps=torch.cat(maps),
                             target_calls=calls / len(classes), drafter_calls=dcalls / len(classes))
    ar, mu = results["ar"], results["mulo_islands"]
    bench = benchmark_tiers(family, configs=configs)
    tiers = {n: bench["methods"][n]["tier"] for n, _ in METHODS}
    ratio = ar["seconds"] / mu["seconds"]
    os.makedirs(out, exist_ok=True)
    size = target.image_size * 2
    rows = {"ar": to_grid(ar["images"], size, GAP), "mulo": to_grid(mu["images"], size, GAP),
            "maps": to_grid(mu["maps"], size, GAP)}
    for k, v in rows.items():
        Image.fromarray(v).save(os.path.join(out, f"{k}.png"))
    row_labels = [["AR", "1.00x (the reference)", f"{ar['target_calls']:.0f} target calls/image"],
                  ["MuLo-SD", f"{ratio:.2f}x AR's speed", f"tier: {tiers['mulo_islands']}",
                   f"{mu['target_calls']:.1f} target calls/image"],
                  ["acceptance", "map of MuLo-SD"]]
    source = bench["source"] or "no benchmark results in this copy"
    caption = [f"{family} family, same classes and seeds, batch 1, {device}; speed-up: wall time in this run.",
               f"Tier ({source}): a speed-up only counts inside a quality tier (docs/RESULTS.md)."]
    picture = labelled([rows["ar"], rows["mulo"], rows["maps"]], row_labels, [class_names[c] for c in classes],
                       size, caption)
    Image.fromarray(picture).save(os.path.join(out, "side_by_side.png"))
    return {"family": family, "sampling": sampling.to_dict(), "classes": [class_names[c] for c in classes],
            "ar_seconds": ar["seconds"], "mulo_seconds": mu["seconds"], "wall_ratio": ratio,
            "ar_target_calls": ar["target_calls"], "mulo_target_calls": mu["target_calls"],
            "mulo_drafter_calls": mu["drafter_calls"], "tiers": tiers, "benchmark": bench, "out": out}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default=DEFAULT_EMBEDDED_FAMILY, choices=sorted(EMBEDDED_FAMILIES),
                    help="embedded family: scenes (default) or patterns (the near-deterministic hard case)")
    ap.add_argument("--out", default="outputs/demo")
    ap.add_argument("--per-class", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    s = run_demo(args.out, args.per_class, args.seed, args.device, args.family)
    print(summary(s, args.device))


def summary(s: dict, device: str = "cpu") -> str:
    """What the demo prints: per method its calls, time, speed-up in this run and tier in the benchmark."""
    n, b = len(s["classes"]), s["benchmark"]
    where = (f"the committed benchmark {b['source']}" if b["source"] else "no benchmark results in this copy")

    def bench(name: str) -> str:
        x = b["methods"][name]["speedup"]
        return f"tier {s['tiers'][name]}" + (f", {x:.2f}x there" if x is not None and name != "ar" else "")
    return "\n".join([
        f"family {s['family']}, sampling {s['sampling']}",
        f"classes: {', '.join(s['classes'])}",
        f"AR:      {s['ar_target_calls']:.0f} target calls/image, {s['ar_seconds']:.2f} s for {n} images: "
        f"1.00x, the reference",
        f"MuLo-SD: {s['mulo_target_calls']:.1f} target calls/image (+{s['mulo_drafter_calls']:.1f} drafter calls), "
        f"{s['mulo_seconds']:.2f} s for {n} images: {s['wall_ratio']:.2f}x AR's speed in this run "
        f"(same seeds, batch 1, {device}); {bench('mulo_islands')}",
        f"tiers from {where}: a speed-up only counts inside a quality tier (docs/RESULTS.md)",
        f"images: {os.path.join(s['out'], 'side_by_side.png')} (rows: AR, MuLo-SD, acceptance map)"])


if __name__ == "__main__":
    main()
