"""Procedural data for the embedded model families (`families.data_family(name)`)."""
from .families import DEFAULT_FAMILY, FAMILIES, DataFamily, data_family
from .procedural import (
    CLASS_NAMES,
    NUM_CLASSES,
    PatternDataset,
    make_batch,
    make_image,
    make_keyed_batch,
)

__all__ = ["CLASS_NAMES", "DEFAULT_FAMILY", "FAMILIES", "DataFamily", "NUM_CLASSES", "PatternDataset", "data_family",
           "make_batch", "make_image", "make_keyed_batch"]
