"""The demo image: tiles and rows apart, and a legend of the acceptance-map colours (mulosd_core.demo)."""
import numpy as np
import torch

from mulosd_core.demo import GAP, PAPER, side_by_side, to_grid
from mulosd_core.engine import MAP_COLOURS, acceptance_map


def test_tiles_rows_and_legend():
    maps = acceptance_map(torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0], [0, 0, 0, 0]]), 2)   # [3, 3, 2, 2]
    row = to_grid(maps, 8, GAP)
    assert row.shape == (8, 3 * 8 + 2 * GAP, 3)
    assert (row[:, 8:8 + GAP] == PAPER).all() and (row[:, 16 + GAP:16 + 2 * GAP] == PAPER).all()
    assert to_grid(maps, 8).shape == (8, 24, 3)                      # no gap: tiles touch, as bench uses it
    wide = to_grid(maps, 200, GAP)                                   # room for the whole legend
    img = side_by_side([wide, wide])
    assert (img[200:200 + 2 * GAP] == PAPER).all()                   # a white band between the rows
    legend = img[400 + 4 * GAP:]
    assert legend.shape[0] > 10
    colours = {tuple(c) for c in legend.reshape(-1, 3).tolist()}
    for c in MAP_COLOURS.tolist():                                   # every map colour has its swatch
        assert tuple(round(v * 255) for v in c) in colours
    assert np.array_equal(img[:200], wide)
