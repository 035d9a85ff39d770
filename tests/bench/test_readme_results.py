"""docs/RESULTS.md's results section and README.md's headline are what `bench.report` generates from the
committed benchmark JSON, so the tables, the headline and the raw numbers cannot drift apart."""
import copy
import json
from pathlib import Path

from bench import measures as Q
from bench import report as R

ROOT = Path(__file__).resolve().parents[2]


def test_results_doc_and_headline_are_those_of_the_committed_benchmark(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert R.default_results(str(ROOT / "bench" / "results")) is not None
    assert R.main(["--check"]) == 0
    doc = (ROOT / "docs" / "RESULTS.md").read_text()
    assert doc.count(R.START) == 1 and doc.count(R.END) == 1
    assert R.START not in (ROOT / "README.md").read_text()          # the tables live in the doc only


def test_headline_is_on_the_first_screen():
    lines = (ROOT / "README.md").read_text().splitlines()
    start, end = lines.index(R.HEAD_START), lines.index(R.HEAD_END)
    assert start < 40 and start < end
    block = "\n".join(lines[start:end])
    assert f"`{R.HEADLINE_METHOD}`" in block and "x AR's speed" in block and "quality tier:" in block


def committed() -> dict:
    return json.loads((ROOT / "bench" / "results" / "cpu-embedded.json").read_text())


def test_headline_without_tiers_says_not_measured():
    res = committed()
    for m in res["methods"].values():
        m.pop("tier", None)
    text = R.headline(res, "bench/results/cpu-embedded.json", "docs/RESULTS.md")
    assert "quality tier: not measured" in text and "No row of this run has a quality tier yet" in text
    assert "Fastest inside" not in text
    ratio = res["methods"][R.HEADLINE_METHOD]["wall_ratio_vs_ar"]
    assert f"{ratio:.2f}x AR's speed" in text                        # the number is the JSON's


def test_headline_with_tiers_names_each_tiers_fastest_method():
    res = copy.deepcopy(committed())
    verdict = lambda name, ind, good: {"tier": name, "indistinguishable": ind, "as_good": good, "powered": True, "why": []}
    for n, m in res["methods"].items():
        m["tier"] = None if n == "ar" else verdict(Q.OUTSIDE, False, False)
    res["methods"]["zipar"]["tier"] = verdict(Q.INDISTINGUISHABLE, True, True)
    res["methods"]["sjd"]["tier"] = verdict(Q.AS_GOOD, False, True)
    res["methods"]["mulo_oracle"]["tier"] = verdict(Q.INDISTINGUISHABLE, True, True)   # not a method: never named
    text = R.headline(res, "x.json", "docs/RESULTS.md")
    assert f"quality tier: {Q.OUTSIDE}" in text
    z = res["methods"]["zipar"]["wall_ratio_vs_ar"]
    assert f'tier "{Q.INDISTINGUISHABLE}": `zipar`, {z:.2f}x' in text
    # zipar is faster than sjd in the committed run, and indistinguishable counts as good as AR
    assert f'tier "{Q.AS_GOOD}": `zipar`' in text
    res["methods"]["zipar"]["tier"] = verdict(Q.OUTSIDE, False, False)
    text = R.headline(res, "x.json", "docs/RESULTS.md")
    assert f'tier "{Q.INDISTINGUISHABLE}": no method of this run.' in text and f'tier "{Q.AS_GOOD}": `sjd`' in text


def test_a_stale_headline_row_gives_way_to_the_tier_sweep():
    """The committed benchmark ran mulo_islands at the settings shipped before the tier sweep: the headline
    takes the shipped settings' speed and tier from the sweep, and says what the old row measured."""
    res = copy.deepcopy(committed())
    res["methods"][R.HEADLINE_METHOD]["config"]["rows_per_step"] = 99          # not today's preset
    assert R.HEADLINE_METHOD in R.stale_rows(res)
    v = {"label": "paper: tau=0.3", "speed_up": 0.72, "beats_ar": False, "settings": {}}
    sweep = {"command": "python -m bench.sweep x", "sweep": {"stages": {"final": {"samples": 400}},
                                                            "tiers": {Q.AS_GOOD: v, Q.INDISTINGUISHABLE: v}}}
    text = R.headline(res, "x.json", "docs/RESULTS.md", sweep)
    assert (f"chosen by the tier sweep): 0.72x AR's speed, quality tier: {Q.INDISTINGUISHABLE}; "
            "no MuLo-SD setting beats AR inside a tier") in text
    assert "fastest setting of both tiers" in text and "`python -m bench.sweep x`" in text
    assert "still has the settings shipped before the tier sweep (now the `mulo_fastest` preset)" in text
    faster = dict(v, label="tau=0.45", speed_up=1.5, beats_ar=True)             # a faster as-good setting
    sweep["sweep"]["tiers"][Q.AS_GOOD] = faster
    text = R.headline(res, "x.json", "docs/RESULTS.md", sweep)
    assert f"1.50x AR's speed, quality tier: {Q.AS_GOOD}.**" in text and "(`mulo_indistinguishable`): 0.72x" in text
    sweep["sweep"]["tiers"] = {Q.AS_GOOD: None, Q.INDISTINGUISHABLE: None}
    assert "no MuLo-SD setting of the sweep is in a tier" in R.headline(res, "x.json", "docs/RESULTS.md", sweep)
    assert "chosen by the tier sweep" not in R.headline(res, "x.json", "docs/RESULTS.md")   # no sweep: the row itself


def test_headline_names_each_tiers_fastest_swept_baseline():
    """The baselines-only sweep (every baseline over its own knobs) adds one line: the fastest setting of any
    baseline inside each tier, from that sweep's JSON, or that none is there."""
    res = committed()
    per = lambda ind, good: {Q.INDISTINGUISHABLE: ind, Q.AS_GOOD: good}
    baselines = {"command": "python -m bench.sweep --baselines-only x",
                 "sweep": {"stages": {"final": {"samples": 400}}, "baselines": {
                     "zipar": per({"label": "zipar: window=4", "speed_up": 2.08}, {"label": "zipar: window=4", "speed_up": 2.08}),
                     "sjd": per(None, {"label": "sjd: window=8", "speed_up": 2.5}),
                     "lantern": per(None, None)}}}
    text = R.headline(res, "x.json", "docs/RESULTS.md", None, baselines)
    line = next(x for x in text.splitlines() if x.startswith("- Every baseline swept"))
    assert "`python -m bench.sweep --baselines-only x`, 400 images per final setting" in line
    assert f'inside "{Q.INDISTINGUISHABLE}" `zipar: window=4`, 2.08x' in line
    assert f'inside "{Q.AS_GOOD}" `sjd: window=8`, 2.50x' in line
    baselines["sweep"]["baselines"] = {"lantern": per(None, None)}
    assert f'inside "{Q.INDISTINGUISHABLE}" none of them' in R.headline(res, "x.json", "docs/RESULTS.md", None, baselines)
    assert "Every baseline swept" not in R.headline(res, "x.json", "docs/RESULTS.md")
