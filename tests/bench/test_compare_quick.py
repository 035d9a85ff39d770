"""`bench.compare --models tiny --quick` in-process: runs, passes its checks, writes the schema;
`bench.report` puts its table into a README between the markers and touches nothing else."""
import json

import pytest
import torch

from bench import compare as C
from bench import measures as Q
from bench.methods import QUICK_METHODS, TIME_PARTS, UPSAMPLERS, control_rows
from bench import report as R

TOP = {"command", "date", "hardware", "samples", "settings", "methods", "checks", "invocation"}
PER_METHOD = {"target_calls", "drafter_calls", "tokens_per_target_call", "acceptance_rate", "resampled_fraction",
              "wall_seconds_median", "wall_seconds_iqr", "wall_ratio_vs_ar", "wall_ratio_ci", "share_of_oracle",
              "time_split", "peak_memory", "accuracy", "accuracy_ci", "fd", "fd_ci", "nll", "nll_ci"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    threads = torch.get_num_threads()
    try:  # one thread: tiny models gain nothing from more, and a shared machine loses a lot
        rc = C.main(["--models", "tiny", "--quick", "--samples", "2", "--out", str(out), "--no-progress",
                     "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    return rc, out, json.loads((out / "cpu-tiny-quick.json").read_text())


def test_quick_tiny_runs_and_passes_checks(quick_run):
    rc, out, res = quick_run
    assert rc == 0, res["checks"]
    assert res["checks"] == {"passed": True, "failures": []}
    for suffix in (".md", "-pareto-accuracy.png", "-pareto-fd.png", "-time-split.png", "-grid.png"):
        assert (out / f"cpu-tiny-quick{suffix}").is_file(), suffix


def test_quick_json_schema(quick_run):
    _, _, res = quick_run
    assert TOP <= set(res)
    assert {"processor", "cpu_count", "torch", "device_name"} <= set(res["hardware"])
    assert res["samples"] == 2 and res["settings"]["quality_meaningful"] is False
    controls = control_rows(tuple(u for u in UPSAMPLERS if u != "learned"))   # tiny models have no learned upsampler
    assert set(QUICK_METHODS) | set(controls) == set(res["methods"])
    assert {"ar", "mulo_islands", "zipar", "sjd", "sd"} <= set(res["methods"])
    for name, m in res["methods"].items():
        assert PER_METHOD <= set(m), (name, PER_METHOD - set(m))
        assert set(m["time_split"]) == set(TIME_PARTS)
        assert m["peak_memory"]["kind"] == "cpu_max_rss_growth"
        assert m["wall_seconds_median"] > 0 and m["wall_ratio_vs_ar"] > 0
        assert len(m["runs"]["wall_seconds"]) == 2
        assert m["ratio_reference"]["invocation"] == res["invocation"]
        assert 0.0 <= m["accuracy"] <= 1.0 and m["nll"] > 0
        assert set(m["measures"]["swd"]) == set(Q.SWD_LEVELS) and set(m["measures"]["diversity_ratio"]) == set(Q.DIVERSITY)
        assert m["measures"]["c2st_ar"] is None            # 2 images per side: too few pairs for a C2ST
        assert name == "ar" or m["tier"]["tier"] == Q.OUTSIDE
    assert all(res["methods"][c]["control"] for c in controls)
    assert res["quality"]["rule"] == Q.TIER_RULE
    assert res["methods"]["ar"]["wall_ratio_vs_ar"] == 1.0
    assert res["methods"]["mulo_oracle"]["share_of_oracle"] == 1.0
    assert res["methods"]["ar"]["acceptance_rate"] is None        # AR drafts nothing
    assert res["methods"]["mulo_oracle"]["acceptance_rate"] == 1.0


def test_report_fills_markers_and_keeps_the_rest(quick_run, tmp_path):
    _, out, _ = quick_run
    doc = tmp_path / "docs" / "RESULTS.md"            # absent: the report creates it
    readme = tmp_path / "README.md"
    intro, rest = "# Title\n\nIntro text.\n\n", "\n\n## Install\n\nsteps\n"
    readme.write_text(intro + R.HEAD_START + "\n" + R.HEAD_END + rest)
    args = ["--results", str(out / "cpu-tiny-quick.json"), "--doc", str(doc), "--readme", str(readme), "--sweep", ""]
    assert R.main(args) == 0
    text = doc.read_text()
    assert text.count(R.START) == 1 and text.count(R.END) == 1 and "## Results" in text
    body = text[text.index(R.START):text.index(R.END)]
    assert "GPU figures are pending" in body and "different scale" in body and "| mulo_islands |" in body
    assert "meaningless" in body and "1.40x LlamaGen-XL 512" in body
    assert "Quality measures" in body and Q.TIER_RULE in body          # the run has bench.measures' columns
    # the README's headline block is filled, the rest of the README untouched
    head = readme.read_text()
    assert head.startswith(intro + R.HEAD_START + "\n") and head.endswith(R.HEAD_END + rest)
    block = head[head.index(R.HEAD_START):head.index(R.HEAD_END)]
    assert "`mulo_islands`" in block and "x AR's speed" in block and f"quality tier: {Q.OUTSIDE}" in block
    assert "[docs/RESULTS.md](docs/RESULTS.md)" in block
    # hand-written text around the doc's block is kept; regenerating replaces the block in place; --check agrees
    doc.write_text("# Results\n\nhand text\n\n" + text + "\n## After\n\nkept\n")
    assert R.main(args) == 0 and R.main(args + ["--check"]) == 0
    again = doc.read_text()
    assert again.count(R.START) == 1 and again.endswith("## After\n\nkept\n") and again.startswith("# Results\n\nhand text")
    # a stale headline fails --check and is not written by it
    readme.write_text(intro + R.HEAD_START + "\nold\n" + R.HEAD_END + rest)
    assert R.main(args + ["--check"]) == 1 and "old" in readme.read_text()
    # a README without the headline markers is refused (nothing written); --readme "" leaves READMEs alone
    readme.write_text("# Title\n")
    doc.unlink()
    assert R.main(args) == 2 and readme.read_text() == "# Title\n" and not doc.exists()
    assert R.main(args[:-4] + ["--readme", "", "--sweep", ""]) == 0 and doc.is_file()


def test_quick_embedded_drafter_alone_fails_the_tiers(tmp_path):
    """On the trained scenes pair, 48 images per side: the quality check of `bench.compare` passes only if the
    unverified drafter's image falls outside the tiers and every C2ST detector tells it from AR's (a detector
    gone blind fails this test)."""
    threads = torch.get_num_threads()
    try:
        rc = C.main(["--quick", "--methods", "ar", "--samples", "48", "--out", str(tmp_path), "--no-progress",
                     "--threads", "1", "--no-plots"])
    finally:
        torch.set_num_threads(threads)
    res = json.loads((tmp_path / "cpu-embedded-quick.json").read_text())
    assert rc == 0 and res["checks"]["passed"], res["checks"]
    blind = res["quality"]["blind"]
    assert not [b for b in blind if b.startswith("C2ST vs AR") or b.startswith("SWD")], blind
    row = res["methods"]["drafter_alone_pixel"]
    assert row["tier"]["tier"] == Q.OUTSIDE
    assert all(row["measures"]["c2st_ar"][d]["accuracy"] > Q.C2ST_MAX for d in Q.DETECTORS)
    assert {"ar_null", "vq_roundtrip", "drafter_alone_learned"} <= set(res["methods"])
