"""The set-up itself: scripts/setup_env.sh keys its venv on the pins and refuses a venv it cannot trust.

Fast: no package is installed. The venvs here are `python -m venv --without-pip` shells whose
site-packages hold what a case needs (a dist-info folder for a package version, a .pth line for the
library), and every run points MULOSD_VENV at them, so the real cached venvs are never touched.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import check_venv  # noqa: E402  (scripts/ is not a package)

PINNED = check_venv.read_pins(str(ROOT / "constraints.txt"))


def run_setup(venv_dir: Path, latest: bool = False, *args: str, root: Path = ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MULOSD_LATEST_DEPS", "PYTHON", "PYTHONPATH")}
    env["MULOSD_VENV"] = str(venv_dir)
    if latest:
        env["MULOSD_LATEST_DEPS"] = "1"
    return subprocess.run(["bash", str(root / "scripts" / "setup_env.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=120)


def shell_venv(path: Path, dists: dict[str, str], library: Path | None = ROOT, mode: str = "pinned") -> Path:
    """A pip-less venv that seems to hold `dists` (name -> version) and sees mulosd_core in `library`,
    stamped as setup_env.sh would stamp a finished install of this recipe."""
    venv.EnvBuilder(with_pip=False).create(path)
    site = next(path.glob("lib/python*/site-packages"))
    for name, version in dists.items():
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if library is not None:
        (site / "mulosd_library.pth").write_text(f"{library}\n")
    (path / ".mulosd-made").write_text(f"{mode}\n")
    recipe = run_setup(path, mode == "latest", "--recipe")
    assert recipe.returncode == 0, recipe.stderr
    (path / ".mulosd-stamp").write_text(recipe.stdout)
    return path


def test_constraints_pin_what_the_tests_run_on():
    for name in ("torch", "torchvision", "transformers", "numpy", "safetensors", "pillow",
                 "comfyui-frontend-package", "pytest", "playwright"):
        assert name in PINNED, name
    assert (PINNED["torch"], PINNED["torchvision"]) == ("2.14.1", "0.29.1")   # the pair that works (docs/RUNTIME.md)
    assert not [ln for ln in (ROOT / "requirements.txt").read_text().splitlines() if "=" in ln or "<" in ln]


def test_read_pins_and_version_problems(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("# a comment\nFoo_Bar==1.0  # trailing\nbaz>=2\nqux==3.1; python_version<'4'\n\n")
    pins = check_venv.read_pins(str(f))
    assert pins == {"foo-bar": "1.0", "qux": "3.1"}
    assert check_venv.version_problems(pins, {"foo-bar": "1.0", "qux": "3.1"}) == []
    assert check_venv.version_problems(pins, {"foo-bar": "1.1"}) == ["foo-bar is 1.1, the constraints pin 1.0"]
    assert check_venv.version_problems(pins, {}) == []   # not installed yet is no problem


def test_recipe_keys_on_constraints_and_mode(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("setup_env.sh", "common.sh", "check_venv.py"):
        shutil.copy(ROOT / "scripts" / name, repo / "scripts" / name)
    for name in ("requirements.txt", "requirements-test.txt", "pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, repo / name)

    def recipe(latest=False):
        out = run_setup(tmp_path / "v", latest, "--recipe", root=repo)
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    pinned = recipe()
    assert pinned[1] == "pinned" and recipe(latest=True)[1] == "latest" and recipe(latest=True)[0] != pinned[0]
    with open(repo / "constraints.txt", "a") as f:
        f.write("some-package==1.0\n")
    assert recipe()[0] != pinned[0]                    # new pins: the venv is reinstalled
    assert recipe(latest=True)[0] == recipe(latest=True)[0]


def test_matching_venv_is_reused(tmp_path):
    v = shell_venv(tmp_path / "v", {"transformers": PINNED["transformers"], "numpy": PINNED["numpy"]})
    out = run_setup(v)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(v)


def test_changed_packages_are_refused(tmp_path):
    v = shell_venv(tmp_path / "v", {"transformers": "0.0.1", "numpy": PINNED["numpy"]})
    out = run_setup(v)
    assert out.returncode == 1 and out.stdout == ""
    assert f"transformers is 0.0.1, the constraints pin {PINNED['transformers']}" in out.stderr
    assert "no longer matches" in out.stderr and "Remove" in out.stderr and ".mulosd-stamp" in out.stderr
    assert "numpy" not in out.stderr


def test_other_mode_is_refused(tmp_path):
    v = shell_venv(tmp_path / "v", {})
    out = run_setup(v, latest=True)
    assert out.returncode == 1
    assert "holds the pinned dependency set, this run wants latest" in out.stderr and "MULOSD_VENV" in out.stderr
    latest = shell_venv(tmp_path / "l", {}, mode="latest")
    out = run_setup(latest)
    assert out.returncode == 1 and "holds the latest dependency set, this run wants pinned" in out.stderr
    old = tmp_path / "old"                      # a venv from before the modes: a stamp, no .mulosd-made
    old.mkdir()
    (old / ".mulosd-stamp").write_text("0123456789ab\n")
    out = run_setup(old, latest=True)
    assert out.returncode == 1 and "older pinned venv" in out.stderr


def test_foreign_folder_and_other_python_are_refused(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "something").write_text("x")
    out = run_setup(foreign)
    assert out.returncode == 1 and "was not made by this script" in out.stderr
    assert (foreign / "something").exists() and not (foreign / "bin").exists()
    other = tmp_path / "other"
    (other / "bin").mkdir(parents=True)
    (other / "bin" / "python").write_text("#!/bin/sh\necho 3.99\n")
    (other / "bin" / "python").chmod(0o755)
    (other / ".mulosd-made").write_text("pinned\n")
    out = run_setup(other)
    assert out.returncode == 1 and "runs Python 3.99" in out.stderr


def test_library_from_another_clone_is_detected(tmp_path):
    elsewhere = tmp_path / "clone"
    (elsewhere / "mulosd_core").mkdir(parents=True)
    (elsewhere / "mulosd_core" / "__init__.py").write_text("")
    v = shell_venv(tmp_path / "v", {}, library=elsewhere)
    py = v / "bin" / "python"
    out = subprocess.run([str(py), "-I", str(ROOT / "scripts" / "check_venv.py"), "--repo", str(ROOT)], cwd="/",
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and f"imports from {elsewhere / 'mulosd_core'}" in out.stdout
    bare = shell_venv(tmp_path / "bare", {}, library=None)
    out = subprocess.run([str(bare / "bin" / "python"), "-I", str(ROOT / "scripts" / "check_venv.py"), "--repo",
                          str(ROOT)], cwd="/", capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and "not installed" in out.stdout


def test_project_venv_imports_the_library_from_anywhere_but_not_the_pack(tmp_path):
    """In the venv setup_env.sh made (the one running the tests, when it is), mulosd_core imports from
    any folder and the pack's `nodes`, `bench` and `tests` do not (nodes would shadow ComfyUI's)."""
    if not (Path(sys.prefix) / ".mulosd-made").is_file():
        pytest.fail(f"the tests run outside a venv made by scripts/setup_env.sh ({sys.prefix}); use bash scripts/test.sh")
    probe = ("import importlib.util as u, json; "
             "print(json.dumps({m: bool(u.find_spec(m)) for m in ('mulosd_core', 'nodes', 'bench', 'tests')}))")
    out = subprocess.run([sys.executable, "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == '{"mulosd_core": true, "nodes": false, "bench": false, "tests": false}'


def shell_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("MULOSD_LATEST_DEPS", "MULOSD_VENV", "MULOSD_COMFYUI", "XDG_CACHE_HOME", "PYTHON", "PYTHONPATH")}
    env.update(extra)
    return env


@pytest.mark.parametrize("xdg", [None, "absolute", "relative/cache"])
def test_cache_folder_follows_xdg_cache_home_in_shell_and_python(tmp_path, xdg):
    env = shell_env() if xdg is None else shell_env(XDG_CACHE_HOME=str(tmp_path) if xdg == "absolute" else xdg)
    sh = subprocess.run(["bash", "-c", f"source {ROOT / 'scripts' / 'common.sh'} && mulosd_cache"], env=env,
                        capture_output=True, text=True, timeout=60)
    py = subprocess.run([sys.executable, "-c", "from mulosd_core import devenv; print(devenv.cache_dir(), "
                         "devenv.comfyui_dir())"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert sh.returncode == 0 and py.returncode == 0, sh.stderr + py.stderr
    want = tmp_path / "mulosd" if xdg == "absolute" else Path.home() / ".cache" / "mulosd"  # a relative one is ignored
    assert sh.stdout.strip() == str(want)
    assert py.stdout.split() == [str(want), str(want / "comfyui")]


def test_setup_env_finds_its_venv_under_xdg_cache_home(tmp_path):
    v = shell_venv(tmp_path / "mulosd" / "venv", {})
    out = subprocess.run(["bash", str(ROOT / "scripts" / "setup_env.sh")], env=shell_env(XDG_CACHE_HOME=str(tmp_path)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{v}\n"


def test_only_common_sh_and_devenv_spell_the_cache_folder():
    """Every script and module asks mulosd_cache / devenv, so XDG_CACHE_HOME moves everything at once
    (comments may still name the usual place)."""
    spelled = re.compile(r"""\.cache["']?\s*[/)]\s*["']?mulosd""")
    allowed = {"scripts/common.sh", "mulosd_core/devenv.py", "tests/test_setup_env.py"}
    found = []
    for folder in ("scripts", "mulosd_core", "nodes", "tests", "bench", ".ci"):
        for path in sorted((ROOT / folder).rglob("*")):
            rel = path.relative_to(ROOT).as_posix()
            if path.suffix in (".py", ".sh", "") and path.is_file() and rel not in allowed and "results" not in rel:
                code = [ln for ln in path.read_text(errors="replace").splitlines() if not ln.lstrip().startswith("#")]
                found += [rel for ln in code if spelled.search(ln)][:1]
    assert found == []


def test_progress_lines_go_to_stderr_with_time_and_size(tmp_path):
    (tmp_path / "blob").write_bytes(b"x" * 3_000_000)
    script = (f"source {ROOT / 'scripts' / 'common.sh'}; step_begin tag 'a step' {tmp_path} 'a hint'; "
              f"head -c 2000000 /dev/zero > {tmp_path}/more; step_end")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert lines[0] == "[tag] a step (a hint) ..."
    assert re.fullmatch(rf"\[tag\] a step took \d+s; {tmp_path} \+2 MB, now 5 MB", lines[1]), lines[1]


def test_latest_mode_takes_the_newest_frontend_and_pinned_mode_comfyuis_pin(tmp_path):
    """setup_comfyui.sh installs ComfyUI's requirements less torch, plus requests; the frontend keeps
    ComfyUI's pin only in the pinned mode (the latest mode tests what a user upgrading gets)."""
    (tmp_path / "requirements.txt").write_text(
        "comfyui-frontend-package==1.32.9\ncomfyui-workflow-templates==0.7.25\ntorch\ntorchsde\ntorchvision\n"
        "torchaudio>=2\nnumpy>=1.25.0\n")

    def requirements(**extra):
        out = subprocess.run(["bash", str(ROOT / "scripts" / "setup_comfyui.sh"), "--requirements"],
                             env=shell_env(MULOSD_COMFYUI=str(tmp_path), **extra), capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()

    rest = ["comfyui-workflow-templates==0.7.25", "torchsde", "numpy>=1.25.0", "requests"]
    assert requirements() == ["comfyui-frontend-package==1.32.9", *rest]
    assert requirements(MULOSD_LATEST_DEPS="1") == ["comfyui-frontend-package", *rest]
