"""ComfyUI starts with the pack in custom_nodes/ and imports it without failure."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def test_server_serves_object_info(comfy_server):
    info = comfy_server.object_info()
    # Core nodes prove this is a working ComfyUI, not some other server on the port.
    assert {"KSampler", "SaveImage", "EmptyLatentImage"} <= set(info)
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
