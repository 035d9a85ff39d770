"""Demo on the embedded models: the same classes with AR and MuLo-SD, side by side.

    python -m mulosd_core.demo [--family scenes] [--out outputs/demo] [--per-class 1] [--seed 0]

Writes ar.png, mulo.png, maps.png and side_by_side.png (rows: AR, MuLo-SD, acceptance
map; green accepted, red rejected, yellow resampled neighbour, blue target-sampled) and
prints target calls and the wall-time ratio measured in this process.
"""
from __future__ import annotations

import argparse
import logging
import os
import time

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw, ImageFont

from .data.families import data_family
from .engine import MAP_COLOURS, generate
from .models.registry import DEFAULT_EMBEDDED_FAMILY, EMBEDDED_FAMILIES, load_embedded
from .presets import method_presets


GAP = 4          # pixels between the tiles of a row (and twice that between rows)
PAPER = 255      # the separators' and the legend's background: white
# acceptance-map codes in the engine's order (engine.MAP_COLOURS, ACCEPTED, REJECTED, NEIGHBOUR, TARGET)
MAP_LEGEND = ("accepted draft", "rejected draft", "resampled neighbour", "target only")


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


def run_demo(out: str, per_class: int = 1, seed: int = 0, device: str = "cpu",
             family: str = DEFAULT_EMBEDDED_FAMILY) -> dict:
    """Every class of an embedded family with AR and MuLo-SD, each sampled as the family's card says."""
    target = load_embedded("target", device=device, family=family)
    drafter = load_embedded("drafter", device=device, vq=target.vq, family=family)
    sampling = target.default_sampling
    presets = method_presets(target.family)
    class_names = data_family(family).class_names
    classes = [c for c in range(len(class_names)) for _ in range(per_class)]
    results = {}
    for name in ("ar", "mulo_islands"):
        cfg, kind = presets[name]
        d = drafter if kind == "low" else None
        generate(target, torch.tensor([0]), sampling, cfg, d, seed=10_000)  # warm-up, not timed
        images, maps, calls, dcalls = [], [], 0, 0
        t0 = time.perf_counter()
        for i, c in enumerate(classes):  # batch size 1, the paper's setting
            r = generate(target, torch.tensor([c]), sampling, cfg, d, seed=seed + i)
            images.append(r.images)
            maps.append(r.maps)
            calls += r.stats.target_calls
            dcalls += r.stats.drafter_calls
        results[name] = dict(seconds=time.perf_counter() - t0, images=torch.cat(images), maps=torch.cat(maps),
                             target_calls=calls / len(classes), drafter_calls=dcalls / len(classes))
    os.makedirs(out, exist_ok=True)
    size = target.image_size * 2
    rows = {"ar": to_grid(results["ar"]["images"], size, GAP), "mulo": to_grid(results["mulo_islands"]["images"], size, GAP),
            "maps": to_grid(results["mulo_islands"]["maps"], size, GAP)}
    for k, v in rows.items():
        Image.fromarray(v).save(os.path.join(out, f"{k}.png"))
    Image.fromarray(side_by_side([rows["ar"], rows["mulo"], rows["maps"]])).save(os.path.join(out, "side_by_side.png"))
    ar, mu = results["ar"], results["mulo_islands"]
    return {"family": family, "sampling": sampling.to_dict(), "classes": [class_names[c] for c in classes], "ar_seconds": ar["seconds"], "mulo_seconds": mu["seconds"],
            "wall_ratio": ar["seconds"] / mu["seconds"], "ar_target_calls": ar["target_calls"],
            "mulo_target_calls": mu["target_calls"], "mulo_drafter_calls": mu["drafter_calls"], "out": out}


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
    n = len(s["classes"])
    print(f"family {s['family']}, sampling {s['sampling']}")
    print(f"classes: {', '.join(s['classes'])}")
    print(f"AR:      {s['ar_target_calls']:.0f} target calls/image, {s['ar_seconds']:.2f} s for {n} images")
    print(f"MuLo-SD: {s['mulo_target_calls']:.1f} target calls/image (+{s['mulo_drafter_calls']:.1f} drafter calls), "
          f"{s['mulo_seconds']:.2f} s for {n} images")
    print(f"wall-time ratio AR / MuLo-SD: {s['wall_ratio']:.2f}x (same process, same seeds, batch 1, {args.device})")
    print(f"images: {os.path.join(s['out'], 'side_by_side.png')} (rows: AR, MuLo-SD, acceptance map)")


if __name__ == "__main__":
    main()
