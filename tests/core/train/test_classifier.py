"""Classifier smoke tests: shapes, a 2-step run that writes a loadable file, resume."""
import json

import pytest
import torch

from mulosd_core.data import NUM_CLASSES, make_batch
from mulosd_core.train import classifier
from mulosd_core.train.classifier import (
    PatternClassifier,
    TrainPreset,
    load_classifier,
    train_classifier,
)



def _tiny_preset(**kw) -> TrainPreset:
    return TrainPreset(batch_size=8, warmup=1, eval_per_class=1, **kw)


def test_forward_and_features_any_size():
    model = PatternClassifier().eval()
    for size in (32, 48, 64):
        x = make_batch([0, 1, 2], seed=0, size=size)
        assert model(x).shape == (3, NUM_CLASSES)
        feats = model.features(x)
        assert feats.shape == (3, model.feature_size) and 64 <= model.feature_size <= 256


def test_two_step_run_writes_loadable_weights_and_card(tmp_path):
    out = tmp_path / "classifier.safetensors"
    model, metrics = train_classifier(steps=2, seed=3, log_every=1, out_path=out, preset=_tiny_preset())
    assert out.exists() and metrics["steps"] == 2
    card = json.loads(out.with_suffix(".json").read_text())
    assert card["data_seed"] == 3 and card["metrics"]["steps"] == 2
    assert "train_classifier(" in card["reproduce"] and len(card["class_names"]) == NUM_CLASSES
    assert not (tmp_path / "classifier.safetensors.resume.pt").exists()
    loaded = load_classifier(out)
    x = make_batch(list(range(4)), seed=1)
    with torch.no_grad():
        assert torch.allclose(loaded(x), model.eval()(x), atol=1e-5)


def test_resume_matches_uninterrupted_run(tmp_path, monkeypatch):
    preset = _tiny_preset(checkpoint_every=2)
    ref, _ = train_classifier(steps=4, seed=5, log_every=0, preset=preset)

    out = tmp_path / "c.safetensors"
    real_batch = classifier._training_batch

    def crash_at_step_3(data, preset, step, seed, family):
        if step == 3:
            raise KeyboardInterrupt
        return real_batch(data, preset, step, seed, family)

    monkeypatch.setattr(classifier, "_training_batch", crash_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        train_classifier(steps=4, seed=5, log_every=0, out_path=out, preset=preset)
    resume_file = tmp_path / "c.safetensors.resume.pt"
    assert torch.load(resume_file, weights_only=True)["step"] == 2

    monkeypatch.setattr(classifier, "_training_batch", real_batch)
    resumed, _ = train_classifier(steps=4, seed=5, log_every=0, out_path=out, preset=preset)
    assert not resume_file.exists()  # removed once the run finishes
    for (name, a), b in zip(ref.state_dict().items(), resumed.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), atol=1e-6), name
