"""Load Janus-Pro, Janus Prompt and the Janus-Pro path of both samplers, on tiny random Janus folders.

The folders are built offline exactly as tests/core/models/test_janus.py builds its models
(its tiny_hf / tiny_processor helpers, saved with save_pretrained) and placed in a temporary
mulosd model folder as mulosd/janus/<name>, where a user's Janus-Pro-7B would go. The drafter
shares the target's VQ and has a perturbed language model, so it agrees often, not always.
"""
import copy
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from mulosd_core.decode import engine as decode_engine

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "JanusForConditionalGeneration"):
    pytest.skip("transformers without Janus support", allow_module_level=True)

TARGET, DRAFTER = "janus/janus-tiny-target", "janus/janus-tiny-drafter"
PROMPT = "a red cat sits on the mat"
SIZE = 8   # the tiny Janus: 4 x 4 tokens, VQ downsampling 2


def core_janus_tests():
    path = Path(__file__).resolve().parents[1] / "core" / "models" / "test_janus.py"
    spec = importlib.util.spec_from_file_location("core_test_janus_helpers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def folders(pack, tiny_models, tmp_path_factory):
    """<tmp>/janus/janus-tiny-{target,drafter} (and a non-Janus HF folder), registered as a mulosd folder."""
    import folder_paths
    from mulosd_pack.nodes.loaders import FOLDER

    helpers = core_janus_tests()
    base = tmp_path_factory.mktemp("mulosd-janus")
    processor = helpers.tiny_processor()
    target = helpers.tiny_hf(0)
    drafter = copy.deepcopy(target)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in drafter.model.language_model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g))
    for name, hf in ((TARGET, target), (DRAFTER, drafter)):
        hf.save_pretrained(str(base / name))
        processor.save_pretrained(str(base / name))
    (base / "janus" / "not-janus").mkdir()
    (base / "janus" / "not-janus" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    folder_paths.add_model_folder_path(FOLDER, str(base))
    yield {"base": base, "V": helpers.V, "grid": helpers.GRID}
    folder_paths.folder_names_and_paths[FOLDER][0].remove(str(base))


@pytest.fixture(scope="module")
def janus(folders):
    from mulosd_pack.nodes import janus
    return janus


@pytest.fixture(scope="module")
def models(janus):
    return {role: janus.MuLoSDLoadJanus.execute(model_name=name, device="cpu", dtype="auto").result[0]
            for role, name in (("target", TARGET), ("drafter", DRAFTER))}


@pytest.fixture(scope="module")
def prompt(janus):
    return janus.MuLoSDJanusPrompt.execute(prompt=PROMPT).result[0]


def mulo_kw(**kw):
    return dict(class_id=0, seed=0, cfg=3.0, temperature=1.0, top_k=0, top_p=1.0, parallel_window=0, rows_per_step=1,
                draft_length=4, batch_size=1) | kw


def ar_kw(**kw):
    return dict(class_id=0, seed=0, cfg=3.0, temperature=1.0, top_k=0, top_p=1.0, batch_size=1, mode="ar",
                zipar_window=2, sjd_window=4) | kw


def verifier(rule, rejection):
    from mulosd_pack.nodes.components import MuLoSDLocalVerifier

    return MuLoSDLocalVerifier.execute(rule=rule, tau=0.3, k_neighbours=4, expansion_radius=1, rejection=rejection,
                                       resampling="islands", lantern_delta=0.1).result[0]


# ------------------------------------------------------------------------------ the loader
def test_lists_janus_folders_only(janus, folders):
    from mulosd_pack.nodes import loaders

    listed = janus.janus_folders()
    assert listed[TARGET] == str(folders["base"] / TARGET) and DRAFTER in listed
    assert "janus/not-janus" not in listed and "tiny-flan-t5" not in listed  # other HF folders are not Janus
    options = {i.id: i for i in janus.MuLoSDLoadJanus.GET_SCHEMA().inputs}["model_name"].options
    assert {TARGET, DRAFTER} <= set(options)
    assert not [f for f in loaders.model_files() if f.startswith("janus/")]  # Load Target does not list its weights


def test_loads_the_folder_and_describes_it(janus, models):
    from mulosd_core.models.janus import JanusModel

    out = janus.MuLoSDLoadJanus.execute(model_name=TARGET, device="cpu", dtype="auto")
    handle = out.result[0]
    m = handle.model
    again = janus.MuLoSDLoadJanus.execute(model_name=TARGET, device="cpu", dtype="float32").result[0]
    assert isinstance(m, JanusModel) and again.model is m  # same settings (auto = float32 on the CPU): cached
    assert (m.model_type, m.grid, m.image_size, m.name, m.dtype) == ("janus", 4, SIZE, TARGET, torch.float32)
    assert handle.name == TARGET and handle.path.endswith("janus-tiny-target")
    assert handle.description in out.ui["text"]
    for part in (f"{TARGET}: Janus-Pro text-to-image", "grid 4x4", f"{SIZE} px", "prompts of up to 256 tokens",
                 "codebook 32", "float32 on cpu"):
        assert part in handle.description, (part, handle.description)
    assert models["drafter"].model.codebook_id() == m.codebook_id()


def test_bfloat16_load_runs_and_returns_float32_images(janus, models, prompt):
    from mulosd_pack.nodes.samplers import MuLoSDARSampler

    handle = janus.MuLoSDLoadJanus.execute(model_name=TARGET, device="cpu", dtype="bfloat16").result[0]
    assert handle.model.dtype == torch.bfloat16 and handle.model is not models["target"].model
    assert "bfloat16 on cpu" in handle.description
    images = MuLoSDARSampler.execute(handle, conditioning=prompt, **ar_kw()).result[0]
    assert images.dtype == torch.float32 and images.shape == (1, SIZE, SIZE, 3)


def test_loader_errors_name_the_input(janus):
    assert janus.MuLoSDLoadJanus.validate_inputs(model_name=TARGET) is True
    msg = janus.MuLoSDLoadJanus.validate_inputs(model_name="janus/Janus-Pro-7B")
    assert msg.startswith("model_name: expected one of the 2 Janus-Pro folders") and "got 'janus/Janus-Pro-7B'" in msg
    with pytest.raises(ValueError, match=r"model_name: .*got 'janus/nowhere'"):
        janus.MuLoSDLoadJanus.execute(model_name="janus/nowhere", device="cpu", dtype="auto")
    with pytest.raises(ValueError, match="dtype: expected one of"):
        janus.MuLoSDLoadJanus.execute(model_name=TARGET, device="cpu", dtype="int8")
    with pytest.raises(ValueError, match="weights: expected one of .* got 'gpu'"):
        janus.MuLoSDLoadJanus.execute(model_name=TARGET, device="cpu", dtype="auto", weights="gpu")


def test_streamed_janus_target_through_the_loader(janus, models, prompt, monkeypatch):
    """weights = 'stream from cpu' with the CPU standing in for the GPU: the language model's layers
    wait behind hooks, the loader says so, and greedy samples are unchanged."""
    from mulosd_core import offload
    from mulosd_pack.nodes.samplers import MuLoSDARSampler

    real = offload.choose_weights
    monkeypatch.setattr(offload, "choose_weights",
                        lambda mode, dev, b, free: "stream" if mode == "stream from cpu" else real(mode, dev, b, free))
    out = janus.MuLoSDLoadJanus.execute(model_name=TARGET, device="cpu", dtype="float32", weights="stream from cpu")
    h = out.result[0]
    assert offload.is_streamed(h.model) and h.model is not models["target"].model
    assert "stream from the cpu" in h.description
    kw = ar_kw() | {"temperature": 0.0}
    a = MuLoSDARSampler.execute(models["target"], conditioning=prompt, **kw).result[0]
    b = MuLoSDARSampler.execute(h, conditioning=prompt, **kw).result[0]
    assert torch.equal(a, b)


# ------------------------------------------------------------------------------ the prompt
def test_prompt_node_and_empty_prompt(janus, prompt):
    from mulosd_pack.nodes.types import JanusPrompt

    assert prompt == JanusPrompt(PROMPT)
    assert janus.MuLoSDJanusPrompt.validate_inputs(prompt=PROMPT) is True
    for empty in ("", "  \n"):
        msg = janus.MuLoSDJanusPrompt.validate_inputs(prompt=empty)
        assert msg.startswith("prompt: expected a prompt for Janus-Pro") and msg.endswith(f"got {empty!r}")
        with pytest.raises(ValueError, match=r"prompt: expected a prompt for Janus-Pro .*got "):
            janus.MuLoSDJanusPrompt.execute(prompt=empty)


# ------------------------------------------------------------------------------ the samplers
@pytest.mark.parametrize("mode", ["ar", "zipar", "sjd", "gsd"])
def test_ar_sampler_with_a_janus_target(models, prompt, mode):
    from mulosd_pack.nodes.samplers import MuLoSDARSampler

    images, maps, stats = MuLoSDARSampler.execute(models["target"], conditioning=prompt,
                                                  **ar_kw(mode=mode, batch_size=2)).result
    assert images.shape == (2, SIZE, SIZE, 3) and maps.shape == (2, SIZE, SIZE, 3)
    assert 0 <= float(images.min()) and float(images.max()) <= 1
    s = json.loads(stats)
    assert (s["method"], s["tokens"], s["grid"], s["image_size"], s["batch"]) == (mode, 16, 4, SIZE, 2)
    assert s["prompt"] == PROMPT and s["class_id"] is None and s["target"] == TARGET
    if mode == "ar":
        assert s["target_calls"] == 16


@pytest.mark.parametrize("rule, rejection", [("exact", "raster"), ("lantern", "raster"), ("mulo", "local")])
def test_mulo_sampler_janus_drafter_and_target(models, prompt, rule, rejection):
    from mulosd_pack.nodes.samplers import MuLoSDSampler

    out = MuLoSDSampler.execute(models["drafter"], models["target"], verifier=verifier(rule, rejection),
                                conditioning=prompt, **mulo_kw(batch_size=2, parallel_window=2))
    images, maps, stats = out.result
    assert images.shape == (2, SIZE, SIZE, 3) and maps.shape == (2, SIZE, SIZE, 3)
    s = json.loads(stats)
    assert s["ratio"] == 1 and s["config"]["parallel_window"] == 0 and s["config"]["draft_len"] == 4
    assert (s["target"], s["drafter"], s["prompt"]) == (TARGET, DRAFTER, PROMPT)
    assert s["config"]["verifier"]["rule"] == rule and s["drafter_calls"] > 0 and s["target_calls"] > 0
    assert s["accepted"] + s["resampled"] == s["tokens"] * s["batch"] == 32


def test_greedy_speculative_equals_greedy_ar(models, prompt):
    """Exact rule + raster rejection with greedy sampling reproduces the AR sampler token for token (pixel for pixel)."""
    from mulosd_pack.nodes.samplers import MuLoSDARSampler, MuLoSDSampler

    ar = MuLoSDARSampler.execute(models["target"], conditioning=prompt, **ar_kw(temperature=0.0)).result
    spec = MuLoSDSampler.execute(models["drafter"], models["target"], verifier=verifier("exact", "raster"),
                                 conditioning=prompt, **mulo_kw(temperature=0.0)).result
    assert torch.equal(spec[0], ar[0])
    s = json.loads(spec[2])
    assert 0 < s["accepted"] and s["target_calls"] < json.loads(ar[2])["target_calls"]


# ------------------------------------------------------------------------------ refusals
@pytest.fixture
def no_run(monkeypatch):
    from mulosd_pack.nodes import samplers

    monkeypatch.setattr(decode_engine, "_run", lambda *a, **k: pytest.fail("a model ran before validation"))
    return samplers


def test_prompt_errors_before_any_model_runs(models, no_run):
    from mulosd_pack.nodes.types import Conditioning, JanusPrompt

    samplers, target, drafter = no_run, models["target"], models["drafter"]
    with pytest.raises(ValueError, match=r"prompt: expected a prompt for Janus-Pro .*got ''"):
        samplers.MuLoSDARSampler.execute(target, conditioning=JanusPrompt(""), **ar_kw())
    with pytest.raises(ValueError, match=r"prompt: expected a prompt for Janus-Pro .*got ' '"):
        samplers.MuLoSDSampler.execute(drafter, target, conditioning=JanusPrompt(" "), **mulo_kw())
    with pytest.raises(ValueError, match=rf"conditioning: expected a prompt for {TARGET}, a Janus-Pro .*got nothing"):
        samplers.MuLoSDARSampler.execute(target, **ar_kw())
    long = JanusPrompt(" ".join(["cat"] * 300))
    with pytest.raises(ValueError, match=rf"prompt: expected at most 256 tokens .* {TARGET}, got 30\d"):
        samplers.MuLoSDARSampler.execute(target, conditioning=long, **ar_kw())
    t5 = Conditioning(torch.zeros(1, 120, 24), torch.ones(1, 120, dtype=torch.long), PROMPT, "tiny-flan-t5")
    with pytest.raises(ValueError, match=r"conditioning: expected a prompt from a Janus Prompt node .*got T5 caption "
                                         r"features of 'a red cat sits on the mat' from text encoder tiny-flan-t5"):
        samplers.MuLoSDSampler.execute(drafter, target, conditioning=t5, **mulo_kw())


def test_janus_and_llamagen_pairs_are_refused_naming_both(models, prompt, tiny_models, no_run):
    from mulosd_pack.nodes.loaders import load

    samplers, target, drafter = no_run, models["target"], models["drafter"]
    for name in ("drafter", "target"):  # grid 4 (as the tiny Janus) and grid 8 (larger): the family is named first
        llamagen = load(f"embedded/{name}.safetensors", "auto", 0, "cpu", "float32")
        with pytest.raises(ValueError) as e:
            samplers.MuLoSDSampler.execute(llamagen, target, conditioning=prompt, **mulo_kw())
        msg = str(e.value)
        assert msg.startswith("drafter/target: ") and f"'embedded/{name}'" in msg and f"'{TARGET}'" in msg, msg
        assert "different codebooks" in msg
    llamagen_target = load("embedded/target.safetensors", "auto", 0, "cpu", "float32")
    with pytest.raises(ValueError, match=r"drafter/target: .*'janus/janus-tiny-drafter'.*'embedded/target'"):
        samplers.MuLoSDSampler.execute(drafter, llamagen_target, **mulo_kw(class_id=1))
    with pytest.raises(ValueError, match=r"conditioning: expected nothing for embedded/target\.safetensors.* got the "
                                         r"caption 'a red cat sits on the mat'"):
        samplers.MuLoSDARSampler.execute(llamagen_target, conditioning=prompt, **ar_kw())
