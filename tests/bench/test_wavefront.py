"""bench.wavefront: with no drafts the simulation is ZipAR's own schedule; drafts that always pass shorten it,
drafts that never pass change nothing; calls are priced by the measured sizes."""
from __future__ import annotations

import json
import random

import pytest

from bench import wavefront as WF
from mulosd_core.schedules import zipar_nfe


@pytest.mark.parametrize("grid", [4, 8, 16])
def test_no_drafts_is_zipars_schedule(grid):
    for window in range(1, grid):
        n, fed = WF.calls(grid, window, 0, 0.5, random.Random(0))
        assert n == zipar_nfe(grid, window) and sum(fed) == grid * grid


def test_drafts_save_calls_only_as_far_as_they_pass():
    never = WF.simulate(16, 4, 3, 0.0, 20)[0]
    assert never["calls"] == zipar_nfe(16, 4) and never["tokens_per_call"] > 256 / zipar_nfe(16, 4)   # drafts are fed, none kept
    always = WF.simulate(16, 4, 3, 1.0, 5)[0]
    assert always["calls"] < zipar_nfe(16, 4) / 2
    some = WF.simulate(16, 4, 3, 0.34, 200)[0]
    assert always["calls"] < some["calls"] < never["calls"]


def test_main_prices_calls_and_refuses_bad_input(tmp_path, capsys):
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"ratio_to_target_token": {"target_token": 1.0, "target_call_4": 1.1,
                                                           "target_call_8": 1.3, "target_verify_32": 2.0}}))
    assert WF.main(["--drafts", "0", "1", "--runs", "20", "--costs", str(costs), "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "wavefront-w4.json").read_text())
    assert [r["drafts"] for r in res["rows"]] == [0, 1]
    assert all(r["cost_in_token_calls"] >= r["calls"] for r in res["rows"])
    assert "x ZipAR's cost in token calls" in capsys.readouterr().out
    for bad in (["--acceptance", "1.5"], ["--window", "16"], ["--drafts", "-1"]):
        with pytest.raises(SystemExit):
            WF.main(bad)
