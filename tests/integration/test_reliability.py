"""Reliability inside a real ComfyUI server: bad files, bad parameters, cancel, repeated use.

Each test drives the server the way a user does (queue, interrupt, /free) and checks that
the error is clear, nothing from a checkpoint runs, the server stays usable, memory stays
flat over many prompts, and an output never depends on what ran before it.
"""
from __future__ import annotations

import io
import json
import pickle
import shutil
import time

import numpy as np
import psutil
import pytest
from PIL import Image

from mulosd_core.models.registry import embedded_path

SOAK_PROMPTS = 50


# ------------------------------------------------------------------------------ helpers
@pytest.fixture(scope="module")
def info(comfy_server):
    return comfy_server.object_info()


def node(info: dict, class_type: str, **inputs) -> dict:
    """An API node with every required widget input at its default, then `inputs`."""
    spec = info[class_type]["input"]
    values = {}
    for name, entry in spec.get("required", {}).items():
        kind, opts = entry[0], (entry[1] if len(entry) > 1 else {})
        if isinstance(kind, list):
            values[name] = opts.get("default", kind[0])
        elif kind == "COMBO":
            values[name] = opts.get("default", opts.get("options", [None])[0])
        elif "default" in opts:
            values[name] = opts["default"]
    values.update(inputs)
    return {"class_type": class_type, "inputs": values}


def mulo_graph(info: dict, target: str = "embedded/target.safetensors", drafter: str = "embedded/drafter.safetensors",
               **sampler) -> dict:
    return {
        "1": node(info, "MuLoSDLoadTarget", model_name=target),
        "2": node(info, "MuLoSDLoadDrafter", model_name=drafter),
        "3": node(info, "MuLoSDSampler", drafter=["2", 0], target=["1", 0], **sampler),
        "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}},
    }


def ar_graph(info: dict, target: str = "embedded/target.safetensors", **sampler) -> dict:
    return {
        "1": node(info, "MuLoSDLoadTarget", model_name=target),
        "3": node(info, "MuLoSDARSampler", target=["1", 0], **sampler),
        "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}},
    }


def images(server, entry: dict, node_id: str = "4") -> list[np.ndarray]:
    assert entry["status"]["status_str"] == "success", json.dumps(entry["status"], indent=1)[:3000]
    return [np.asarray(Image.open(io.BytesIO(server.view(im)))) for im in entry["outputs"][node_id]["images"]]


def error_of(entry: dict) -> dict:
    assert entry["status"]["status_str"] == "error", "the prompt was expected to fail"
    (_, data), = [m for m in entry["status"]["messages"] if m[0] == "execution_error"]
    return data


def forget_outputs(server) -> None:
    """Make the next prompt execute for real (ComfyUI would reuse cached node outputs)."""
    server.post("/free", json={"free_memory": True}).raise_for_status()
    time.sleep(1.5)  # the prompt worker drops its output cache when it wakes up to the flag


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------------------- bad files
class _Marker:
    """Unpickling this would create a file: the proof that no checkpoint code runs."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_bad_checkpoint_files_fail_clearly_and_the_server_stays_usable(comfy_server, info):
    folder = comfy_server.base_dir / "models" / "mulosd"
    folder.mkdir(parents=True, exist_ok=True)
    marker = comfy_server.base_dir / "code_ran.txt"
    target = embedded_path("target")
    data = open(target, "rb").read()
    png = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(png, format="PNG")
    bad = {
        "truncated.safetensors": data[: len(data) // 2],
        "empty.safetensors": b"",
        "picture.safetensors": png.getvalue(),
        "code.pt": pickle.dumps({"model": _Marker(str(marker))}),
    }
    for name, content in bad.items():
        (folder / name).write_bytes(content)
    shutil.copy(embedded_path("vq"), folder / "tokenizer_as_gpt.safetensors")
    comfy_server.get("/object_info/MuLoSDLoadTarget").raise_for_status()  # the list now shows them
    problems = {"truncated.safetensors": "", "empty.safetensors": "", "picture.safetensors": "",
                "code.pt": "", "tokenizer_as_gpt.safetensors": "VQ"}
    for name, word in problems.items():
        g = ar_graph(info, target=name, batch_size=1)
        g["1"]["inputs"].update(vq_name="embedded/vq.safetensors", image_size=64)  # so the file itself is read
        entry = comfy_server.run(g, timeout=120)
        err = error_of(entry)
        assert err["node_type"] == "MuLoSDLoadTarget", (name, err["node_type"])
        assert name in err["exception_message"], (name, err["exception_message"])
        assert word in err["exception_message"], (name, err["exception_message"])
        assert err["exception_type"] != "MemoryError"
    assert not marker.exists(), "unpickling a checkpoint ran its code"
    assert comfy_server.alive()
    ok = comfy_server.run(ar_graph(info, batch_size=1, seed=3), timeout=120)
    assert len(images(comfy_server, ok)) == 1


# ---------------------------------------------------------------------- bad parameters
def test_every_numeric_input_declares_its_range(info):
    for class_type, spec in info.items():
        if not class_type.startswith("MuLoSD"):
            continue
        for section in ("required", "optional"):
            for name, entry in spec["input"].get(section, {}).items():
                if entry[0] in ("INT", "FLOAT"):
                    opts = entry[1]
                    assert "min" in opts and "max" in opts, f"{class_type}.{name} has no declared range"
                    assert opts["min"] <= opts["default"] <= opts["max"], f"{class_type}.{name}"


@pytest.mark.parametrize("change, words", [
    ({"image_size": 66}, ["image_size", "multiple of", "66"]),
    ({"image_size": 0, "swap": True}, ["drafter", "grid"]),
])
def test_bad_parameters_fail_before_sampling_naming_the_input(comfy_server, info, change, words):
    g = mulo_graph(info, batch_size=1)
    if change.pop("swap", False):  # the low-resolution model as target, the high-resolution one as drafter
        g["1"]["inputs"]["model_name"], g["2"]["inputs"]["model_name"] = (g["2"]["inputs"]["model_name"],
                                                                          g["1"]["inputs"]["model_name"])
    else:
        g["1"]["inputs"].update(change)
    err = error_of(comfy_server.run(g, timeout=120))
    for w in words:
        assert w in err["exception_message"], (w, err["exception_message"])


# -------------------------------------------------------------------------------- cancel
@pytest.mark.parametrize("graph", ["mulo", "ar"])
def test_cancelled_run_leaves_the_next_identical_run_unchanged(comfy_server, info, graph):
    make = mulo_graph if graph == "mulo" else ar_graph
    prompt = make(info, batch_size=8, seed=4242 + (graph == "ar"))
    forget_outputs(comfy_server)
    reference = images(comfy_server, comfy_server.run(prompt, timeout=240))
    forget_outputs(comfy_server)
    with comfy_server.websocket() as ws:
        status, body = comfy_server.queue(prompt, client_id=ws.client_id)
        assert status == 200, body
        pid = body["prompt_id"]
        if not ws.wait_progress(pid, "3", timeout=120):
            pytest.fail("the sampler never reported progress")
        comfy_server.interrupt(pid)
        rest = ws.collect(pid, timeout=60)
    assert rest[-1]["type"] == "execution_interrupted", [m["type"] for m in rest]
    again = comfy_server.run(prompt, timeout=240)
    assert same(images(comfy_server, again), reference), "the run after a cancel differs from an undisturbed one"


# ---------------------------------------------------------------------- repeated use
def test_many_prompts_hold_memory_flat_reuse_models_and_reproduce(comfy_server, info):
    proc = psutil.Process(comfy_server.pid)
    loads_before = comfy_server.log_text().count("MuLo-SD: loaded")
    rss, outputs = [], {}
    for i in range(SOAK_PROMPTS):
        seed = 7000 + i
        outputs[seed] = images(comfy_server, comfy_server.run(mulo_graph(info, batch_size=1, seed=seed), timeout=120))
        rss.append(proc.memory_info().rss)
    growth = (max(rss[5:]) - rss[4]) / rss[4]
    print(f"\nsoak: {SOAK_PROMPTS} prompts, RSS after 5 = {rss[4] / 2**20:.0f} MB, max after = "
          f"{max(rss[5:]) / 2**20:.0f} MB, growth {growth:.2%}")
    assert growth < 0.05, f"server memory grew {growth:.1%} over {SOAK_PROMPTS} prompts: {[r >> 20 for r in rss]}"
    assert comfy_server.log_text().count("MuLo-SD: loaded") == loads_before, "models were loaded again"
    # every output equals a fresh run of the same seed
    forget_outputs(comfy_server)
    for seed in (7000, 7000 + SOAK_PROMPTS // 2, 7000 + SOAK_PROMPTS - 1):
        assert same(images(comfy_server, comfy_server.run(mulo_graph(info, batch_size=1, seed=seed), timeout=120)),
                    outputs[seed]), seed


def test_image_b_of_a_batch_equals_a_single_run_with_seed_plus_b(comfy_server, info):
    batch = images(comfy_server, comfy_server.run(ar_graph(info, batch_size=3, seed=910), timeout=120))
    single = images(comfy_server, comfy_server.run(ar_graph(info, batch_size=1, seed=912), timeout=120))
    # the same tokens; the batched VQ decode may round a pixel differently by one level
    diff = np.abs(batch[2].astype(int) - single[0].astype(int))
    assert diff.max() <= 2 and diff.mean() < 0.05, (diff.max(), diff.mean())


def test_two_graphs_with_different_models_queued_together_do_not_mix(comfy_server, info):
    a = ar_graph(info, target="embedded/target.safetensors", batch_size=2, seed=55)
    b = ar_graph(info, target="embedded/sd_drafter.safetensors", batch_size=2, seed=55)
    forget_outputs(comfy_server)
    solo_a = images(comfy_server, comfy_server.run(a, timeout=120))
    forget_outputs(comfy_server)
    solo_b = images(comfy_server, comfy_server.run(b, timeout=120))
    forget_outputs(comfy_server)
    ids = []
    for p in (a, b, a, b):
        status, body = comfy_server.queue(p)
        assert status == 200, body
        ids.append(body["prompt_id"])
    got = [images(comfy_server, comfy_server.wait(i, timeout=240)) for i in ids]
    assert same(got[0], solo_a) and same(got[1], solo_b) and same(got[2], solo_a) and same(got[3], solo_b)
    assert not same(solo_a, solo_b)
