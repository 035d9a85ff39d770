"""pytest plugin (pyproject addopts `-p pytest_pack_root`): the repo root is a pack, not a test package.

The root has an __init__.py because ComfyUI imports the pack through it. pytest
would collect the root as a Package and, before the first test, import that file
to look for setup_module(); here the root is collected as a plain directory
instead. (The root conftest.py still imports it as a package: that is why the
root __init__.py must import without ComfyUI, see tests/test_packaging.py.)
"""

from pathlib import Path

import pytest

PACK_ROOT = Path(__file__).resolve().parents[1]


@pytest.hookimpl(tryfirst=True)
def pytest_collect_directory(path: Path, parent):
    if path.resolve() == PACK_ROOT:
        return pytest.Dir.from_parent(parent, path=path)
    return None
