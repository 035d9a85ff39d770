"""The shipped workflows and the UI -> API conversion the frontend does (graphToPrompt), for tests.

`ui_to_api(ui, object_info)` maps each node's widgets_values to input names in
/object_info's input order (skipping the control_after_generate value that follows a
seed) and its linked sockets to [source id, output slot]. Bypassed/muted nodes are left
out, as the frontend does.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "example_workflows"   # UI format here (ComfyUI's template list), API format in api/
WIDGET_TYPES = ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")
LOADERS = ("MuLoSDLoadTarget", "MuLoSDLoadDrafter", "MuLoSDLoadJanus")  # nodes whose model_name names a model to load


def ui_workflows() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(WORKFLOWS.glob("*.json"))}


def api_workflows() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted((WORKFLOWS / "api").glob("*.json"))}


def model_names(prompt: dict) -> list[str]:
    return [n["inputs"]["model_name"] for n in prompt.values() if n["class_type"] in LOADERS]


def needs_only_shipped_models(prompt: dict) -> bool:
    names = model_names(prompt)
    return bool(names) and all(n.startswith("embedded/") for n in names)


def widget_inputs(info: dict) -> list[tuple[str, bool]]:
    """(name, has control_after_generate) of a node type's widget inputs, in widgets_values order."""
    out = []
    for section in ("required", "optional"):
        for name in info["input_order"].get(section, []):
            spec = info["input"][section][name]
            t, opts = spec[0], (spec[1] if len(spec) > 1 else {})
            if (isinstance(t, list) or t in WIDGET_TYPES) and not opts.get("forceInput"):
                out.append((name, bool(opts.get("control_after_generate"))))
    return out


def ui_to_api(ui: dict, object_info: dict) -> dict:
    links = {link[0]: link for link in ui["links"]}
    prompt = {}
    for node in ui["nodes"]:
        if node.get("mode", 0) != 0:
            continue
        inputs = {}
        values = list(node.get("widgets_values") or [])
        i = 0
        for name, control in widget_inputs(object_info[node["type"]]):
            if i >= len(values):
                raise ValueError(f"node {node['id']} ({node['type']}): no widget value for {name}")
            inputs[name] = values[i]
            i += 2 if control else 1
        if i != len(values):
            raise ValueError(f"node {node['id']} ({node['type']}): {len(values) - i} widget values left over")
        for socket in node.get("inputs", []):
            if socket.get("link") is not None:
                link = links[socket["link"]]
                inputs[socket["name"]] = [str(link[1]), link[2]]
        prompt[str(node["id"])] = {"class_type": node["type"], "inputs": inputs}
    return prompt


def strip_meta(prompt: dict) -> dict:
    return {k: {"class_type": v["class_type"], "inputs": v["inputs"]} for k, v in prompt.items()}
