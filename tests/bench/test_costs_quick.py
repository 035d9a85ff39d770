"""`bench.costs --models tiny`: every call kind is timed, ratios are against one target token, the file
is written where the tag says."""
from __future__ import annotations

import json

import torch

from bench import models as M
from bench import costs
from mulosd_core.models.registry import DEFAULT_EMBEDDED_FAMILY


def test_costs_on_tiny_models(tmp_path, capsys):
    threads = torch.get_num_threads()
    try:
        assert costs.main(["--models", "tiny", "--reps", "2", "--out", str(tmp_path)]) == 0
    finally:
        torch.set_num_threads(threads)
    res = json.loads((tmp_path / "costs-tiny.json").read_text())
    kinds = {"target_token", "drafter_token", "upsample_pixel", "vq_decode"}
    assert kinds <= set(res["seconds"]) and any(k.startswith("target_verify_") for k in res["seconds"])
    assert any(k.startswith("target_call_") for k in res["seconds"])
    assert all(v > 0 for v in res["seconds"].values())
    assert res["ratio_to_target_token"]["target_token"] == 1.0
    for k, v in res["seconds"].items():
        assert abs(res["ratio_to_target_token"][k] - v / res["seconds"]["target_token"]) < 1e-12
    assert res["drafter"]["r"] == res["target"]["grid"] // res["drafter"]["grid"] == 2
    assert "upsample_pixel" in capsys.readouterr().out


def test_tags_name_the_family():
    assert M.default_tag("cpu", "embedded", DEFAULT_EMBEDDED_FAMILY, False) == "cpu-embedded"
    assert M.default_tag("cpu", "embedded", "patterns", True) == "cpu-embedded-patterns-quick"
    assert M.models_tag("tiny", "patterns", False) == "tiny"     # tiny models have no family to name
