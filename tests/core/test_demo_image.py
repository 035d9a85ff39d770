"""The demo (mulosd_core.demo): its picture (tiles and rows apart, rows and columns labelled, a legend of the
acceptance-map colours), the tiers it reads from the committed benchmark, and one short run."""
import json

import numpy as np
import torch
from PIL import Image

from mulosd_core import demo as D
from mulosd_core.demo import GAP, PAPER, side_by_side, to_grid
from mulosd_core.decode import MAP_COLOURS, acceptance_map


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


def ink(a: np.ndarray) -> int:
    return int((a.min(-1) < 128).sum())


def test_rows_and_columns_are_labelled():
    tile = 100
    maps = acceptance_map(torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0], [0, 0, 0, 0]]), 2)
    row = to_grid(maps, tile, GAP)
    body = side_by_side([row, row])
    labels = [["AR", "1.00x"], ["MuLo-SD", "7.00x", "tier: not measured"]]
    img = D.labelled([row, row], labels, ["beach", "desert", "city"], tile, ["a caption"])
    # the stacked rows sit whole inside, right of the row labels and below the column labels
    hits = [(y, x) for y in range(img.shape[0] - body.shape[0] + 1) for x in range(img.shape[1] - body.shape[1] + 1)
            if np.array_equal(img[y:y + 8, x:x + 8], body[:8, :8]) and np.array_equal(img[y:y + body.shape[0], x:x + body.shape[1]], body)]
    assert len(hits) == 1
    top, left = hits[0]
    assert top > 10 and left > 30
    assert ink(img[top:top + tile, :left]) > 0                                     # AR's label
    assert ink(img[top + tile + 2 * GAP:top + 2 * tile, :left]) > ink(img[top:top + tile, :left])   # three lines
    for j in range(3):                                                              # one name over each tile
        x = left + j * (tile + GAP)
        assert ink(img[:top, x:x + tile]) > 0
    assert ink(img[top + body.shape[0]:]) > 0                                       # the caption
    # a longer label widens the margin rather than overlapping the tiles
    wide = D.labelled([row, row], [["a much longer row label"], ["x"]], ["a", "b", "c"], tile, [])
    assert wide.shape[1] > img.shape[1]


def test_tiers_come_from_the_committed_benchmark(tmp_path):
    res = tmp_path / "bench" / "results"
    res.mkdir(parents=True)
    rows = {"ar": {"wall_ratio_vs_ar": 1.0, "tier": None},
            "mulo_islands": {"wall_ratio_vs_ar": 3.5, "tier": {"tier": "as good as AR", "powered": True}}}
    (res / "cpu-embedded.json").write_text(json.dumps({"methods": rows}))
    got = D.benchmark_tiers("scenes", tmp_path)
    assert got["source"] == D.RESULTS["scenes"]
    assert got["methods"]["ar"] == {"speedup": 1.0, "tier": "reference"}
    assert got["methods"]["mulo_islands"] == {"speedup": 3.5, "tier": "as good as AR"}
    del rows["mulo_islands"]["tier"]                                 # a run from before the tiers
    (res / "cpu-embedded.json").write_text(json.dumps({"methods": rows}))
    assert D.benchmark_tiers("scenes", tmp_path)["methods"]["mulo_islands"]["tier"] == D.NOT_MEASURED
    none = D.benchmark_tiers("patterns", tmp_path)                   # no file: the pack's sdist has no bench/
    assert none["source"] is None and none["methods"]["mulo_islands"] == {"speedup": None, "tier": D.NOT_MEASURED}
    # the committed file is found from the clone, whatever the working folder
    assert D.benchmark_tiers("scenes")["source"] == D.RESULTS["scenes"]


def test_one_class_run_prints_tiers_and_bars(tmp_path, capsys):
    """The patterns family (the cheaper one), one class: a bar per method, the labelled picture, the tiers."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        s = D.run_demo(str(tmp_path), family="patterns", classes=[0])
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert "[AR (ar)] [####################] 1/1" in err and "[MuLo-SD (mulo_islands)] [" in err
    for name in ("ar.png", "mulo.png", "maps.png", "side_by_side.png"):
        assert (tmp_path / name).is_file()
    pic = np.asarray(Image.open(tmp_path / "side_by_side.png"))
    assert pic.shape[0] > 3 * 128 and pic.shape[1] > 128                    # rows, labels, caption
    assert s["tiers"]["ar"] == "reference" and s["benchmark"]["source"] == D.RESULTS["patterns"]
    text = D.summary(s)
    mulo = next(line for line in text.splitlines() if line.startswith("MuLo-SD:"))
    assert "x AR's speed in this run" in mulo and f"tier {s['tiers']['mulo_islands']}" in mulo
    assert D.RESULTS["patterns"] in text


def test_a_row_measured_at_other_settings_gives_no_tier():
    from mulosd_core.presets import method_presets
    from dataclasses import replace
    configs = {n: method_presets("scenes")[n][0] for n, _ in D.METHODS}
    got = D.benchmark_tiers("scenes", configs=configs)["methods"]["mulo_islands"]
    other = dict(configs, mulo_islands=replace(configs["mulo_islands"], rows_per_step=99))
    assert D.benchmark_tiers("scenes", configs=other)["methods"]["mulo_islands"]["tier"] == D.NOT_MEASURED
    assert got["tier"] != D.NOT_MEASURED      # the committed benchmark ran the shipped settings


def test_a_stale_row_takes_the_shipped_settings_tier_from_the_sweep(tmp_path):
    """The benchmark ran other settings than today's defaults: the tier sweep that chose them gives their tier."""
    from dataclasses import asdict, replace
    from mulosd_core.presets import method_presets, mulo_defaults
    res = tmp_path / "bench" / "results"
    res.mkdir(parents=True)
    configs = {n: method_presets("scenes")[n][0] for n, _ in D.METHODS}
    old = replace(configs["mulo_islands"], rows_per_step=99)
    rows = {"ar": {"wall_ratio_vs_ar": 1.0, "tier": None},
            "mulo_islands": {"wall_ratio_vs_ar": 7.0, "config": old.to_dict(), "tier": {"tier": "outside the tiers"}}}
    (res / "cpu-embedded.json").write_text(json.dumps({"methods": rows}))
    shipped = {k: v for k, v in asdict(mulo_defaults("scenes")).items() if k not in ("source", "tier")}
    tiers = {"as good as AR": {"label": "x", "speed_up": 0.8, "beats_ar": False, "settings": shipped},
             "indistinguishable": None}
    (res / "sweep-embedded-scenes.json").write_text(json.dumps({"sweep": {"tiers": tiers}}))
    got = D.benchmark_tiers("scenes", tmp_path, configs=configs)
    assert got["methods"]["mulo_islands"] == {"speedup": 0.8, "tier": "as good as AR"}
    assert got["source"] == D.RESULTS["scenes"] + " and " + D.SWEEPS["scenes"]
    tiers["indistinguishable"] = tiers["as good as AR"]                      # the stricter tier is named first
    (res / "sweep-embedded-scenes.json").write_text(json.dumps({"sweep": {"tiers": tiers}}))
    assert D.benchmark_tiers("scenes", tmp_path, configs=configs)["methods"]["mulo_islands"]["tier"] == "indistinguishable"
    other = dict(configs, mulo_islands=replace(configs["mulo_islands"], rows_per_step=98))   # neither file's settings
    assert D.benchmark_tiers("scenes", tmp_path, configs=other)["methods"]["mulo_islands"]["tier"] == D.NOT_MEASURED
