"""A loaded model carries the sampling it was trained for (registry.load_model, ar.model_sampling).

Where it comes from, first found wins: the weights file's `mulosd_sampling` metadata, the family card
(family.json beside the weights file), LlamaGen's published sampling for the model's kind. generate and
generate_ar use it when the caller passes sampling=None.
"""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from mulosd_core.decode import generate_ar, model_sampling
from mulosd_core.decode import MethodConfig, generate
from mulosd_core.models.checkpoints import CheckpointError, save_safetensors
from mulosd_core.models.registry import (LLAMAGEN_SAMPLING, embedded_path, load_embedded, load_model,
                                         parse_sampling)
from mulosd_core.sampling import SamplingConfig
from mulosd_core.testing import tiny_gpt, tiny_model, tiny_vq

CARD_SAMPLING = {"cfg_scale": 1.5, "temperature": 0.9, "top_k": 5, "top_p": 0.95}


def write_pair(folder, model_type="c2i", meta_sampling=None, self_draft=None):
    """A tiny GPT (image size in its metadata) and VQ in `folder`; returns the two paths."""
    folder.mkdir(parents=True, exist_ok=True)
    gpt, vq = tiny_gpt(3, model_type=model_type), tiny_vq(4)
    meta = {"mulosd_config": {**gpt.config.to_dict(), "image_size": 16}}
    if meta_sampling is not None:
        meta["mulosd_sampling"] = meta_sampling
    if self_draft is not None:
        meta["mulosd_self_draft"] = self_draft
    save_safetensors(gpt.state_dict(), str(folder / "gpt.safetensors"), meta)
    save_safetensors(vq.state_dict(), str(folder / "vq.safetensors"), {"mulosd_config": vq.config.to_dict()})
    return str(folder / "gpt.safetensors"), str(folder / "vq.safetensors")


def test_embedded_family_card_gives_its_sampling():
    path = embedded_path("target")
    card = json.loads(open(path.replace("target.safetensors", "family.json")).read())
    for member in ("target", "drafter"):
        model = load_embedded(member)
        assert model.default_sampling == SamplingConfig(**card["sampling"])
        assert model.sampling_source.endswith("family.json")


@pytest.mark.parametrize("model_type", ["c2i", "t2i"])
def test_no_card_gives_llamagen_published_sampling(tmp_path, model_type):
    model = load_model(*write_pair(tmp_path, model_type))
    assert model.default_sampling == LLAMAGEN_SAMPLING[model_type]
    assert "LlamaGen" in model.sampling_source
    assert LLAMAGEN_SAMPLING["c2i"] == SamplingConfig(cfg_scale=4.0, temperature=1.0, top_k=2000, top_p=1.0)
    assert LLAMAGEN_SAMPLING["t2i"] == SamplingConfig(cfg_scale=7.5, temperature=1.0, top_k=1000, top_p=1.0)


def test_card_beside_the_weights_then_metadata_then_argument(tmp_path):
    gpt_path, vq_path = write_pair(tmp_path / "fam")
    (tmp_path / "fam" / "family.json").write_text(json.dumps({"preset": "x", "sampling": CARD_SAMPLING}))
    assert load_model(gpt_path, vq_path).default_sampling == SamplingConfig(**CARD_SAMPLING)
    # the card of another folder does not apply: the same files moved elsewhere have none
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    for name in ("gpt.safetensors", "vq.safetensors"):
        shutil.copy(tmp_path / "fam" / name, moved / name)
    assert load_model(str(moved / "gpt.safetensors"), vq_path).default_sampling == LLAMAGEN_SAMPLING["c2i"]
    # the file's own metadata wins over its folder's card; an argument wins over both
    meta_path, _ = write_pair(tmp_path / "meta", meta_sampling={"top_k": 7})
    (tmp_path / "meta" / "family.json").write_text(json.dumps({"sampling": CARD_SAMPLING}))
    model = load_model(meta_path, vq_path)
    assert model.default_sampling == SamplingConfig(top_k=7)   # missing fields take SamplingConfig's defaults
    assert "mulosd_sampling" in model.sampling_source
    given = SamplingConfig(cfg_scale=2.0)
    assert load_model(meta_path, vq_path, sampling=given).default_sampling is given
    # a card without sampling: the published defaults
    (tmp_path / "fam" / "family.json").write_text(json.dumps({"preset": "x"}))
    assert load_model(gpt_path, vq_path).default_sampling == LLAMAGEN_SAMPLING["c2i"]


@pytest.mark.parametrize("card, fragment", [
    ({"sampling": {"cfg": 1.0}}, "unknown sampling setting(s) ['cfg']"),
    ({"sampling": {"top_p": 0.0}}, "top_p must be in (0, 1]"),
    ({"sampling": [1.0, 2]}, "expected an object of sampling settings"),
])
def test_bad_card_is_refused_naming_it(tmp_path, card, fragment):
    gpt_path, vq_path = write_pair(tmp_path)
    (tmp_path / "family.json").write_text(json.dumps(card))
    with pytest.raises(CheckpointError) as e:
        load_model(gpt_path, vq_path)
    assert fragment in str(e.value) and "family.json" in str(e.value)


def test_unreadable_card_and_metadata(tmp_path):
    gpt_path, vq_path = write_pair(tmp_path / "a")
    (tmp_path / "a" / "family.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="family card is not readable JSON"):
        load_model(gpt_path, vq_path)
    bad_meta, _ = write_pair(tmp_path / "b", meta_sampling="{not json")
    with pytest.raises(CheckpointError, match="mulosd_sampling"):
        load_model(bad_meta, vq_path)
    with pytest.raises(CheckpointError, match="where-it-was"):
        parse_sampling({"temperature": -1}, "where-it-was")


def test_self_draft_metadata_is_read_and_checked(tmp_path):
    """How a checkpoint drafts for itself travels in its metadata (registry.SELF_DRAFT_META_KEY)."""
    from mulosd_core.models.registry import SELF_DRAFT_META_KEY
    gpt_path, vq_path = write_pair(tmp_path / "none")
    assert load_model(gpt_path, vq_path).self_draft is None
    assert SELF_DRAFT_META_KEY == "mulosd_self_draft"
    n_layer = tiny_gpt(3).config.n_layer
    for i, (value, want) in enumerate(((({"grid": 2, "layers": 1}), (2, 1)),
                                       ("{not json", "expected an object with whole numbers"),
                                       ({"grid": 2}, "KeyError"), ({"grid": 0, "layers": 1}, "grid must be >= 1"),
                                       ({"grid": 2, "layers": n_layer + 1}, f"layers 1..{n_layer}"))):
        gpt_path, vq_path = write_pair(tmp_path / str(i), self_draft=value)
        if isinstance(want, tuple):
            assert load_model(gpt_path, vq_path).self_draft == want
        else:
            with pytest.raises(CheckpointError, match=want) as e:
                load_model(gpt_path, vq_path)
            assert SELF_DRAFT_META_KEY in str(e.value)


def test_sampling_none_uses_the_models_own():
    model = tiny_model(grid=4, seed=1)
    assert model_sampling(model) == SamplingConfig()            # a model built in code has no card
    model.default_sampling = SamplingConfig(cfg_scale=1.0, top_k=3)
    assert model_sampling(model) is model.default_sampling
    given = SamplingConfig(cfg_scale=2.0)
    assert model_sampling(model, given) is given
    cond = torch.tensor([1, 2])
    own = generate_ar(model, cond, model.default_sampling, seed=5, decode=False).tokens
    assert torch.equal(generate_ar(model, cond, seed=5, decode=False).tokens, own)
    res = generate(model, cond, method=MethodConfig(method="ar"), seed=5, decode=False)
    assert torch.equal(res.tokens, own)
    assert not torch.equal(generate_ar(model, cond, SamplingConfig(), seed=5, decode=False).tokens, own)


def test_speculative_needs_a_drafter():
    target = tiny_model(grid=4, seed=1)
    with pytest.raises(ValueError, match="needs a drafter"):
        generate(target, torch.tensor([1]), method="speculative")
