"""pyproject.toml mirrors requirements*.txt and carries what the Comfy Registry reads; the sdist holds the pack."""

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def requirement_lines(name: str) -> list[str]:
    lines = (ROOT / name).read_text().splitlines()
    return [ln.split("#", 1)[0].strip() for ln in lines if ln.split("#", 1)[0].strip()]


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_dependencies_mirror_requirements(pyproject):
    assert pyproject["project"]["dependencies"] == requirement_lines("requirements.txt")


def test_test_extra_mirrors_requirements_test(pyproject):
    assert pyproject["project"]["optional-dependencies"]["test"] == requirement_lines("requirements-test.txt")


def test_no_url_or_vcs_dependencies(pyproject):
    deps = pyproject["project"]["dependencies"] + requirement_lines("requirements.txt")
    bad = [d for d in deps if re.search(r"(git\+|://|@\s*\S+|^-e\b|^--)", d)]
    assert bad == []


def test_no_torch_pin(pyproject):
    # ComfyUI's users bring their own torch build; a pin would replace it.
    torch = [d for d in pyproject["project"]["dependencies"] if re.match(r"^torch\b(?![-\w])", d)]
    assert all(d == "torch" for d in torch), torch


def test_project_metadata(pyproject):
    project = pyproject["project"]
    assert project["name"] == "comfyui-mulosd"
    assert re.fullmatch(r"\d+\.\d+\.\d+", project["version"])
    assert project["description"]
    assert project["requires-python"] == ">=3.10"
    assert project["license"] == {"file": "LICENSE"}
    assert (ROOT / project["license"]["file"]).is_file()
    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert project["urls"]["Repository"].startswith("https://github.com/")
    assert project["classifiers"]


def test_tool_comfy(pyproject):
    comfy = pyproject["tool"]["comfy"]
    for key in ("PublisherId", "DisplayName", "Icon", "includes", "requires-comfyui"):
        assert key in comfy, key
    assert comfy["PublisherId"] == "mulosd"
    assert comfy["DisplayName"] == "MuLo-SD (Multi-Scale Local Speculative Decoding)"
    # comfy-cli drops (with only a warning) a version that is not major.minor.patch.
    assert re.fullmatch(r"[<>=!~]=?\s*\d+\.\d+\.\d+", comfy["requires-comfyui"])
    # A web folder is declared at most once (both ways makes the frontend load it twice).
    init = (ROOT / "__init__.py").read_text()
    assert not ("web" in comfy and re.search(r"^WEB_DIRECTORY\s*=", init, re.M))


def test_icon_is_a_small_square_picture_in_the_repo(pyproject):
    """The registry shows Icon from its URL: it names this repository's copy of docs/images/icon.png."""
    from PIL import Image

    icon = pyproject["tool"]["comfy"]["Icon"]
    raw = pyproject["project"]["urls"]["Repository"].replace("https://github.com/", "https://raw.githubusercontent.com/")
    prefix = raw.rstrip("/") + "/main/"
    assert icon.startswith(prefix), icon
    path = ROOT / icon[len(prefix):]
    assert path.is_file(), f"{path} is missing: python scripts/make_icon.py draws it"
    with Image.open(path) as img:
        assert img.format == "PNG" and img.width == img.height <= 400, (img.format, img.size)
    assert path.stat().st_size < 20_000


def source_files() -> set[str]:
    """Tracked files and new ones git does not ignore: what is not generated."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"the packaging test needs the git checkout: {out.stderr}"
    return {f for f in out.stdout.splitlines() if (ROOT / f).is_file()}


def test_sdist_holds_the_pack_and_nothing_generated(tmp_path):
    """`python -m build --sdist` gives the ComfyUI pack: entry point, nodes, library, embedded models,
    example graphs, and no test, benchmark, run output or cache (MANIFEST.in says what goes in)."""
    proc = subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (sdist,) = tmp_path.glob("comfyui_mulosd-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}
    metadata = {n for n in names if n in ("PKG-INFO", "setup.cfg") or n.startswith("comfyui_mulosd.egg-info/")}
    shipped = names - metadata
    sources = source_files()
    assert sorted(shipped - sources) == [], "the sdist carries files that git ignores (generated)"
    wanted = {f for f in sources if f.startswith(("nodes/", "mulosd_core/", "models/embedded/", "example_workflows/"))}
    wanted |= {"__init__.py", "requirements.txt", "pyproject.toml", "LICENSE", "README.md"}
    assert sorted(wanted - shipped) == [], "the sdist lacks part of the pack"
    assert sorted(shipped - wanted - {"MANIFEST.in"}) == []


def test_root_init_defines_mappings():
    init = (ROOT / "__init__.py").read_text()
    assert "NODE_CLASS_MAPPINGS" in init or "comfy_entrypoint" in init


def test_comfy_cli_node_validate(tmp_path):
    """The Comfy Registry's own offline check (`comfy node validate`) accepts the pack."""
    comfy = Path(sys.executable).parent / "comfy"
    if not comfy.exists():
        comfy = shutil.which("comfy")
    assert comfy, "comfy-cli is missing: it is in requirements-test.txt, run bash scripts/setup_env.sh"
    env = {**os.environ, "RUFF_CACHE_DIR": str(tmp_path / "ruff-cache")}
    proc = subprocess.run([str(comfy), "--skip-prompt", "--no-enable-telemetry", "node", "validate"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # Security warnings (exec/eval, several statements on one line) are only warnings
    # today but "will soon be an error" for publishing: keep the pack clean of them.
    assert "All validation checks passed" in out, out
    # comfy-cli only warns about fields it then leaves out of the registry entry (a version it cannot
    # parse, an unknown OS or accelerator classifier, a malformed license): none may be dropped.
    assert "Warning" not in out, out


def test_pack_root_imports_without_comfyui(tmp_path):
    """The root __init__.py loads as ComfyUI loads it, without ComfyUI on the path.

    pytest imports it too (the root conftest.py is a submodule of the root package),
    so an __init__.py that needs ComfyUI at import time would break every test run.
    """
    probe = f"""
import importlib.util, sys
root = {str(ROOT)!r}
spec = importlib.util.spec_from_file_location("mulosd_probe", root + "/__init__.py",
                                              submodule_search_locations=[root])
mod = importlib.util.module_from_spec(spec)
sys.modules["mulosd_probe"] = mod
spec.loader.exec_module(mod)
assert hasattr(mod, "NODE_CLASS_MAPPINGS") or hasattr(mod, "comfy_entrypoint"), dir(mod)
comfy = sorted(m for m in sys.modules if m.split(".")[0] in ("comfy", "comfy_api", "folder_paths", "nodes"))
assert not comfy, comfy
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
