"""pytest plugin (pyproject addopts `-p pytest_pack_root`): the repo root is a pack, not a package.

The root __init__.py is the pack's entry point for ComfyUI and imports ComfyUI's
API, which the test process does not have. pytest would import that file before
the first test in two ways: by collecting the root as a Package (its setup imports
__init__.py), and by importing a root conftest.py as a submodule of the root
package. Here conftest.py files and collection start at tests/ (the confcutdir,
unless --confcutdir is given), and the root, if ever collected, is a plain
directory. Tests reach the library as `mulosd_core` (pythonpath ".").
"""

from pathlib import Path

import pytest

PACK_ROOT = Path(__file__).resolve().parents[1]
TESTS = PACK_ROOT / "tests"


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    ns = early_config.known_args_namespace
    # pytest's default confcutdir is the ini file's folder, the repo root: move it to tests/.
    if ns.confcutdir and Path(ns.confcutdir).resolve() == PACK_ROOT:
        ns.confcutdir = str(TESTS)


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent):
    if path.resolve() == PACK_ROOT:
        return pytest.Dir.from_parent(parent, path=path)
    return None
