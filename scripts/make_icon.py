"""Draw the pack's registry icon, docs/images/icon.png (pyproject's [tool.comfy] Icon).

    python scripts/make_icon.py

The picture is the method in one glance: a coarse 4 x 4 draft whose cells are kept, and a few
cells split into the target's 2 x 2 tokens where local verification redrew them (islands).
Square and small, as the Comfy Registry wants its icons (at most 400 x 400).
"""
from __future__ import annotations

import sys
from pathlib import Path

from PIL import Image, ImageDraw

OUT = Path(__file__).resolve().parents[1] / "docs" / "images" / "icon.png"
SIZE = 128
GRID = 4
# Draft colours per cell (a small landscape: sky, hills, ground), row by row.
DRAFT = [
    ["#5b8fd9", "#6b9de0", "#7aaae6", "#5b8fd9"],
    ["#7aaae6", "#f2c14e", "#6b9de0", "#7aaae6"],
    ["#3f8f5a", "#4fa36a", "#3f8f5a", "#4fa36a"],
    ["#8a6a45", "#7a5c3b", "#8a6a45", "#7a5c3b"],
]
ISLANDS = {(1, 1): ["#f29e4e", "#f2c14e", "#f2c14e", "#e8893c"],   # (row, col): its four fine tokens
           (2, 2): ["#3f8f5a", "#56b072", "#2f7a4a", "#3f8f5a"]}
BACKGROUND = "#20232a"
ISLAND_EDGE = "#ff6b3d"


def draw() -> Image.Image:
    img = Image.new("RGB", (SIZE, SIZE), BACKGROUND)
    d = ImageDraw.Draw(img)
    pad, gap = 10, 3
    cell = (SIZE - 2 * pad - (GRID - 1) * gap) // GRID
    for r in range(GRID):
        for c in range(GRID):
            x, y = pad + c * (cell + gap), pad + r * (cell + gap)
            if (r, c) not in ISLANDS:
                d.rectangle([x, y, x + cell - 1, y + cell - 1], fill=DRAFT[r][c])
                continue
            half = cell // 2
            for i, colour in enumerate(ISLANDS[(r, c)]):
                fx, fy = x + (i % 2) * half, y + (i // 2) * half
                d.rectangle([fx, fy, fx + half - 1, fy + half - 1], fill=colour)
            d.rectangle([x - 1, y - 1, x + cell, y + cell], outline=ISLAND_EDGE, width=2)
    return img


def main() -> int:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    draw().save(OUT, optimize=True)
    print(f"wrote {OUT.relative_to(OUT.parents[2])} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
