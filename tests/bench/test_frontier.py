"""bench.frontier: points from compare and sweep results, the fastest setting per method and tier, files."""
from __future__ import annotations

import json

import pytest

from bench import frontier as F
from bench import measures as Q


def verdict(tier):
    return {"tier": tier, "indistinguishable": tier == Q.INDISTINGUISHABLE,
            "as_good": tier in (Q.INDISTINGUISHABLE, Q.AS_GOOD), "powered": True, "why": []}


def row(ratio, c2st, samples=400, tier=Q.OUTSIDE, config=None, **kw):
    return {"wall_ratio_vs_ar": ratio, "measures": {"samples": samples, "c2st_ar": {"max": c2st}},
            "tier": verdict(tier), "config": config, **kw}


COMPARE = {"methods": {
    "ar": row(1.0, 0.5, tier=Q.INDISTINGUISHABLE, config={"method": "ar"}),
    "zipar": row(1.6, 0.52, tier=Q.INDISTINGUISHABLE, config={"method": "zipar"}),
    "gsd": row(1.1, 0.56, tier=Q.AS_GOOD, config={"method": "sjd", "verifier": {"rule": "gsd"}}),
    "sd": row(0.8, 0.5, tier=Q.INDISTINGUISHABLE, config={"method": "speculative", "verifier": {"rule": "exact"}}),
    "mulo_fastest": row(7.0, 1.0, config={"method": "speculative", "verifier": {"rule": "mulo"}}),
    "drafter_alone_pixel": row(8.0, 1.0, control=True),
}}
SWEEP = {"sweep": {"stages": {
    "tau_k_l": {"rows": [{"label": "tau=0.05 k=1", **row(2.4, 0.5, samples=48, tier=None)}]},
    "final": {"rows": [{"label": "tau=0.3 k=8", **row(0.9, 0.53, tier=Q.INDISTINGUISHABLE)},
                       {"label": "tau=0.2 k=8", **row(1.2, 0.58, tier=Q.AS_GOOD)}]},
    "lantern": {"rows": [{"label": "delta=0.05", **row(1.5, 0.8, samples=48, tier=None)}]},
}}}


def test_points_leave_out_ar_and_controls_and_screened_rows_get_no_tier():
    pts = F.points_of(COMPARE, "c") + F.points_of(SWEEP, "s")
    labels = {p.label: p for p in pts}
    assert "ar" not in labels and "drafter_alone_pixel" not in labels
    assert labels["gsd"].method == "gsd" and labels["sd"].method == "sd" and labels["mulo_fastest"].method == "mulo"
    assert labels["tau_k_l: tau=0.05 k=1"].tier is None and labels["lantern: delta=0.05"].method == "lantern"


def test_fastest_per_tier_counts_indistinguishable_as_good_too():
    table = F.fastest_per_tier(F.points_of(COMPARE, "c") + F.points_of(SWEEP, "s"))
    assert table["zipar"][Q.INDISTINGUISHABLE].speedup == 1.6 and table["zipar"][Q.AS_GOOD].speedup == 1.6
    assert table["mulo"][Q.INDISTINGUISHABLE].label == "final: tau=0.3 k=8"
    assert table["mulo"][Q.AS_GOOD].label == "final: tau=0.2 k=8"   # the screened 2.4x row has no tier
    assert table["gsd"][Q.INDISTINGUISHABLE] is None


def test_main_writes_the_picture_table_and_json(tmp_path):
    a, b = tmp_path / "c.json", tmp_path / "s.json"
    a.write_text(json.dumps(COMPARE))
    b.write_text(json.dumps(SWEEP))
    assert F.main(["--results", str(a), str(b), "--out", str(tmp_path), "--tag", "fr"]) == 0
    md = (tmp_path / "fr.md").read_text()
    assert "| zipar | 1.60x `zipar` (c)" in md and "![frontier](fr.png)" in md
    assert (tmp_path / "fr.png").stat().st_size > 0
    assert len(json.loads((tmp_path / "fr.json").read_text())["points"]) == 8


def test_a_missing_results_file_is_named():
    with pytest.raises(SystemExit, match="nope.json does not exist"):
        F.main(["--results", "nope.json"])


def test_baseline_sweep_rows_belong_to_their_method():
    res = {"sweep": {"stages": {"final": {"rows": [
        {"label": "zipar: window=4", **row(2.1, 0.53, tier=Q.INDISTINGUISHABLE)},
        {"label": "lantern: delta=0.05 draft_len=4", **row(1.4, 0.8)}]}}}}
    pts = {p.label: p for p in F.points_of(res, "b")}
    assert pts["final: zipar: window=4"].method == "zipar"
    assert pts["final: lantern: delta=0.05 draft_len=4"].method == "lantern"
    assert F.fastest_per_tier(list(pts.values()))["zipar"][Q.INDISTINGUISHABLE].speedup == 2.1
