"""ComfyUI starts with the pack in custom_nodes/, imports it without failure and serves our nodes."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

DISPLAY_NAMES = {
    "MuLoSDLoadTarget": "Load Target", "MuLoSDLoadDrafter": "Load Drafter", "MuLoSDSelfDrafter": "Self Drafter", "MuLoSDLoadTextEncoder": "Load Text Encoder",
    "MuLoSDTextPrompt": "MuLo-SD Text Prompt", "MuLoSDLoadJanus": "Load Janus-Pro", "MuLoSDJanusPrompt": "Janus Prompt",
    "MuLoSDUpsampler": "Upsampler", "MuLoSDLocalVerifier": "Local Verifier", "MuLoSDSampler": "MuLo-SD Sampler",
    "MuLoSDARSampler": "AR Sampler",
}


def test_server_serves_our_nodes_at_the_shipped_settings(comfy_server):
    """/object_info is what the frontend builds its widgets from: our nodes under the design card's names,
    and the MuLo-SD settings defaulting to the shipped ones (mulosd_core.presets), as the library runs them."""
    from mulosd_core import presets

    info = comfy_server.object_info()
    ours = {k: v["display_name"] for k, v in info.items() if k.startswith("MuLoSD")}
    assert ours == DISPLAY_NAMES
    assert all(info[k]["python_module"].startswith("custom_nodes.") for k in ours)

    def defaults(node: str) -> dict:
        spec = info[node]["input"]
        return {k: v[1].get("default") for part in ("required", "optional") for k, v in spec.get(part, {}).items()
                if len(v) > 1}
    v = presets.mulo_verifier()
    verifier = defaults("MuLoSDLocalVerifier")
    assert {k: verifier[k] for k in ("rule", "tau", "k_neighbours", "expansion_radius", "rejection", "resampling",
                                     "recheck", "recheck_scope")} == {
        "rule": v.rule, "tau": v.tau, "k_neighbours": v.k_neighbours, "expansion_radius": v.expansion_radius,
        "rejection": v.rejection, "resampling": v.resampling, "recheck": v.recheck, "recheck_scope": v.recheck_scope}
    assert verifier["lantern_delta"] == presets.LANTERN_DELTA
    sampler = defaults("MuLoSDSampler")
    # the schedule widgets default to -1: the pair's shipped setting (presets.resolve at run time)
    assert (sampler["rows_per_step"], sampler["parallel_window"], sampler["draft_length"]) == (-1, -1, -1)
    assert comfy_server.alive()


def test_pack_imported_without_failure(comfy_server):
    line = comfy_server.pack_import_line()
    assert line is not None, "ComfyUI never tried to import the pack\n" + comfy_server.log_tail()
    assert "IMPORT FAILED" not in line, line
    assert comfy_server.pack_import_errors() == []
    log = comfy_server.log_text()
    # ComfyUI parses the pack's pyproject.toml ([tool.comfy]) at import; it must parse.
    assert "Unable to parse pyproject.toml" not in log, comfy_server.log_tail()


def test_client_runs_a_core_prompt(comfy_server):
    """The client's queue/wait/view and websocket helpers on a prompt of core nodes only."""
    prompt = {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 255}},
        "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "smoke"}},
    }
    with comfy_server.websocket() as ws:
        status, body = comfy_server.queue(prompt, client_id=ws.client_id)
        assert status == 200 and body["node_errors"] == {}, body
        messages = ws.collect(body["prompt_id"], timeout=120)
    assert messages[-1]["type"] == "execution_success"
    entry = comfy_server.wait(body["prompt_id"], timeout=60)
    assert entry["status"]["status_str"] == "success"
    image = entry["outputs"]["2"]["images"][0]
    assert comfy_server.view(image)[:8] == b"\x89PNG\r\n\x1a\n"

    status, body = comfy_server.queue({"1": {"class_type": "NoSuchNode", "inputs": {}}})
    assert status == 400, body
    comfy_server.cancel("not-a-prompt")  # harmless on unknown ids
    comfy_server.interrupt()


def test_server_process_dies_with_its_parent():
    """The server is started with die_with_parent: a pytest killed by a signal takes it along. Checked
    with a stand-in: a parent that starts `sleep` the same way and is SIGKILLed."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux-only")
    here = Path(__file__).parent
    parent = ("import os, signal, subprocess, sys; sys.path.insert(0, %r); from comfy_server import die_with_parent; "
              "p = subprocess.Popen(['sleep', '60'], stdout=subprocess.DEVNULL, start_new_session=True, "
              "preexec_fn=die_with_parent); "
              "print(p.pid, flush=True); os.kill(os.getpid(), signal.SIGKILL)" % str(here))
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=30)
    child = int(out.stdout.split()[0])

    def running() -> bool:
        try:
            state = Path(f"/proc/{child}/stat").read_text().split(") ")[1][0]
        except (FileNotFoundError, IndexError):
            return False
        return state not in "ZX"

    deadline = time.monotonic() + 10
    while running() and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = running()
    if alive:
        os.kill(child, 9)
    assert not alive, "the child outlived its SIGKILLed parent"
