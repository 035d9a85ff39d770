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
