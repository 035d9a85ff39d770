"""Fixtures for tests against a real ComfyUI server (and its frontend in Chromium).

    def test_x(comfy_server):                  # session-wide server, pack installed
        info = comfy_server.object_info()
        status, body = comfy_server.queue(api_prompt)
        entry = comfy_server.wait(body["prompt_id"], timeout=120)

    def test_y(frontend_page):                 # a fresh page, default graph loaded
        frontend_page.evaluate("() => Object.keys(LiteGraph.registered_node_types).length")

See comfy_server.py for the whole client API. A missing ComfyUI or Chromium is a
failure, not a skip: run scripts/setup_comfyui.sh and scripts/setup_browser.sh
(scripts/test.sh does both).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from comfy_server import ComfyServer, ComfyServerError, launch_chromium, open_frontend, save_artifact  # noqa: E402


@pytest.fixture(scope="session")
def comfy_server(tmp_path_factory):
    """A ComfyUI server with this pack in custom_nodes/, shared by the session."""
    base = tmp_path_factory.mktemp("comfy-base")
    try:
        server = ComfyServer(base)
    except ComfyServerError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        server.start(ready_timeout=float(os.environ.get("MULOSD_SERVER_TIMEOUT", "180")))
    except BaseException as e:  # also Ctrl-C: never leave the process behind
        server.stop()
        save_artifact(server.log_path, "comfyui-server.log")
        if isinstance(e, ComfyServerError):
            pytest.fail(str(e), pytrace=False)
        raise
    try:
        errors = server.pack_import_errors()
        if errors:
            pytest.fail("ComfyUI could not import the pack:\n" + "\n".join(errors) + "\n" + server.log_tail(),
                        pytrace=False)
        yield server
    finally:
        server.stop()
        save_artifact(server.log_path, "comfyui-server.log")


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium driven by Playwright (sync API), shared by the session."""
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        try:
            b = launch_chromium(pw)
        except ComfyServerError as e:
            pytest.fail(str(e), pytrace=False)
        yield b
        b.close()
    finally:
        pw.stop()


@pytest.fixture
def frontend_page(browser, comfy_server, request):
    """A new page with the frontend loaded (window.app.graph ready); screenshot kept on failure."""
    try:
        page = open_frontend(browser, comfy_server)
    except ComfyServerError as e:
        pytest.fail(str(e), pytrace=False)
    yield page
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        try:
            out = Path(__file__).resolve().parents[2] / "artifacts"
            out.mkdir(exist_ok=True)
            page.screenshot(path=str(out / f"{request.node.name}.png"))
        except Exception:
            pass
    page.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item, and add the server log tail to failures."""
    rep = yield
    setattr(item, f"rep_{rep.when}", rep)
    if rep.failed and "comfy_server" in getattr(item, "fixturenames", ()):
        server = item.funcargs.get("comfy_server") if hasattr(item, "funcargs") else None
        if isinstance(server, ComfyServer):
            rep.sections.append(("ComfyUI server log (tail)", server.log_tail(60)))
    return rep
