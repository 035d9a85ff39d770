"""Procedural data for the embedded model family."""
from .procedural import (
    CLASS_NAMES,
    NUM_CLASSES,
    PatternDataset,
    make_batch,
    make_image,
    make_keyed_batch,
)

__all__ = ["CLASS_NAMES", "NUM_CLASSES", "PatternDataset", "make_batch", "make_image", "make_keyed_batch"]
