"""MuLo-SD Sampler and AR Sampler end to end on tiny models (no server)."""
import json

import pytest
import torch

from mulosd_core.decode import engine as decode_engine


@pytest.fixture(scope="module")
def models(tiny_models):
    from mulosd_pack.nodes.loaders import load

    return {name: load(f"embedded/{name}.safetensors", "auto", 0, "cpu", "float32")
            for name in ("target", "drafter", "sd_drafter")}


def mulo_kw(**kw):
    base = dict(class_id=3, seed=0, cfg=2.0, temperature=1.0, top_k=0, top_p=1.0, parallel_window=2, rows_per_step=2,
                draft_length=4, batch_size=1)
    return base | kw


def ar_kw(**kw):
    base = dict(class_id=3, seed=0, cfg=2.0, temperature=1.0, top_k=0, top_p=1.0, batch_size=1, mode="ar",
                zipar_window=8, sjd_window=16)
    return base | kw


def test_mulo_sampler_outputs(models):
    import comfy.model_management
    from mulosd_pack.nodes.samplers import MuLoSDSampler

    images, maps, stats = MuLoSDSampler.execute(models["drafter"], models["target"], **mulo_kw(batch_size=2)).result
    assert images.shape == (2, 32, 32, 3) and images.dtype == torch.float32
    assert images.device == comfy.model_management.intermediate_device()
    assert 0 <= float(images.min()) and float(images.max()) <= 1
    assert maps.shape == (2, 32, 32, 3)
    s = json.loads(stats)
    assert s["tokens"] == 8 * 8 and s["grid"] == 8 and s["image_size"] == 32 and s["batch"] == 2
    assert s["target_calls"] > 0 and s["drafter_calls"] > 0 and s["ratio"] == 2
    assert s["accepted"] + s["resampled"] == s["tokens"] * s["batch"]
    assert (s["sampler"], s["target"], s["drafter"]) == ("MuLo-SD", "embedded/target.safetensors", "embedded/drafter.safetensors")
    assert s["config"]["verifier"]["rule"] == "mulo" and s["config"]["parallel_window"] == 2


def test_batch_element_b_uses_seed_plus_b(models):
    from mulosd_pack.nodes.samplers import MuLoSDSampler

    pair = MuLoSDSampler.execute(models["drafter"], models["target"], **mulo_kw(batch_size=2, seed=7)).result[0]
    single = MuLoSDSampler.execute(models["drafter"], models["target"], **mulo_kw(batch_size=1, seed=8)).result[0]
    assert torch.allclose(pair[1], single[0], atol=1e-5)


def test_connected_components_are_used(models):
    from mulosd_pack.nodes.components import MuLoSDLocalVerifier, MuLoSDUpsampler
    from mulosd_pack.nodes.samplers import MuLoSDSampler

    up = MuLoSDUpsampler.execute(kind="nearest", ratio=0, filter="bicubic").result[0]
    ver = MuLoSDLocalVerifier.execute(rule="mulo", tau=0.1, k_neighbours=1, expansion_radius=0, rejection="local",
                                      resampling="serial", lantern_delta=0.1).result[0]
    s = json.loads(MuLoSDSampler.execute(models["drafter"], models["target"], upsampler=up, verifier=ver, **mulo_kw()).result[2])
    assert s["config"]["upsampler"]["kind"] == "nearest"
    assert s["config"]["verifier"] | {} == ver.__dict__ and s["config"]["verifier"]["resampling"] == "serial"


@pytest.mark.parametrize("rule", ["exact", "lantern"])
def test_sd_and_lantern_with_the_same_resolution_drafter(models, rule):
    from mulosd_pack.nodes.components import MuLoSDLocalVerifier
    from mulosd_pack.nodes.samplers import MuLoSDSampler

    ver = MuLoSDLocalVerifier.execute(rule=rule, tau=0.3, k_neighbours=8, expansion_radius=1, rejection="raster",
                                      resampling="islands", lantern_delta=0.1).result[0]
    out = MuLoSDSampler.execute(models["sd_drafter"], models["target"], verifier=ver, **mulo_kw())
    s = json.loads(out.result[2])
    assert s["ratio"] == 1 and s["config"]["parallel_window"] == 0 and s["config"]["draft_len"] == 4
    assert s["tokens"] == 64 and s["target_calls"] > 0


def test_class_id_out_of_range_names_input_expected_given(models):
    from mulosd_pack.nodes.samplers import MuLoSDARSampler, MuLoSDSampler

    with pytest.raises(ValueError, match=r"class_id: expected 0\.\.9 .* got 12"):
        MuLoSDSampler.execute(models["drafter"], models["target"], **mulo_kw(class_id=12))
    with pytest.raises(ValueError, match=r"class_id: expected 0\.\.9"):
        MuLoSDARSampler.execute(models["target"], **ar_kw(class_id=10))


def test_pair_errors_before_any_model_runs(models, tiny_models, monkeypatch):
    from mulosd_pack.nodes import samplers
    from mulosd_pack.nodes.loaders import load

    monkeypatch.setattr(decode_engine, "_run", lambda *a, **k: pytest.fail("a model ran before validation"))
    other = load("embedded/drafter.safetensors", "vq_other.safetensors", 0, "cpu", "float32")
    with pytest.raises(ValueError, match="drafter/target: .*different codebooks"):
        samplers.MuLoSDSampler.execute(other, models["target"], **mulo_kw())
    with pytest.raises(ValueError, match="drafter/target: .*larger than the target"):
        samplers.MuLoSDSampler.execute(models["target"], models["drafter"], **mulo_kw())
    with pytest.raises(ValueError, match="drafter/target: .*'exact' needs"):
        ver = samplers.VerifierConfig(rule="exact", rejection="raster")
        samplers.MuLoSDSampler.execute(models["drafter"], models["target"], verifier=ver, **mulo_kw())
    # the shipped learned upsampler knows the embedded family's codebook, not these tiny models'
    from mulosd_pack.nodes.components import MuLoSDUpsampler
    up = MuLoSDUpsampler.execute(kind="learned", ratio=0, filter="bicubic").result[0]
    with pytest.raises(ValueError, match="drafter/target: learned upsampler .* was trained on codebook .* uses codebook"):
        samplers.MuLoSDSampler.execute(models["drafter"], models["target"], upsampler=up, **mulo_kw())


@pytest.mark.parametrize("mode", ["ar", "zipar", "sjd", "gsd"])
def test_ar_sampler_modes(models, mode):
    from mulosd_pack.nodes.samplers import MuLoSDARSampler

    images, maps, stats = MuLoSDARSampler.execute(models["target"], **ar_kw(mode=mode, batch_size=2)).result
    assert images.shape == (2, 32, 32, 3) and maps.shape == (2, 32, 32, 3)
    s = json.loads(stats)
    assert s["method"] == mode and s["tokens"] == 64 and s["target_calls"] > 0 and s["sampler"] == "AR"
    if mode == "ar":
        assert s["target_calls"] == 64


@pytest.fixture
def hook():
    import comfy.utils

    calls = []
    comfy.utils.set_progress_bar_global_hook(lambda value, total, preview, node_id=None: calls.append((value, total, preview)))
    yield calls
    comfy.utils.set_progress_bar_global_hook(None)


def test_progress_bar_and_preview(models, hook):
    from mulosd_pack.nodes.samplers import MuLoSDSampler

    MuLoSDSampler.execute(models["drafter"], models["target"], **mulo_kw())
    values = [v for v, _, _ in hook]
    assert values == sorted(values) and values[-1] == 64 and all(t == 64 for _, t, _ in hook)
    previews = [p for _, _, p in hook if p is not None]
    assert previews and previews[0][0] == "JPEG" and previews[0][1].size == (32, 32)


def test_interrupt_stops_within_one_step(models, hook):
    import comfy.model_management
    import comfy.utils
    from mulosd_pack.nodes.samplers import MuLoSDARSampler

    def interrupt_at_first(value, total, preview, node_id=None):
        hook.append(value)
        comfy.model_management.interrupt_current_processing(True)

    comfy.utils.set_progress_bar_global_hook(interrupt_at_first)
    try:
        with pytest.raises(comfy.model_management.InterruptProcessingException):
            MuLoSDARSampler.execute(models["target"], **ar_kw())
    finally:
        comfy.model_management.interrupt_current_processing(False)
    assert len(hook) == 1  # one step reported, the next one raised
    # the next run is not affected
    comfy.utils.set_progress_bar_global_hook(None)
    assert MuLoSDARSampler.execute(models["target"], **ar_kw()).result[0].shape == (1, 32, 32, 3)


def test_schedule_widgets_at_minus_one_take_the_resolved_settings(models):
    """-1 (the widgets' default) is the pair's shipped setting from presets.resolve, for a low-resolution pair
    and for the target drafting for itself (no hand-set window), and the statistics show what was used."""
    from mulosd_core.api import resolve
    from mulosd_pack.nodes.loaders import MuLoSDSelfDrafter
    from mulosd_pack.nodes.samplers import AUTO, MuLoSDSampler

    target = models["target"]
    own = MuLoSDSelfDrafter.execute(target, ratio=2).result[0]
    for drafter in (models["drafter"], own):
        kw = mulo_kw(parallel_window=AUTO, rows_per_step=AUTO, draft_length=AUTO, cfg=1.0)
        s = json.loads(MuLoSDSampler.execute(drafter, target, **kw).result[2])
        want = resolve(target.model, drafter.model)
        assert (s["config"]["parallel_window"], s["config"]["rows_per_step"], s["config"]["draft_len"]) == (
            want.parallel_window, want.rows_per_step, want.draft_len)
        assert s["config"]["verifier"]["tau"] == want.verifier.tau
