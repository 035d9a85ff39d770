"""The sweep end to end on random tiny models: every stage runs, each setting is timed against its
own stage's AR, and the chosen defaults name every preset constant the sweep owns."""
import json
import os

from bench import measures as Q
from bench import sweep as S
from mulosd_core import presets as P


def test_quick_sweep_writes_every_stage(tmp_path):
    assert S.main(["--quick", "--models", "tiny", "--out", str(tmp_path), "--no-progress"]) == 0
    res = json.loads((tmp_path / "sweep-tiny-quick.json").read_text())
    stages = res["sweep"]["stages"]
    want = ["tau_k_l", "commit", "window", "rows", "recheck", "lantern"]
    assert [s for s in stages if s != "final"] == [w for w in want if w != "commit" or stages.get("commit")]
    assert "commit" in stages or res["sweep"]["chosen"]["rule"] == "grouped"    # the pool commit needs the k pool
    assert len(stages["tau_k_l"]["rows"]) == len(S.QUICK["taus"]) * (len(S.QUICK["ks"]) + 1) * len(S.QUICK["radii"])
    assert [r["params"]["rows"] for r in stages["rows"]["rows"]] == list(S.QUICK["rows"])
    for s in stages.values():
        assert s["ar"]["wall_seconds_median"] > 0
        assert sum(r["chosen"] for r in s["rows"]) == (s["chosen"] is not None)
    # the final stage: the fastest settings that survived a screen, and the paper's settings as an anchor, each
    # with its tier (2 images per side: too few for a pass, so nothing is chosen and the preset values stay)
    final = stages["final"]["rows"]
    assert 0 < len(final) <= S.FINAL_TOP + 1 and any(r["label"].startswith("paper: ") for r in final)
    assert all(r["tier"]["tier"] == Q.OUTSIDE and r["screen"] is None for r in final)
    assert all(r["screen"] is not None and r["tier"] is None for r in stages["tau_k_l"]["rows"])
    assert "final" in res["sweep"]["kept_preset_value_in"]
    assert res["sweep"]["tiers"] == {Q.AS_GOOD: None, Q.INDISTINGUISHABLE: None}
    chosen = res["sweep"]["chosen"]
    assert set(chosen) == {"rule", "tau", "k_neighbours", "expansion_radius", "rows_per_step", "parallel_window", "recheck",
                           "recheck_scope", "commit", "lantern_delta"}
    before = P.mulo_defaults(None)   # tiny random models have no family: the paper's settings
    assert res["sweep"]["preset_before"]["rows_per_step"] == before.rows_per_step
    assert "## rows" in (tmp_path / "sweep-tiny-quick.md").read_text()
    assert "## Tiers" in (tmp_path / "sweep-tiny-quick.md").read_text()
    for stage in ("tau-k-l", "window", "rows", "lantern", "final"):
        assert (tmp_path / f"sweep-tiny-quick-pareto-{stage}-c2st.png").stat().st_size > 1000


def test_self_drafting_sweep_runs_the_target_as_its_own_drafter(tmp_path, monkeypatch):
    """--self-drafting: every MuLo-SD setting drafts with the target at the low grid; no LANTERN stage (it
    needs the same-resolution drafter); the tag says -self."""
    from bench.models import Models

    kinds, drafter_for = set(), Models.drafter_for
    monkeypatch.setattr(Models, "drafter_for", lambda self, kind: kinds.add(kind) or drafter_for(self, kind))
    assert S.main(["--quick", "--self-drafting", "--models", "tiny", "--out", str(tmp_path), "--no-progress"]) == 0
    res = json.loads((tmp_path / "sweep-tiny-quick-self.json").read_text())
    assert res["sweep"]["self_drafting"] and res["settings"]["self_drafting"]
    assert "lantern" not in res["sweep"]["stages"] and "tau_k_l" in res["sweep"]["stages"]
    assert kinds == {None, "self"}     # AR and the target drafting for itself, nothing else


def test_choose_takes_the_fastest_in_the_tier_by_verdict_then_by_screen():
    ind = {"tier": Q.INDISTINGUISHABLE, "indistinguishable": True, "as_good": True}
    good = {"tier": Q.AS_GOOD, "indistinguishable": False, "as_good": True}
    out = {"tier": Q.OUTSIDE, "indistinguishable": False, "as_good": False}
    rows = [dict(label="fast_outside", tier=out, wall_ratio_vs_ar=7.0), dict(label="good", tier=good, wall_ratio_vs_ar=2.0),
            dict(label="ind", tier=ind, wall_ratio_vs_ar=1.2)]
    assert S.choose(rows)["label"] == "good" and S.choose(rows, Q.INDISTINGUISHABLE)["label"] == "ind"
    assert S.choose(rows[:1]) is None
    screened = [dict(label="a", tier=None, screen={Q.AS_GOOD: True, Q.INDISTINGUISHABLE: False}, wall_ratio_vs_ar=3.0),
                dict(label="b", tier=None, screen={Q.AS_GOOD: False, Q.INDISTINGUISHABLE: False}, wall_ratio_vs_ar=5.0)]
    assert S.choose(screened)["label"] == "a" and S.choose(screened, Q.INDISTINGUISHABLE) is None


def test_grid_only_runs_ar_and_mulo_at_each_grid(tmp_path):
    assert S.main(["--grid-only", "--quick", "--models", "tiny", "--out", str(tmp_path), "--no-progress"]) == 0
    res = json.loads((tmp_path / "grid-tiny-quick.json").read_text())
    assert res["sweep"]["stages"] == {} and res["sweep"]["chosen"] is None
    grids = res["sweep"]["grid_experiment"]
    assert [g["grid"] for g in grids] == [round(4 * f / 2) * 2 for f in S.GRID_FACTORS]
    assert [g["native"] for g in grids] == [True, False, False]
    for g in grids:
        assert g["drafter_grid"] == g["grid"] // 2
        assert g["ar"]["target_calls"] == g["grid"] ** 2          # AR: one target call per token
        assert g["mulo_islands"]["wall_ratio_vs_ar"] > 0
    assert "## Grid size" in (tmp_path / "grid-tiny-quick.md").read_text()


def test_recheck_only_compares_recheck_rounds_against_ar(tmp_path):
    assert S.main(["--recheck-only", "--quick", "--models", "tiny", "--out", str(tmp_path), "--no-progress"]) == 0
    res = json.loads((tmp_path / "recheck-tiny-quick.json").read_text())
    assert res["sweep"]["chosen"] is None and list(res["sweep"]["stages"]) == ["recheck"]
    rows = res["sweep"]["stages"]["recheck"]["rows"]
    assert [r["params"]["recheck"] for r in rows] == list(S.RECHECKS)
    assert all(r["wall_ratio_vs_ar"] > 0 for r in rows)
    assert "## recheck" in (tmp_path / "recheck-tiny-quick.md").read_text()
    assert S.main(["--recheck-only", "--recheck-scope", "all", "--quick", "--models", "tiny", "--out", str(tmp_path),
                   "--tag", "all", "--no-progress"]) == 0
    rows = json.loads((tmp_path / "all.json").read_text())["sweep"]["stages"]["recheck"]["rows"]
    assert [r["params"]["recheck_scope"] for r in rows] == ["all"] * len(S.RECHECKS)


def test_sweep_runs_every_mulo_setting_with_the_given_recheck(tmp_path, monkeypatch):
    seen = []
    real = S._mulo

    def spy(*args):
        cfg = real(*args)
        seen.append((cfg.verifier.recheck, cfg.verifier.recheck_scope))
        return cfg

    monkeypatch.setattr(S, "_mulo", spy)
    assert S.main(["--quick", "--models", "tiny", "--out", str(tmp_path), "--tag", "rc", "--no-progress",
                   "--recheck", "2", "--recheck-scope", "all"]) == 0
    assert seen and set(seen) == {(2, "all"), (0, "drafts")}     # the final stage's anchor: the paper's, no recheck
    res = json.loads((tmp_path / "rc.json").read_text())
    assert (res["sweep"]["chosen"]["recheck"], res["sweep"]["chosen"]["recheck_scope"]) == (2, "all")


def test_an_interrupted_sweep_resumes_from_its_journal(tmp_path, monkeypatch):
    """Every finished stage is journaled; a rerun reuses them all and runs nothing again."""
    args = ["--quick", "--models", "tiny", "--out", str(tmp_path), "--no-progress", "--tag", "j"]
    assert S.main(args) == 0
    journal = json.loads((tmp_path / "j.journal.json").read_text())
    assert "tau_k_l" in journal and "final" in journal
    first = json.loads((tmp_path / "j.json").read_text())["sweep"]["chosen"]

    def refuse(*a, **k):
        raise AssertionError("a journaled stage ran again")
    monkeypatch.setattr(S, "run_stage", refuse)
    assert S.main(args) == 0
    assert json.loads((tmp_path / "j.json").read_text())["sweep"]["chosen"] == first


def test_baselines_only_sweeps_each_baseline_over_its_own_knobs(tmp_path):
    """--baselines-only: one screening stage with every BASELINE_GRID setting, labelled by method, then the
    fastest survivors of each method in a final stage with tiers; a rerun reads both stages from the journal."""
    argv = ["--baselines-only", "--quick", "--models", "tiny", "--out", str(tmp_path), "--no-progress"]
    assert S.main(argv) == 0
    res = json.loads((tmp_path / "baselines-tiny-quick.json").read_text())
    sw = res["sweep"]
    screen = sw["stages"]["baselines"]["rows"]
    assert tuple(S.BASELINE_GRID) == P.BASELINES
    assert [r["label"] for r in screen] == [S.baseline_label(m, c) for m, over in S.QUICK_BASELINES.items() for c in over]
    assert all(r["label"].startswith(r["params"]["method"] + ": ") and r["tier"] is None for r in screen)
    survivors = {r["label"] for r in screen if r["qualifies"]}
    final = (sw["stages"].get("final") or {}).get("rows", [])
    assert {r["label"] for r in final} <= survivors and all(r["tier"] for r in final)
    assert set(sw["baselines"]) == set(P.BASELINES) and sw["chosen"] is None
    md = (tmp_path / "baselines-tiny-quick.md").read_text()
    assert "## Fastest setting per baseline and tier" in md and "MuLo-SD setting" not in md
    journal = json.loads((tmp_path / "baselines-tiny-quick.journal.json").read_text())
    assert "baselines" in journal
    assert S.main(argv) == 0      # resumed: the same labels come back from the journal
    again = json.loads((tmp_path / "baselines-tiny-quick.json").read_text())["sweep"]["stages"]["baselines"]
    assert again["ar"] == sw["stages"]["baselines"]["ar"]


def test_baseline_configs_carry_their_knobs_and_refuse_an_unknown_method():
    import pytest

    assert S.baseline_config("zipar", {"window": 4})[0].zipar_window == 4
    cfg, kind = S.baseline_config("gsd", {"window": 32, "rank": 3})
    assert (cfg.method, cfg.sjd_window, cfg.verifier.rule, cfg.verifier.gsd_rank_window, kind) == ("sjd", 32, "gsd", 3, None)
    cfg, kind = S.baseline_config("lantern", {"delta": 0.02, "draft_len": 8})
    assert (cfg.verifier.rule, cfg.verifier.lantern_delta, cfg.draft_len, kind) == ("lantern", 0.02, 8, "same")
    assert S.baseline_config("sd", {"draft_len": 2})[0].draft_len == 2
    with pytest.raises(ValueError, match="unknown method 'medusa'"):
        S.baseline_config("medusa", {})


def test_only_one_of_the_special_modes_runs(tmp_path):
    import pytest

    with pytest.raises(SystemExit):
        S.main(["--baselines-only", "--grid-only", "--quick", "--models", "tiny", "--out", str(tmp_path)])


def test_grid_narrows_the_sweep_and_an_empty_value_skips_its_stage(tmp_path):
    """--grid replaces swept values; an empty list skips that stage (LANTERN's too), the final stage still runs
    the survivors beside the paper's anchor."""
    args = ["--quick", "--models", "tiny", "--out", str(tmp_path), "--no-progress", "--tag", "g", "--grid",
            "taus=0.2", "ks=4", "radii=1", "grouped=no", "commits=", "windows=", "rows=", "rechecks=", "deltas="]
    assert S.main(args) == 0
    stages = json.loads((tmp_path / "g.json").read_text())["sweep"]["stages"]
    assert list(stages) == ["tau_k_l", "final"]
    assert [r["params"]["tau"] for r in stages["tau_k_l"]["rows"]] == [0.2]
    assert [r["params"]["k"] for r in stages["tau_k_l"]["rows"]] == [4]


def test_grid_refuses_an_unknown_name_or_value(tmp_path):
    import pytest

    assert S.parse_grid(["taus=0.1,0.3", "windows="]) == {"taus": (0.1, 0.3), "windows": ()}
    for bad, says in ((["tau=0.1"], "name one of"), (["ks=a"], "cannot read"), (["commits=best"], "expected some of"),
                      (["grouped=maybe"], "yes or no")):
        with pytest.raises(ValueError, match=says):
            S.parse_grid(bad)
    with pytest.raises(SystemExit):
        S.main(["--baselines-only", "--grid", "taus=0.1", "--models", "tiny", "--out", str(tmp_path)])


def test_a_stage_keeps_its_records_beside_the_journal_until_it_ends(tmp_path):
    """A running stage saves its records (bench.methods' resume file) beside the journal, so a cut final stage
    continues inside the stage; the file goes once the stage is journaled."""
    journal = str(tmp_path / "t.journal.json")
    seen = []

    def run(name, settings, n, real_n, final=False, resume=None):
        seen.append(resume)
        open(resume, "w").write("records")          # what run_methods would have saved mid-stage
        return {"ar": {}, "rows": [{"label": label} for label in settings]}

    staged = S.journaled(journal, run)
    staged("final", {"a": None}, 4, None, final=True)
    assert seen == [str(tmp_path / "t.final.resume.pt")] == [S.stage_records(journal, "final")]
    assert not os.path.exists(seen[0])
    assert json.loads(open(journal).read())["final"]["samples"] == 4
    S.journaled(journal, run)("final", {"a": None}, 4, None, final=True)   # read back: nothing runs
    assert len(seen) == 1


def test_baselines_names_the_methods_swept_and_refuses_others(tmp_path, capsys):
    """--baselines zipar: the screen holds ZipAR's settings alone; an unknown method or --baselines without
    --baselines-only is refused before any model runs."""
    import pytest

    argv = ["--baselines-only", "--baselines", "zipar", "--quick", "--models", "tiny", "--out", str(tmp_path),
            "--no-progress", "--tag", "z"]
    assert S.main(argv) == 0
    sw = json.loads((tmp_path / "z.json").read_text())["sweep"]
    assert {r["params"]["method"] for r in sw["stages"]["baselines"]["rows"]} == {"zipar"}
    assert set(sw["baselines"]) == {"zipar"}
    for bad in (["--baselines-only", "--baselines", "medusa"], ["--baselines", "zipar"]):
        with pytest.raises(SystemExit) as e:
            S.main(bad + ["--models", "tiny", "--out", str(tmp_path)])
        assert e.value.code == 2
    err = capsys.readouterr().err
    assert "medusa" in err and "--baselines names the methods of --baselines-only" in err
    with pytest.raises(ValueError, match="unknown method"):
        S.baselines(None, 2, methods=["medusa"])
