"""Keyed batches: sample i of a batch renders from `np.random.default_rng([*key, i])`.

Both procedural families and the family table batch their renderers this way; the helper lives
here, below them, so neither has to import the other.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch


def render_keyed(render: Callable[..., np.ndarray], class_ids, key: Sequence[int], size: int,
                 variation: str) -> torch.Tensor:
    """Images [B, 3, size, size] float32 of `render(class_id, rng, size, variation)` for each class id."""
    ids = np.asarray(class_ids.cpu() if isinstance(class_ids, torch.Tensor) else class_ids, dtype=np.int64).reshape(-1)
    key = [int(k) for k in key]
    out = np.empty((len(ids), 3, size, size), dtype=np.float32)
    for i, c in enumerate(ids):
        out[i] = render(int(c), np.random.default_rng([*key, i]), size, variation).transpose(2, 0, 1)
    return torch.from_numpy(out)
