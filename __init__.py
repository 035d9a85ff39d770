"""MuLo-SD for ComfyUI: the pack's entry point, as ComfyUI imports it from custom_nodes/.

ComfyUI (0.3.75 and current releases) calls `comfy_entrypoint()` and registers the V3
nodes that the returned extension lists; no `on_load()` is needed (0.3.75 never calls
it). Importing this file needs no ComfyUI: the nodes are imported only when ComfyUI
asks for them. The pack folder is appended to sys.path so that `mulosd_core`, the
library the nodes wrap, imports as a top-level package.
"""
import logging
import os
import sys

_PACK_DIR = os.path.dirname(os.path.abspath(__file__))
if _PACK_DIR not in sys.path:
    sys.path.append(_PACK_DIR)


async def comfy_entrypoint():
    try:
        from .nodes import MuLoSDExtension
    except Exception:
        logging.getLogger("mulosd").exception("MuLo-SD: the nodes failed to import")
        raise
    return MuLoSDExtension()
