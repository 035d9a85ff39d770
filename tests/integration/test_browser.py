"""The shipped UI workflows in ComfyUI's frontend (headless Chromium).

Each graph loads through app.loadGraphData with every node type known and converts
(app.graphToPrompt) to its API twin. The embedded comparison is then run from the page
and its screenshot, outputs shown, is kept in artifacts/workflow_<name>.png.
MULOSD_UPDATE_PREVIEWS=1 also refreshes the tracked pictures: docs/USAGE.md's
docs/images/workflow_embedded.png and the template browser's example_workflows/<name>.jpg.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from workflow_format import ROOT, WORKFLOWS, api_workflows, needs_only_shipped_models, strip_meta, ui_workflows

UI = ui_workflows()
API = api_workflows()
ARTIFACTS = ROOT / "artifacts"
README_IMAGE = ROOT / "docs" / "images" / "workflow_embedded.png"
EMBEDDED = "mulosd_embedded_vs_ar"

LOAD_JS = """async ([graph, name]) => {
    const known = window.LiteGraph.registered_node_types;
    const missing = [...new Set(graph.nodes.map(n => n.type).filter(t => !(t in known)))];
    await window.app.loadGraphData(graph, true, true, name, {showMissingNodesDialog: true, showMissingModelsDialog: false});
    const nodes = window.app.graph._nodes;
    // A node in error, with the combo widgets whose value is not among its options (a model file this
    // server lacks: frontends since about 1.5x flag those on load, 1.32.9 did not).
    const absent = n => (n.widgets || []).filter(w => Array.isArray(w.options?.values) && !w.options.values.includes(w.value));
    const errors = nodes.filter(n => n.has_errors).map(n => ({type: n.type, absent: absent(n).map(w => w.name)}));
    return {missing, loaded: nodes.map(n => n.type), errors};
}"""
PROMPT_JS = "async () => (await window.app.graphToPrompt()).output"
FIT_JS = """() => {  // the whole graph in view, clear of the side bar and the top bar
    const c = window.app.canvas, nodes = window.app.graph._nodes;
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const n of nodes) {
        x0 = Math.min(x0, n.pos[0]); y0 = Math.min(y0, n.pos[1] - 30);
        x1 = Math.max(x1, n.pos[0] + n.size[0]); y1 = Math.max(y1, n.pos[1] + n.size[1]);
    }
    const left = 70, top = 110, pad = 20;
    const s = Math.min((window.innerWidth - left - pad) / (x1 - x0), (window.innerHeight - top - pad) / (y1 - y0), 1.0);
    c.ds.scale = s;
    c.ds.offset = [left / s - x0, top / s - y0];
    c.setDirty(true, true);
}"""


def new_page(browser, server):
    from comfy_server import open_frontend

    server.set_setting("Comfy.Minimap.Visible", False)
    page = open_frontend(browser, server)
    page.set_viewport_size({"width": 1600, "height": 1000})
    banner = page.get_by_role("button", name="Try it out")  # the frontend's "Nodes 2.0" announcement
    if banner.count():
        banner.first.locator("xpath=following::button[1]").click()  # its close button
    return page


@pytest.fixture(scope="module")
def page(browser, comfy_server):
    page = new_page(browser, comfy_server)
    yield page
    page.close()


def screenshot(page, name: str) -> Path:
    page.evaluate(FIT_JS)
    page.wait_for_timeout(300)
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"workflow_{name}.png"
    page.screenshot(path=str(path))
    if os.environ.get("MULOSD_UPDATE_PREVIEWS") == "1":
        from PIL import Image

        Image.open(path).convert("RGB").resize((800, 500)).save(WORKFLOWS / f"{name}.jpg", quality=88)
    return path


def declared_only(prompt: dict, object_info: dict) -> dict:
    """Drop frontend-only widget values (PreviewAny's text box) that no node declares."""
    out = {}
    for k, n in strip_meta(prompt).items():
        info = object_info[n["class_type"]]["input"]
        names = set(info.get("required", {})) | set(info.get("optional", {}))
        out[k] = {"class_type": n["class_type"], "inputs": {i: v for i, v in n["inputs"].items() if i in names}}
    return out


@pytest.mark.parametrize("name", sorted(UI))
def test_ui_workflow_loads_with_every_node_known(page, comfy_server, name):
    result = page.evaluate(LOAD_JS, [UI[name], name])
    assert result["missing"] == [], f"{name}: node types unknown to the frontend: {result['missing']}"
    assert sorted(result["loaded"]) == sorted(n["type"] for n in UI[name]["nodes"])
    # Newer frontends flag a loader whose file this server lacks (it has the embedded models only): an
    # error explained by absent choices, in a graph that needs downloads, is expected; any other is not.
    unexplained = [e for e in result["errors"] if not e["absent"] or needs_only_shipped_models(API[name])]
    assert unexplained == [], f"{name}: nodes in error: {unexplained}"
    assert not page.get_by_text("Some Nodes Are Missing").count()
    got = page.evaluate(PROMPT_JS)
    info = comfy_server.object_info()
    assert declared_only(got, info) == strip_meta(API[name])  # the frontend's own conversion agrees with the API twin
    page.wait_for_timeout(300)
    screenshot(page, name)


def test_embedded_workflow_runs_from_the_page(browser, comfy_server):
    from mulosd_core.models.registry import embedded_path

    embedded_path("target")  # the weights must be there: a failure, not a skip
    page = new_page(browser, comfy_server)  # one workflow tab in the picture
    page.evaluate(LOAD_JS, [UI[EMBEDDED], EMBEDDED])
    before = set(comfy_server.get("/history").json())
    page.evaluate("async () => { await window.app.queuePrompt(0, 1); }")
    deadline = time.monotonic() + 240
    entry = None
    while time.monotonic() < deadline:
        new = {k: v for k, v in comfy_server.get("/history").json().items() if k not in before}
        done = [v for v in new.values() if v.get("status", {}).get("completed") is not None
                and v["status"].get("status_str") in ("success", "error")]
        if done:
            entry = done[0]
            break
        time.sleep(0.5)
    assert entry is not None, "the queued workflow did not finish"
    assert entry["status"]["status_str"] == "success", json.dumps(entry["status"])[:2000]
    shown = """() => window.app.graph._nodes.filter(n => n.imgs && n.imgs.length && n.imgs.every(i => i.complete)).length >= 3"""
    page.wait_for_function(shown, timeout=30_000)  # images of both samplers and the acceptance maps drawn
    page.wait_for_timeout(1500)
    path = screenshot(page, EMBEDDED)
    page.close()
    if os.environ.get("MULOSD_UPDATE_PREVIEWS") == "1":  # tracked files change only when asked
        README_IMAGE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, README_IMAGE)
