"""example_workflows/*.json and example_workflows/api/*.json are what scripts/make_workflows.py writes."""
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("make_workflows", ROOT / "scripts" / "make_workflows.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_workflows"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_workflow_files_are_current(pack):
    script = load_script()
    files = script.render()
    stale = [str(p.relative_to(ROOT)) for p, text in files.items() if not p.exists() or p.read_text() != text]
    assert stale == [], "run: python scripts/make_workflows.py"
    out = script.OUT
    on_disk = set(out.glob("*.json")) | set((out / "api").glob("*.json"))
    assert on_disk == set(files), "workflow files that the script does not write"
    previews = {p.with_suffix(script.PREVIEW) for p in out.glob("*.json")}
    assert set(out.iterdir()) == set(out.glob("*.json")) | previews | {out / "api"}, "stray files in " + out.name


def test_templates_sit_where_comfyui_documents_them(pack):
    """One template folder, named example_workflows: ComfyUI 0.3.75 also lists example/, examples/,
    workflow/ and workflows/ (with a hint to rename them), so a second one would list every graph twice."""
    assert load_script().OUT == ROOT / "example_workflows"
    others = [name for name in ("example", "examples", "workflow", "workflows") if (ROOT / name).exists()]
    assert others == []


def test_graphs_use_only_known_node_types(pack):
    script = load_script()
    known = set(script.CORE) | {cls.GET_SCHEMA().node_id for cls in pack.NODES}
    for path in (script.OUT / "api").glob("*.json"):
        types = {n["class_type"] for n in json.loads(path.read_text()).values()}
        assert types <= known, path.name
