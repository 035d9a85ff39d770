"""The embedded data families by name: what every trainer, evaluator and benchmark asks for.

`scenes` (the default): natural-looking scenes whose class lives in low frequencies and whose
texture makes many tokens valid at most positions, like real AR image models see.
`patterns`: the first family (flat shapes and stripes), kept as the hard case.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from . import procedural, scenes
from .keyed import render_keyed

DEFAULT_FAMILY = "scenes"


@dataclass(frozen=True)
class DataFamily:
    """One procedural data set: its classes, its renderer and which variation each learner sees."""
    name: str
    class_names: tuple[str, ...]
    render: Callable[..., np.ndarray]   # render(class_id, rng, size, variation) -> [S, S, 3] float32 in [0, 1]
    gpt_variation: str                  # what the GPTs learn and are scored against
    wide_variation: str                 # what the tokenizer and the classifier learn (contains gpt_variation)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def keyed_batch(self, class_ids: Sequence[int] | torch.Tensor | np.ndarray, key: Sequence[int], size: int = 64,
                    variation: str | None = None) -> torch.Tensor:
        """Images [B, 3, size, size]; sample i uses `np.random.default_rng([*key, i])` (the wide variation
        unless `variation` says otherwise)."""
        return render_keyed(self.render, class_ids, key, size, variation or self.wide_variation)

    def batch(self, class_ids, seed: int, size: int = 64, variation: str | None = None) -> torch.Tensor:
        """Same scenes at every size for the same (class_ids, seed): sample i uses rng([seed, i])."""
        return self.keyed_batch(class_ids, (int(seed),), size, variation)


FAMILIES: dict[str, DataFamily] = {
    "scenes": DataFamily("scenes", tuple(scenes.CLASS_NAMES), scenes.make_image, scenes.GPT_VARIATION,
                         scenes.GPT_VARIATION),
    "patterns": DataFamily("patterns", tuple(procedural.CLASS_NAMES), procedural.make_image,
                           procedural.GPT_VARIATION, "wide"),
}


def data_family(name: str) -> DataFamily:
    if name not in FAMILIES:
        raise ValueError(f"family {name!r}: unknown embedded data family; expected one of {sorted(FAMILIES)}")
    return FAMILIES[name]
