"""bench.scaling: the per-pair compare commands, resuming from a pair's file, the summary rows."""
from __future__ import annotations

import json

from bench import compare
from bench import scaling as S
from mulosd_core import presets as P


def test_each_pair_is_one_compare_run_with_its_drafter():
    argv = S.compare_argv("128-r4", 400, 1, 1, "out")
    args = compare.parse_args(argv)
    assert (args.family, args.drafter, args.tag) == ("scenes128", "scenes:drafter", "scaling-128-r4")
    assert "mulo_indistinguishable" in args.methods and "mulo_lossless" not in args.methods and "zipar" not in args.methods
    assert set(P.BASELINES) <= set(compare.parse_args(S.compare_argv("128-r2", 400, 1, 1, "out")).methods)
    assert "--drafter" not in S.compare_argv("64-r2", 400, 1, 1, "out")


def _result(argv, samples=400):
    info = {"target": {"grid": 32}, "drafter": {"grid": 8}}
    ar = {"wall_ratio_vs_ar": 1.0, "target_calls": 1024}
    mulo = {"wall_ratio_vs_ar": 2.5, "wall_ratio_ci": [2.2, 2.8], "target_calls": 300, "acceptance_rate": 0.4,
            "tier": {"tier": "outside the tiers"}, "measures": {"c2st_ar": {"max": 0.9}}}
    return {"command": "python -m bench.compare " + " ".join(argv), "samples": samples,
            "settings": {"image_size": 128, "model_info": info}, "methods": {"ar": ar, "mulo_fastest": mulo}}


def test_a_pair_is_read_back_only_from_the_same_command(tmp_path):
    argv = S.compare_argv("128-r4", 400, 1, 1, str(tmp_path))
    path = tmp_path / "scaling-128-r4.json"
    path.write_text(json.dumps(_result(argv)))
    assert S._done(str(path), argv) is not None
    assert S._done(str(path), S.compare_argv("128-r4", 48, 1, 1, str(tmp_path))) is None
    assert S._done(str(tmp_path / "missing.json"), argv) is None


def test_summary_rows_give_ratio_calls_and_a_tier_only_at_enough_images():
    argv = S.compare_argv("128-r4", 400, 1, 1, "out")
    (row,) = S.summary_rows("128-r4", _result(argv))
    assert (row["r"], row["speedup"], row["target_calls"], row["ar_target_calls"]) == (4, 2.5, 300, 1024)
    assert row["tier"] == "outside the tiers"
    (few,) = S.summary_rows("128-r4", _result(argv, samples=48))
    assert few["tier"] is None
    assert "| 128-r4 | mulo_fastest | 4 | 2.50x | 300 (1024) | 0.400 | 0.900 | outside the tiers |" in S.markdown([row], 400, 1)


def test_a_sweep_on_the_pair_adds_its_fastest_finalist_per_tier(tmp_path):
    """sweep_rows reads the final stage: the indistinguishable and the as-good-as-AR choice, each with its own
    ratio, calls and tier; a pair without a sweep file adds nothing."""
    row = lambda label, speed, tier: {"label": label, "wall_ratio_vs_ar": speed, "target_calls": 500,
                                      "acceptance_rate": 0.2, "tier": {"tier": tier}, "measures": {"c2st_ar": {"max": 0.52}}}
    final = {"ar": {"target_calls": 1024}, "samples": 400, "chosen": "b", "indistinguishable": "a",
             "rows": [row("a", 1.3, "indistinguishable"), row("b", 1.6, "as good as AR"), row("c", 9.0, "outside the tiers")]}
    res = {"tag": "sweep-embedded-scenes128-r4", "sweep": {"stages": {"final": final}},
           "settings": {"model_info": {"target": {"grid": 32}, "drafter": {"grid": 8}}}}
    rows = S.sweep_rows("128-r4", res)
    assert [(r["speedup"], r["tier"], r["r"], r["ar_target_calls"]) for r in rows] == [
        (1.3, "indistinguishable", 4, 1024), (1.6, "as good as AR", 4, 1024)]
    assert rows[0]["method"] == "sweep, fastest indistinguishable: a"
    final["chosen"] = None
    assert len(S.sweep_rows("128-r4", res)) == 1
    assert S.pair_sweep("128-r4", str(tmp_path)) is None
    (tmp_path / S.SWEEPS["128-r4"]).write_text(json.dumps(res))
    assert S.pair_sweep("128-r4", str(tmp_path))["tag"] == "sweep-embedded-scenes128-r4"
