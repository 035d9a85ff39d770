"""bench.ceiling: the exact test's acceptance ceiling of the shipped learned upsampler, and its errors."""
from __future__ import annotations

import json

import pytest

from bench import ceiling as C


def test_the_shipped_upsampler_has_a_ceiling_between_zero_and_one(tmp_path):
    out = tmp_path / "c.json"
    assert C.main(["--samples", "2", "--threads", "1", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["r"] == 2 and res["samples"] == 2
    shipped = [p for p in res["upsamplers"] if p.endswith("models/embedded/upsampler.safetensors")]
    assert shipped, res["upsamplers"]
    for figs in res["upsamplers"].values():
        tv = figs["one_minus_tv"]
        assert 0 < tv["mean"] < 1 and tv["ci"][0] <= tv["mean"] <= tv["ci"][1]
        assert 0 < figs["p_of_argmax"]["mean"] < 1


def test_a_missing_upsampler_file_and_no_samples_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        C.main(["--samples", "2", "--upsampler", str(tmp_path / "none.safetensors")])
    assert "--upsampler: no file at" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        C.main(["--samples", "0"])
    assert "--samples must be at least 1, got 0" in capsys.readouterr().err
