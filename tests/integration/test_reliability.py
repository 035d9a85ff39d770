"""Reliability inside a real ComfyUI server: bad files, bad parameters, cancel, repeated use.

Each test drives the server the way a user does (queue, interrupt, /free) and checks that
the error is clear, nothing from a checkpoint runs, the server stays usable, memory stays
flat over many prompts, and an output never depends on what ran before it.
"""
from __future__ import annotations

import io
import json
import time

import numpy as np
import psutil
import pytest
from PIL import Image

from bench import probe

SOAK_PROMPTS = 50


# ------------------------------------------------------------------------------ helpers
@pytest.fixture(scope="module")
def info(comfy_server):
    return comfy_server.object_info()


# The probe's graph builders: the test and `python -m bench.probe` send the same graphs.
node, mulo_graph, ar_graph = probe.node, probe.mulo_graph, probe.ar_graph


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


# ------------------------------------------------------------------ hostile probes
# The cases of `python -m bench.probe` (docs/USAGE.md, Reliability), on the session's server: each
# gives a clear error naming the input or the file, the server stays alive, and the next output is identical
# to one taken before the probe.
@pytest.fixture(scope="module")
def prober(comfy_server):
    p = probe.Prober(comfy_server)
    p.take_reference()
    return p


def _all_ok(rows: list) -> None:
    print("\n" + probe.table(rows, {"rss_before_mb": 0, "rss_after_mb": 0, "growth": 0}).split("\n\n")[0])
    bad = [(r.probe, r.clear, r.alive, r.identical, r.detail) for r in rows if not r.ok]
    assert not bad, bad


def test_bad_model_files_fail_clearly_and_the_server_stays_usable(prober):
    """Truncated, empty, an image, text, random bytes, a foreign zip, JSON (as .pt and .safetensors), a VQ
    tokenizer chosen as a GPT (refused before the prompt runs: its header says what it is), a pickle carrying
    code (which never runs)."""
    rows = prober.files()
    assert len(rows) >= 14
    _all_ok(rows)


def test_loaders_offer_their_kind_and_name_every_wrong_or_missing_file(prober):
    """Issue 37: the lists hold only GPTs / only tokenizers; the embedded classifier or upsampler chosen as a GPT
    is refused at POST /prompt naming its kind (not 'does not record its image size'); the llamagen_c2i workflow
    without its downloads names both files on each loader's model_name and vq_name; the loader's text names
    the tokenizer as listed (embedded/patterns/vq.safetensors)."""
    rows = prober.choices()
    assert len(rows) == 5
    _all_ok(rows)


def test_library_calls_name_the_fix(prober):
    """Issue 37, in the probe's process: an int class is one image, no drafter points to method="ar", a missing
    path or the classifier is named as such before the image size."""
    _all_ok(prober.library())


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


def test_bad_parameters_fail_before_sampling_naming_the_input(prober):
    """class_id 2.5 and batch_size 0.5 refused at POST /prompt (not run as 2 and 0), NaN cfg, an unknown mode,
    a class the model lacks, an image size off the tokenizer's grid, a drafter larger than its target."""
    _all_ok(prober.parameters())


def test_an_image_size_that_cannot_fit_is_refused_before_sampling_and_keeps_memory(prober):
    row = prober.huge_image()
    _all_ok([row])
    n = row.numbers
    assert n["seconds"] < 60, n
    assert abs(n["rss_after_mb"] - n["rss_before_mb"]) < 0.02 * n["rss_before_mb"], n


def test_the_128_px_pair_keeps_the_refusals_and_the_cancel(prober):
    """Issue 36: an Upsampler ratio that does not fit the 128 px r = 4 pair, the 128 px target as a drafter, a
    4096 px run of the 128 px target, and a cancelled 128 px r = 2 run, each as the 64 px pair's."""
    rows = prober.pyramid()
    assert len(rows) == 4
    _all_ok(rows)
    assert rows[3].numbers["latency_median_s"] < probe.CANCEL_LIMIT


# -------------------------------------------------------------------------------- cancel
def test_cancel_at_one_second_of_a_batch_run_ends_within_two_seconds(prober):
    """The scenes pair at the paper's verifier settings, batch probe.CANCEL_BATCH (16), runs for seconds (it
    resamples almost every token): cancel must not wait for the run's end (checked before
    every model call); the same prompt afterwards gives the undisturbed run's images."""
    row = prober.cancel(runs=1)
    print(f"\n{row.probe}: {row.detail}")
    _all_ok([row])
    assert row.numbers["latency_median_s"] < probe.CANCEL_LIMIT


def test_cancelled_ar_run_leaves_the_next_identical_run_unchanged(comfy_server, info):
    """Plain AR reports progress every token row: cancel at its first report."""
    prompt = ar_graph(info, batch_size=8, seed=4243)
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
