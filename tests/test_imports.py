"""The package's layering (scripts/imports.py): no import cycle, function-level imports included; the model
layer does not import the sampling layer; the nodes import the library through mulosd_core.api only."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _report():
    spec = importlib.util.spec_from_file_location("imports_script", os.path.join(ROOT, "scripts", "imports.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.report()


def test_no_cycles_and_the_layers_hold():
    r = _report()
    assert r["cycles"] == []
    assert r["models_import_sampling"] == []
    assert r["nodes_import_library"] == ["mulosd_core.api"]
