"""Parse data/llamagen-state-dict-keys.txt (official LlamaGen state_dict names and shapes).

The file was produced by instantiating upstream gpt.py / vq_model.py and printing
state_dict() names with shapes; for the GPTs only layer 0 is listed.
"""
from __future__ import annotations

import os
import re

KEYS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llamagen-state-dict-keys.txt")


def sections() -> dict[str, dict]:
    """{'GPT-B c2i': {'count': 88, 'keys': {name: shape}}, 'GPT-B t2i': ..., 'VQ-16': {... 'params': 71883403}}."""
    out: dict[str, dict] = {}
    cur = None
    with open(KEYS_FILE) as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"^(\S.*?) keys: (\d+)(?: params (\d+))?$", line)
            if m:
                cur = {"count": int(m.group(2)), "params": int(m.group(3)) if m.group(3) else None, "keys": {}}
                out[m.group(1)] = cur
                continue
            m = re.match(r"^  (\S+) \(([\d, ]*)\)$", line)
            if m and cur is not None:
                shape = tuple(int(x) for x in m.group(2).replace(" ", "").split(",") if x)
                cur["keys"][m.group(1)] = shape
            elif not line.startswith("  "):
                cur = None
    return out


def gpt_keys(section: str, n_layer: int) -> dict[str, tuple]:
    """Every key of an official GPT (layer 0's keys repeated for each layer)."""
    keys = sections()[section]["keys"]
    full: dict[str, tuple] = {}
    for k, shape in keys.items():
        if k.startswith("layers.0."):
            for i in range(n_layer):
                full[f"layers.{i}." + k[len("layers.0."):]] = shape
        else:
            full[k] = shape
    return full
