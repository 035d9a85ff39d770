"""Where the set-up scripts keep the developer environment, for the Python side of the tools.

The same rule as scripts/common.sh's `mulosd_cache`: `$XDG_CACHE_HOME/mulosd` when XDG_CACHE_HOME is
an absolute path (a relative one is ignored, as the XDG base directory rule says), else
`~/.cache/mulosd`. The project venvs and the test ComfyUI live under it unless MULOSD_VENV or
MULOSD_COMFYUI name other folders. Nothing here is used by the nodes: ComfyUI's own folders serve them.
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "mulosd"


def comfyui_dir() -> Path:
    """The ComfyUI that scripts/setup_comfyui.sh installs (MULOSD_COMFYUI moves it)."""
    named = os.environ.get("MULOSD_COMFYUI")
    return Path(named).expanduser() if named else cache_dir() / "comfyui"
