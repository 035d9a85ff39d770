"""Inputs a hostile API user sends (issue 20): non-integers for INT inputs, NaN for FLOAT inputs, combo
values outside the options, files that fail while loading. Each error names the input (or the file) and
what it accepts. The server-side path (HTTP 400 at POST /prompt) is in tests/integration/test_reliability.py."""
import json

import pytest


def test_non_integers_for_int_inputs_are_named_with_their_range(pack):
    from mulosd_pack.nodes.inputs import number_inputs, number_problems
    from mulosd_pack.nodes.samplers import MuLoSDARSampler, MuLoSDSampler

    ar = number_inputs(MuLoSDARSampler)
    assert number_problems(ar, {"class_id": 2.5}) == {"class_id": "class_id: expected a whole number from 0 to 100000, got 2.5"}
    assert number_problems(ar, {"class_id": 3.0, "batch_size": 2, "seed": 5}) == {}   # whole numbers pass
    assert set(number_problems(ar, {"cfg": float("nan"), "top_p": float("inf"), "batch_size": 1.5})) == {"cfg", "top_p", "batch_size"}
    assert "cfg: expected a finite number from 0.0 to 30.0, got nan" in number_problems(ar, {"cfg": float("nan")}).values()
    assert number_problems(number_inputs(MuLoSDSampler), {"rows_per_step": 0.5}) == {
        "rows_per_step": "rows_per_step: expected a whole number from -1 to 64, got 0.5"}


def test_the_prompt_handler_makes_comfyuis_conversion_refuse_the_value(pack):
    from mulosd_pack.nodes.inputs import Refused, number_inputs, refuse_bad_numbers
    from mulosd_pack.nodes.samplers import MuLoSDARSampler

    prompt = {"3": {"class_type": "MuLoSDARSampler", "inputs": {"class_id": 2.5, "seed": 1, "target": ["1", 0]}},
              "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}}}
    out = refuse_bad_numbers({"prompt": prompt}, {"MuLoSDARSampler": number_inputs(MuLoSDARSampler)})
    value = out["prompt"]["3"]["inputs"]["class_id"]
    assert isinstance(value, Refused) and value == 2.5 and f"{value}" == "2.5"
    with pytest.raises(ValueError, match=r"^class_id: expected a whole number from 0 to 100000, got 2.5$"):
        int(value)   # what ComfyUI's validation does with an INT input
    assert json.loads(json.dumps({"received_value": value})) == {"received_value": 2.5}   # its error echoes the value
    assert out["prompt"]["3"]["inputs"]["seed"] == 1 and out["prompt"]["4"]["inputs"] == {"images": ["3", 0]}


def test_combo_values_outside_the_options_name_the_input_and_its_choices(tiny_models):
    from mulosd_pack.nodes.components import MuLoSDLocalVerifier, MuLoSDUpsampler
    from mulosd_pack.nodes.loaders import load
    from mulosd_pack.nodes.samplers import MuLoSDARSampler

    target = load("embedded/target.safetensors", "auto", 0, "cpu", "float32")
    kw = dict(class_id=3, seed=0, cfg=1.0, temperature=1.0, top_k=0, top_p=1.0, batch_size=1, zipar_window=8, sjd_window=16)
    with pytest.raises(ValueError, match=r"^mode: expected one of \['ar', 'zipar', 'sjd', 'gsd'\], got 'bogus'$"):
        MuLoSDARSampler.execute(target, mode="bogus", **kw)
    with pytest.raises(ValueError, match=r"^kind: expected one of \['pixel', .*\], got 'magic'$"):
        MuLoSDUpsampler.execute(kind="magic", ratio=0, filter="bicubic")
    with pytest.raises(ValueError, match=r"^rule: expected one of \['mulo', 'lantern', 'exact', 'greedy'.*\], got 'any'$"):
        MuLoSDLocalVerifier.execute(rule="any", tau=0.1, k_neighbours=1, expansion_radius=1, rejection="local",
                                    resampling="islands", lantern_delta=0.1)


def test_a_failure_inside_model_construction_names_the_file(tiny_models, monkeypatch):
    from mulosd_core.models.checkpoints import CheckpointError
    from mulosd_pack.nodes import loaders

    def broken(*a, **kw):
        raise ZeroDivisionError("a config with zero heads")

    monkeypatch.setattr(loaders, "load_model", broken)   # the name the loader calls (imported from mulosd_core.api)
    with pytest.raises(CheckpointError, match=r"c2i_tiny_32\.pt: could not be loaded as a LlamaGen GPT "
                                              r"\(ZeroDivisionError: a config with zero heads\)"):
        loaders.load("c2i_tiny_32.pt", "embedded/vq.safetensors", 32, "cpu", "float32")
    with pytest.raises(ValueError, match=r"^image_size: expected a multiple of 4 .*got 30$"):
        loaders.load("c2i_tiny_32.pt", "embedded/vq.safetensors", 30, "cpu", "float32")
