"""evaluate reads the family card through the one reader (registry.family_card), with no fallbacks of its own."""
import json

import pytest

from mulosd_core.models.checkpoints import CheckpointError
from mulosd_core.models.registry import card_family, embedded_dir, family_card
from mulosd_core.train.evaluate import evaluate


def test_family_card_is_read_by_folder_and_beside_a_weights_file(tmp_path):
    assert family_card(str(tmp_path)) == ({}, str(tmp_path / "family.json"))
    (tmp_path / "family.json").write_text(json.dumps({"data_family": "patterns", "sampling": {"top_k": 2}}))
    card, where = family_card(str(tmp_path))
    assert card["data_family"] == "patterns" and where == str(tmp_path / "family.json")
    assert card_family(str(tmp_path / "target.safetensors")) == "patterns"   # the same card, from a file in the folder
    (tmp_path / "family.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="family card is not readable JSON"):
        family_card(str(tmp_path))


def test_evaluate_needs_a_card_naming_data_family_and_sampling(tmp_path):
    with pytest.raises(ValueError, match="naming data_family and sampling"):
        evaluate(str(tmp_path), samples=2)
    (tmp_path / "family.json").write_text(json.dumps({"data_family": "patterns"}))
    with pytest.raises(ValueError, match=r"family.json naming sampling \("):
        evaluate(str(tmp_path), samples=2)


def test_shipped_cards_name_both():
    for family in ("scenes", "patterns"):
        card, _ = family_card(embedded_dir(family))
        assert card["data_family"] == family and "sampling" in card


def test_self_target_is_evaluated_at_both_grids_when_the_family_has_one(tmp_path):
    import numpy as np
    import torch

    from mulosd_core.models.checkpoints import save_safetensors
    from mulosd_core.sampling import SamplingConfig
    from mulosd_core.testing import tiny_gpt, tiny_model, tiny_vq
    from mulosd_core.train.classifier import PatternClassifier
    from mulosd_core.train.evaluate import self_target_quality

    vq = tiny_vq(0, 64)
    target, drafter = tiny_model(8, 1, vq=vq), tiny_model(4, 2, vq=vq)
    clf, labels, sampling = PatternClassifier().eval(), torch.arange(4) % 10, SamplingConfig(temperature=1.0)
    real = np.random.default_rng(0).normal(size=(8, clf.head.in_features))
    args = (target, drafter, clf, labels, sampling, real)
    assert self_target_quality(str(tmp_path), *args) == {}          # a family without one
    gpt = tiny_gpt(3, vocab_size=64, num_classes=10)
    save_safetensors(gpt.state_dict(), str(tmp_path / "self_target.safetensors"),
                     {"mulosd_config": {**gpt.config.to_dict(), "image_size": 32}, "kind": "gpt"})
    out = self_target_quality(str(tmp_path), *args)
    assert (out["self_target_ar"]["grid"], out["self_target_low_ar"]["grid"]) == (8, 4)
    assert 0.0 <= out["self_target_low_ar_accuracy"] <= 1.0 and np.isfinite(out["self_target_ar"]["fd"])
    assert out["self_target_low_ar"]["layers"] == gpt.config.n_layer
    # a checkpoint trained to exit early at the low grid is evaluated there as it drafts
    from mulosd_core.models.registry import SELF_DRAFT_META_KEY
    save_safetensors(gpt.state_dict(), str(tmp_path / "self_target.safetensors"),
                     {"mulosd_config": {**gpt.config.to_dict(), "image_size": 32}, "kind": "gpt",
                      SELF_DRAFT_META_KEY: {"grid": 4, "layers": 1}})
    out = self_target_quality(str(tmp_path), *args)
    assert (out["self_target_low_ar"]["layers"], out["self_target_ar"]["layers"]) == (1, gpt.config.n_layer)
