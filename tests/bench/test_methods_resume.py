"""bench.methods.run_methods with `resume`: an interrupted run continues after its last saved batch and ends
with the records an uninterrupted run has; a saved run of other settings is not continued."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from bench import compare as C
from bench import methods as M
from bench.models import load_models
from mulosd_core.presets import method_presets


@pytest.fixture(scope="module")
def setup():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    models = load_models("tiny", "cpu", torch.float32, tiny_grid=4)
    presets = method_presets(models.target.family)
    yield models, {n: presets[n] for n in ("ar", "zipar")}
    torch.set_num_threads(threads)


def _run(models, methods, path, samples=3):
    return M.run_methods(models, methods, samples, warmup=0, progress=False, resume=str(path))


def test_an_interrupted_run_continues_after_its_last_saved_batch(setup, tmp_path, monkeypatch):
    models, methods = setup
    path = tmp_path / "run.records.pt"
    whole = M.run_methods(models, methods, 3, warmup=0, progress=False)
    monkeypatch.setattr(M, "RESUME_EVERY_S", -1.0)           # save before every batch
    calls = {"n": 0}
    real = M.generate

    def interrupted(*a, **k):                               # the third batch's second method fails
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(M, "generate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run(models, methods, path)
    raw, done = M.load_records(str(path), M.resume_key(methods, 3, 1, models.sampling))
    assert done == 2 and len(raw["ar"]["wall"]) == 2 and isinstance(raw["ar"]["features"][0], np.ndarray)
    monkeypatch.setattr(M, "generate", real)
    again = _run(models, methods, path)
    for n in methods:
        assert again[n]["resumed_at"] == [2] and whole[n]["resumed_at"] == []
        assert len(again[n]["wall"]) == 3
        assert torch.equal(torch.cat(again[n]["all_tokens"]), torch.cat(whole[n]["all_tokens"]))
        assert np.allclose(np.concatenate(again[n]["features"]), np.concatenate(whole[n]["features"]))
        assert again[n]["classes"] == whole[n]["classes"]


def test_a_saved_run_of_other_settings_starts_over(setup, tmp_path, monkeypatch):
    models, methods = setup
    path = tmp_path / "run.records.pt"
    monkeypatch.setattr(M, "RESUME_EVERY_S", -1.0)
    _run(models, methods, path, samples=2)
    assert M.load_records(str(path), M.resume_key(methods, 3, 1, models.sampling)) is None
    got = _run(models, methods, path, samples=3)
    assert [len(got[n]["wall"]) for n in methods] == [3, 3] and got["ar"]["resumed_at"] == []


def test_the_recorded_command_leaves_the_records_file_out():
    assert C.without_resume(["--samples", "4", "--resume", "x.pt", "--tag", "t"]) == ["--samples", "4", "--tag", "t"]
    assert C.without_resume(["--resume=x.pt", "--quick"]) == ["--quick"]
