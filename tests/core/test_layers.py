"""The library's layering, read from the source by scripts/imports.py: the model layer never imports the
sampling layer, and the data, memory and weight-streaming modules form no import cycle (issue 34)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "imports.py"


@pytest.fixture(scope="module")
def report() -> dict:
    spec = importlib.util.spec_from_file_location("imports_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.report()


def test_the_model_layer_does_not_import_the_sampling_layer(report):
    assert report["models_import_sampling"] == []


@pytest.mark.parametrize("module", ["mulosd_core.data.families", "mulosd_core.data.procedural", "mulosd_core.memory",
                                    "mulosd_core.offload", "mulosd_core.models.protocol", "mulosd_core.config"])
def test_no_import_cycle_through(report, module):
    assert not [c for c in report["cycles"] if module in c]


def test_sampling_config_has_one_home():
    from mulosd_core import config, sampling
    from mulosd_core.models import protocol

    assert sampling.SamplingConfig is config.SamplingConfig
    assert protocol.SamplingConfig is config.SamplingConfig


def test_the_block_streamer_offers_what_the_protocol_declares():
    import torch

    from mulosd_core.models.protocol import WeightStreamer
    from mulosd_core.offload import BlockStreamer

    streamer = BlockStreamer([torch.nn.Linear(2, 2)], torch.device("cpu"))
    declared = {n for n in (*WeightStreamer.__annotations__, *vars(WeightStreamer)) if not n.startswith("_")}
    assert declared == {"blocks", "compute", "block_bytes", "drop_all", "remove"}
    assert [n for n in sorted(declared) if not hasattr(streamer, n)] == []
