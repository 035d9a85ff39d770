"""A reduced run of bench/ar_speed.py: it runs, reports sane numbers and gates on the overhead share."""
from __future__ import annotations

import json

from bench import ar_speed


def test_quick_bench_reports_speed_and_overhead(capsys):
    # --max-overhead 0 always trips the gate: checks the exit code path while measuring once
    assert ar_speed.main(["--quick", "--runs", "1", "--json", "--max-overhead", "0"]) == 1
    captured = capsys.readouterr()
    r = json.loads(captured.out)
    assert "FAIL: overhead" in captured.err
    assert r["tokens_per_second"] > 0
    assert 0.0 < r["forward_share"] < 1.0
    assert abs(r["forward_share"] + r["overhead_share"] - 1.0) < 1e-9
    assert r["threads"] == 1 and r["config"]["grid"] == 8 and r["cfg_scale"] > 1
    # a loose bound: the full-size 15% gate is `python -m bench.ar_speed`; the quick config has a much
    # smaller forward and shared CI machines make timings noisy
    assert r["overhead_share"] < 0.5
