"""The scenes data family: deterministic, the same scene at every size, class in the low frequencies,
texture everywhere (mulosd_core/data/scenes.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mulosd_core.data import scenes
from mulosd_core.data.families import FAMILIES, data_family

CLASSES = range(scenes.NUM_CLASSES)


def _coarse(images: torch.Tensor, cells: int = 8) -> torch.Tensor:
    return F.adaptive_avg_pool2d(images, cells)


def test_same_rng_same_image():
    fam = data_family("scenes")
    a = fam.batch(list(CLASSES), seed=3, size=64)
    b = fam.batch(list(CLASSES), seed=3, size=64)
    assert torch.equal(a, b)
    assert not torch.equal(a, fam.batch(list(CLASSES), seed=4, size=64))


@pytest.mark.parametrize("size", [32, 128])
def test_the_same_scene_at_every_size(size):
    """Rendered at 32 or 128 px, a scene has the layout of its 64 px render (8x8 block means agree),
    while another seed's scene of the same class does not."""
    fam = data_family("scenes")
    ref = _coarse(fam.batch(list(CLASSES), seed=11, size=64))
    same = _coarse(fam.batch(list(CLASSES), seed=11, size=size))
    other = _coarse(fam.batch(list(CLASSES), seed=12, size=64))
    same_err = (same - ref).abs().mean(dim=(1, 2, 3))
    other_err = (other - ref).abs().mean(dim=(1, 2, 3))
    assert float(same_err.max()) < 0.03, same_err
    assert float(same_err.mean()) < 0.3 * float(other_err.mean())


def test_every_region_is_textured():
    """Most 4x4 pixel blocks (one token of the 64 px target) vary inside: no flat colour fields."""
    images = data_family("scenes").batch([c for c in CLASSES for _ in range(4)], seed=5, size=64)
    blocks = images.unfold(2, 4, 4).unfold(3, 4, 4)            # [B, 3, 16, 16, 4, 4]
    std = blocks.flatten(-2).std(-1).mean(1)                    # [B, 16, 16]
    assert float((std > 0.01).float().mean()) > 0.9


def test_values_and_errors():
    img = scenes.make_image(0, np.random.default_rng(0), 64)
    assert img.shape == (64, 64, 3) and img.dtype == np.float32 and img.min() >= 0 and img.max() <= 1
    with pytest.raises(ValueError, match="class_id 12 outside 0..11"):
        scenes.make_image(12, np.random.default_rng(0))
    with pytest.raises(ValueError, match="variation 'aligned'"):
        scenes.make_image(0, np.random.default_rng(0), 64, "aligned")
    with pytest.raises(ValueError, match="family 'faces': unknown embedded data family"):
        data_family("faces")


def test_families_keep_the_patterns_data():
    """The patterns family renders exactly what data.procedural did (its shipped models learned it)."""
    from mulosd_core.data.procedural import make_batch

    fam = FAMILIES["patterns"]
    assert torch.equal(fam.batch([0, 5, 11], seed=2, size=64), make_batch([0, 5, 11], 2, 64))
    assert torch.equal(fam.batch([0, 5], seed=2, size=64, variation="aligned"), make_batch([0, 5], 2, 64, "aligned"))
