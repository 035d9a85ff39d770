"""The shipped workflows on a real ComfyUI server: node listing, runs, validation errors, cancel.

Workflows that need only the shipped models (embedded/*) are run; missing embedded
weights make these tests fail, never skip. The LlamaGen graphs need user downloads and
are checked for format only (here and in test_browser.py).
"""
from __future__ import annotations

import copy
import io
import json
import time

import pytest
from PIL import Image
from workflow_format import api_workflows, needs_only_shipped_models, strip_meta, ui_to_api, ui_workflows

NODES = {
    "MuLoSDLoadTarget": ["model_name", "vq_name", "image_size", "device", "dtype", "weights"],
    "MuLoSDLoadDrafter": ["model_name", "vq_name", "image_size", "device", "dtype", "weights"],
    "MuLoSDSelfDrafter": ["target", "ratio", "layers"],
    "MuLoSDLoadTextEncoder": ["encoder_name", "device", "dtype", "offload"],
    "MuLoSDTextPrompt": ["text_encoder", "prompt"],
    "MuLoSDLoadJanus": ["model_name", "device", "dtype", "weights"],
    "MuLoSDJanusPrompt": ["prompt"],
    "MuLoSDUpsampler": ["kind", "ratio", "filter", "draw"],
    "MuLoSDLocalVerifier": ["rule", "tau", "k_neighbours", "expansion_radius", "rejection", "resampling", "lantern_delta",
                            "recheck", "recheck_scope"],
    "MuLoSDSampler": ["drafter", "target", "class_id", "seed", "cfg", "temperature", "top_k", "top_p", "parallel_window",
                      "rows_per_step", "draft_length", "batch_size", "quality", "upsampler", "verifier", "conditioning"],
    "MuLoSDARSampler": ["target", "class_id", "seed", "cfg", "temperature", "top_k", "top_p", "batch_size", "mode",
                        "zipar_window", "sjd_window", "conditioning"],
}
SAMPLERS = ("MuLoSDSampler", "MuLoSDARSampler")
API = api_workflows()
RUNNABLE = sorted(name for name, p in API.items() if needs_only_shipped_models(p))


@pytest.fixture(scope="module")
def object_info(comfy_server):
    return comfy_server.object_info()


def embedded_image_size(prompt: dict | None = None) -> int:
    """The image size of the workflow's target: the embedded scenes target's, or the 128 px member's."""
    from mulosd_core.models.registry import embedded_path, stored_image_size

    targets = [n["inputs"]["model_name"] for n in (prompt or {}).values() if n["class_type"] == "MuLoSDLoadTarget"]
    family = "scenes128" if any("scenes128/" in t for t in targets) else "scenes"
    return stored_image_size(embedded_path("target", family))  # FileNotFoundError (a failure) without the weights


def consumers(prompt: dict, node_id: str, slot: int) -> list[tuple[str, dict]]:
    return [(k, n) for k, n in prompt.items() if [node_id, slot] in n["inputs"].values()]


# ------------------------------------------------------------------------- listing, format
def test_object_info_lists_every_node(object_info):
    for node_id, inputs in NODES.items():
        assert node_id in object_info, f"{node_id} missing from /object_info"
        info = object_info[node_id]
        order = info["input_order"]
        assert order.get("required", []) + order.get("optional", []) == inputs
        assert info["category"].startswith("MuLo-SD/") and info["description"]
        assert info["python_module"].startswith("custom_nodes.")
    assert object_info["MuLoSDSampler"]["output"] == ["IMAGE", "IMAGE", "STRING"]
    assert object_info["MuLoSDSampler"]["input"]["optional"]["verifier"][0] == "MULOSD_VERIFIER"
    assert object_info["MuLoSDLoadTarget"]["output"] == ["MULOSD_MODEL"]


def test_workflow_templates_are_served(comfy_server):
    templates = comfy_server.get("/workflow_templates").json()
    assert sorted(templates.get("mulosd", [])) == sorted(ui_workflows())
    for name in ui_workflows():
        assert comfy_server.get(f"/api/workflow_templates/mulosd/{name}.json").status_code == 200
        preview = comfy_server.get(f"/api/workflow_templates/mulosd/{name}.jpg")  # the frontend's thumbnail URL
        assert preview.status_code == 200 and preview.headers["Content-Type"] == "image/jpeg", name


def test_every_ui_workflow_has_an_api_twin_and_a_preview():
    from workflow_format import WORKFLOWS

    assert sorted(ui_workflows()) == sorted(API) and len(API) >= 4
    for name in API:
        # The template browser asks for <name>.jpg and nothing else (frontend 1.32.9 and 1.58).
        assert (WORKFLOWS / f"{name}.jpg").is_file(), f"no preview image for {name}"


@pytest.mark.parametrize("name", sorted(API))
def test_ui_workflow_converts_to_its_api_twin(object_info, name):
    assert ui_to_api(ui_workflows()[name], object_info) == strip_meta(API[name])


def test_embedded_workflows_are_runnable_here():
    assert {"mulosd_embedded_vs_ar", "mulosd_ablation", "mulosd_self_drafting"} <= set(RUNNABLE)


# ------------------------------------------------------------------------------ runs
@pytest.mark.parametrize("name", RUNNABLE)
def test_shipped_workflow_runs(comfy_server, name):
    prompt = API[name]
    size = embedded_image_size(prompt)
    # Run it for real: the browser test may have run the same graph, whose outputs ComfyUI would reuse.
    comfy_server.post("/free", json={"free_memory": True}).raise_for_status()
    time.sleep(1.5)  # the prompt worker drops its output cache when it wakes up to the flag
    entry = comfy_server.run(prompt, timeout=240)
    assert entry["status"]["status_str"] == "success", json.dumps(entry["status"], indent=1)[:3000]
    outputs = entry["outputs"]
    for node_id, node in prompt.items():
        if node["class_type"] in ("MuLoSDLoadTarget", "MuLoSDLoadDrafter"):
            assert "grid" in outputs[node_id]["text"][0]
        if node["class_type"] not in SAMPLERS:
            continue
        batch = node["inputs"]["batch_size"]
        for slot in (0, 1):
            for out_id, _ in consumers(prompt, node_id, slot):
                images = outputs[out_id]["images"]
                assert len(images) == batch, (name, out_id)
                for image in images:
                    assert Image.open(io.BytesIO(comfy_server.view(image))).size == (size, size)
        (stats_id, _), = consumers(prompt, node_id, 2)
        stats = json.loads(outputs[stats_id]["text"][0])
        assert stats["tokens"] == stats["grid"] ** 2 and stats["image_size"] == size
        assert stats["target_calls"] > 0 and stats["batch"] == batch
        assert stats["accepted"] + stats["resampled"] == stats["tokens"] * batch
        assert stats["class_id"] == node["inputs"]["class_id"] and stats["seed"] == node["inputs"]["seed"]
        if node["class_type"] == "MuLoSDSampler":
            assert stats["drafter_calls"] > 0 and 0 <= stats["acceptance_rate"] <= 1
        else:
            assert stats["target_calls"] == stats["tokens"]


def sampler_prompt(**changes) -> dict:
    """The embedded comparison graph with the MuLo-SD branch only, the sampler's inputs changed."""
    prompt = copy.deepcopy(API["mulosd_embedded_vs_ar"])
    ar = [k for k, n in prompt.items() if n["class_type"] == "MuLoSDARSampler"]
    for k in ar:
        for out_id, _ in consumers(prompt, k, 0) + consumers(prompt, k, 2):
            del prompt[out_id]
        del prompt[k]
    (sampler,) = [n for n in prompt.values() if n["class_type"] == "MuLoSDSampler"]
    sampler["inputs"].update(changes)
    return prompt


def node_of(prompt: dict, class_type: str) -> str:
    return next(k for k, n in prompt.items() if n["class_type"] == class_type)


# --------------------------------------------------------------------------- rejections
def test_out_of_range_tau_is_rejected_naming_node_and_input(comfy_server):
    prompt = sampler_prompt()
    ver = node_of(prompt, "MuLoSDLocalVerifier")
    prompt[ver]["inputs"]["tau"] = 1.5
    status, body = comfy_server.queue(prompt)
    assert status == 400 and body["error"]["type"] == "prompt_outputs_failed_validation"
    errors = body["node_errors"][ver]
    assert errors["class_type"] == "MuLoSDLocalVerifier"
    assert [(e["type"], e["extra_info"]["input_name"]) for e in errors["errors"]] == [("value_bigger_than_max", "tau")]


def test_missing_model_file_is_rejected_naming_node_and_input(comfy_server):
    prompt = sampler_prompt()
    target = node_of(prompt, "MuLoSDLoadTarget")
    prompt[target]["inputs"]["model_name"] = "c2i_XL_384.pt"
    status, body = comfy_server.queue(prompt)
    assert status == 400
    errors = body["node_errors"][target]
    assert errors["class_type"] == "MuLoSDLoadTarget"
    named = [e for e in errors["errors"] if e["extra_info"]["input_name"] == "model_name"]
    # ComfyUI 0.3.75 does not check V3 combos itself: the loader's validate_inputs does
    assert named and named[0]["type"] in ("custom_validation_failed", "value_not_in_list")
    assert "c2i_XL_384.pt" in named[0]["details"]


def test_class_id_out_of_range_fails_before_sampling(comfy_server):
    embedded_image_size()
    entry = comfy_server.run(sampler_prompt(class_id=99), timeout=120)
    assert entry["status"]["status_str"] == "error"
    (_, data), = [m for m in entry["status"]["messages"] if m[0] == "execution_error"]
    assert data["node_type"] == "MuLoSDSampler"
    assert "class_id: expected 0.." in data["exception_message"] and "got 99" in data["exception_message"]


# ------------------------------------------------------------------------------ cancel
def test_interrupt_stops_a_run_and_the_next_run_succeeds(comfy_server):
    embedded_image_size()
    prompt = copy.deepcopy(API["mulosd_embedded_vs_ar"])
    ar = node_of(prompt, "MuLoSDARSampler")
    prompt = {k: n for k, n in prompt.items() if k == ar or n["class_type"] in ("MuLoSDLoadTarget",)
              or ar in [v[0] for v in n["inputs"].values() if isinstance(v, list)]}
    prompt[ar]["inputs"].update(batch_size=32, seed=int(time.time()))  # long, and never a cached result
    with comfy_server.websocket() as ws:
        status, body = comfy_server.queue(prompt, client_id=ws.client_id)
        assert status == 200, body
        pid = body["prompt_id"]
        if not ws.wait_progress(pid, ar, timeout=120):
            pytest.fail("the AR sampler never reported progress")
        t0 = time.monotonic()
        comfy_server.interrupt(pid)
        rest = ws.collect(pid, timeout=60)
        stopped = time.monotonic() - t0
    assert rest[-1]["type"] == "execution_interrupted", [m["type"] for m in rest]
    progress = [m["data"] for m in rest if m["type"] == "progress" and m["data"].get("node") == ar]
    assert all(p["value"] < p["max"] for p in progress), "the sampler ran to the end"
    assert stopped < 15, f"took {stopped:.1f} s to stop"
    entry = comfy_server.wait(pid, timeout=30)
    assert entry["status"]["status_str"] == "error"
    # the server is fine afterwards
    prompt[ar]["inputs"].update(batch_size=1, seed=prompt[ar]["inputs"]["seed"] + 1)
    assert comfy_server.run(prompt, timeout=120)["status"]["status_str"] == "success"
