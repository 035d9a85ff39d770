"""Load Text Encoder, MuLo-SD Text Prompt and the t2i path of both samplers, on a tiny T5 and tiny t2i GPTs."""
import json
import shutil

import pytest
import torch

from mulosd_core.decode import engine as decode_engine

PROMPT = "a red cat sits on the mat"


@pytest.fixture(scope="module")
def text(tiny_t2i):
    from mulosd_pack.nodes import text
    return text


@pytest.fixture(scope="module")
def encoder(text):
    return text.MuLoSDLoadTextEncoder.execute(encoder_name="tiny-flan-t5", device="cpu", dtype="float32",
                                              offload=True).result[0]


@pytest.fixture(scope="module")
def conditioning(text, encoder):
    return text.MuLoSDTextPrompt.execute(text_encoder=encoder, prompt=PROMPT).result[0]


@pytest.fixture(scope="module")
def t2i(tiny_t2i):
    from mulosd_pack.nodes.loaders import load

    return {role: load(f"t2i_tiny_{role}.safetensors", "embedded/vq.safetensors", 0, "cpu", "float32")
            for role in ("target", "drafter")}


def mulo_kw(**kw):
    return dict(class_id=0, seed=0, cfg=4.0, temperature=1.0, top_k=0, top_p=1.0, parallel_window=2, rows_per_step=2,
                draft_length=4, batch_size=1) | kw


def ar_kw(**kw):
    return dict(class_id=0, seed=0, cfg=4.0, temperature=1.0, top_k=0, top_p=1.0, batch_size=1, mode="ar",
                zipar_window=8, sjd_window=16) | kw


# ------------------------------------------------------------------------- the encoder
def test_lists_t5_folders_from_text_encoders_and_mulosd(text, tiny_t2i, tmp_path):
    import folder_paths
    from mulosd_pack.nodes import loaders

    nested = tmp_path / "t5-ckpt" / "flan-t5-xl"          # upstream's pretrained_models/t5-ckpt/flan-t5-xl layout
    shutil.copytree(tiny_t2i / "tiny-flan-t5", nested)
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert"}))
    folder_paths.add_model_folder_path("text_encoders", str(tmp_path))
    try:
        folders = text.encoder_folders()
        assert folders["tiny-flan-t5"] == str(tiny_t2i / "tiny-flan-t5")
        assert folders["t5-ckpt/flan-t5-xl"] == str(nested)
        assert "bert" not in folders
        options = text.MuLoSDLoadTextEncoder.GET_SCHEMA().inputs[0].options
        assert {"tiny-flan-t5", "t5-ckpt/flan-t5-xl"} <= set(options)
    finally:
        folder_paths.folder_names_and_paths["text_encoders"][0].remove(str(tmp_path))
    # the T5 weights in the mulosd folder are not offered as GPT or VQ files
    assert not [f for f in loaders.model_files() if f.startswith("tiny-flan-t5/")]
    assert "t2i_tiny_target.safetensors" in loaders.gpt_files()


def test_load_text_encoder(text, encoder):
    out = text.MuLoSDLoadTextEncoder.execute(encoder_name="tiny-flan-t5", device="cpu", dtype="float32", offload=True)
    handle = out.result[0]
    assert handle.encoder is encoder.encoder  # cached
    assert handle.encoder.dim == 24 and handle.encoder.max_length == 120
    assert next(handle.encoder.model.parameters()).device.type == "cpu"
    assert handle.description in out.ui["text"] and "24-wide" in handle.description
    assert text.MuLoSDLoadTextEncoder.validate_inputs(encoder_name="tiny-flan-t5") is True
    msg = text.MuLoSDLoadTextEncoder.validate_inputs(encoder_name="flan-t5-xl")
    assert msg.startswith("encoder_name: expected one of") and "'flan-t5-xl'" in msg
    with pytest.raises(ValueError, match="encoder_name: .*got 'flan-t5-xl'"):
        text.MuLoSDLoadTextEncoder.execute(encoder_name="flan-t5-xl", device="cpu", dtype="float32", offload=True)
    with pytest.raises(ValueError, match="dtype: "):
        text.MuLoSDLoadTextEncoder.execute(encoder_name="tiny-flan-t5", device="cpu", dtype="int8", offload=True)
    assert text.resolve_dtype("auto", torch.device("cpu")) == torch.float32


def test_text_prompt_gives_left_padded_caption_features(text, encoder, conditioning):
    import comfy.model_management

    assert conditioning.features.shape == (1, 120, 24) and conditioning.mask.shape == (1, 120)
    assert conditioning.features.device == comfy.model_management.intermediate_device()
    assert conditioning.tokens == 8  # seven words + </s>
    assert conditioning.mask[0, -8:].all() and not conditioning.mask[0, :-8].any()
    assert conditioning.prompt == PROMPT and conditioning.encoder == "tiny-flan-t5"
    feats, mask = conditioning.batch(3)
    assert feats.shape == (3, 120, 24) and torch.equal(feats[2], conditioning.features[0]) and mask.shape == (3, 120)
    out = text.MuLoSDTextPrompt.execute(text_encoder=encoder, prompt="  A RED cat\nsits on the MAT ")
    assert torch.equal(out.result[0].features, conditioning.features)  # cleaned as upstream: lower-case, whitespace
    assert out.ui["text"] == ["8 of 120 caption tokens"]


@pytest.mark.parametrize("prompt", ["", "   \n\t "])
def test_empty_prompt_is_refused_before_the_encoder_runs(text, encoder, prompt, monkeypatch):
    msg = text.MuLoSDTextPrompt.validate_inputs(prompt=prompt)
    assert msg.startswith("prompt: expected a caption") and f"got {prompt!r}" in msg
    monkeypatch.setattr(encoder.encoder, "encode", lambda *a: pytest.fail("the encoder ran"))
    with pytest.raises(ValueError, match=r"prompt: expected a caption .*got"):
        text.MuLoSDTextPrompt.execute(text_encoder=encoder, prompt=prompt)
    assert text.MuLoSDTextPrompt.validate_inputs(prompt=PROMPT) is True
    assert text.MuLoSDTextPrompt.validate_inputs() is True  # prompt linked from another node: checked when it runs


@pytest.mark.parametrize("offload", [True, False])
def test_offload_moves_the_encoder_back_to_the_cpu(text, encoder, offload, monkeypatch):
    """The compute device is pretend-CUDA here: record where the encoder is sent (weights really stay on the CPU)."""
    from mulosd_pack.nodes.types import TextEncoderHandle

    enc = encoder.encoder
    sent = []
    real_to = type(enc).to

    def to(self, device=None):
        sent.append(torch.device(device))
        return real_to(self, "cpu")

    monkeypatch.setattr(type(enc), "to", to)
    handle = TextEncoderHandle(enc, encoder.name, encoder.path, torch.device("cuda"), offload)
    cond = text.MuLoSDTextPrompt.execute(text_encoder=handle, prompt=PROMPT).result[0]
    assert cond.features.shape == (1, 120, 24)
    assert sent == ([torch.device("cuda"), torch.device("cpu")] if offload else [torch.device("cuda")])
    assert next(enc.model.parameters()).device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_offload_on_a_real_gpu(text):
    handle = text.MuLoSDLoadTextEncoder.execute(encoder_name="tiny-flan-t5", device="cuda", dtype="float32",
                                                offload=True).result[0]
    assert next(handle.encoder.model.parameters()).device.type == "cpu"
    text.MuLoSDTextPrompt.execute(text_encoder=handle, prompt=PROMPT)
    assert next(handle.encoder.model.parameters()).device.type == "cpu"
    kept = text.MuLoSDLoadTextEncoder.execute(encoder_name="tiny-flan-t5", device="cuda", dtype="float32",
                                              offload=False).result[0]
    text.MuLoSDTextPrompt.execute(text_encoder=kept, prompt=PROMPT)
    assert next(kept.encoder.model.parameters()).device.type == "cuda"


# ------------------------------------------------------------------------- t2i sampling
def test_loader_describes_a_t2i_model(t2i):
    d = t2i["target"].description
    assert "text-to-image (t2i)" in d and "grid 8x8" in d and "120 caption tokens of width 24" in d
    assert "VQ embedded/vq.safetensors" in d and "4x downsampling" in d


def test_mulo_sampler_t2i(t2i, conditioning):
    from mulosd_pack.nodes.samplers import MuLoSDSampler

    images, maps, stats = MuLoSDSampler.execute(t2i["drafter"], t2i["target"], conditioning=conditioning,
                                                **mulo_kw(batch_size=2)).result
    assert images.shape == (2, 32, 32, 3) and maps.shape == (2, 32, 32, 3)
    assert 0 <= float(images.min()) and float(images.max()) <= 1
    s = json.loads(stats)
    assert s["prompt"] == PROMPT and s["class_id"] is None and s["ratio"] == 2 and s["batch"] == 2
    assert s["target_calls"] > 0 and s["drafter_calls"] > 0
    assert s["accepted"] + s["resampled"] == s["tokens"] * s["batch"]


@pytest.mark.parametrize("mode", ["ar", "zipar", "sjd", "gsd"])
def test_ar_sampler_t2i(t2i, conditioning, mode):
    from mulosd_pack.nodes.samplers import MuLoSDARSampler

    images, maps, stats = MuLoSDARSampler.execute(t2i["target"], conditioning=conditioning,
                                                  **ar_kw(mode=mode, batch_size=2)).result
    assert images.shape == (2, 32, 32, 3) and maps.shape == (2, 32, 32, 3)
    s = json.loads(stats)
    assert s["method"] == mode and s["prompt"] == PROMPT and s["tokens"] == 64 and s["batch"] == 2
    if mode == "ar":
        assert s["target_calls"] == 64


def test_batch_repeats_the_prompt_and_the_prompt_matters(text, encoder, t2i, conditioning):
    from mulosd_pack.nodes.samplers import MuLoSDARSampler

    pair = MuLoSDARSampler.execute(t2i["target"], conditioning=conditioning, **ar_kw(batch_size=2, seed=5)).result[0]
    single = MuLoSDARSampler.execute(t2i["target"], conditioning=conditioning, **ar_kw(seed=6)).result[0]
    assert torch.allclose(pair[1], single[0], atol=1e-5)
    other = text.MuLoSDTextPrompt.execute(text_encoder=encoder, prompt="a blue bird in the garden").result[0]
    elsewhere = MuLoSDARSampler.execute(t2i["target"], conditioning=other, **ar_kw(seed=6)).result[0]
    assert not torch.allclose(elsewhere, single)


def test_conditioning_errors_before_any_model_runs(tiny_models, t2i, conditioning, monkeypatch):
    from mulosd_pack.nodes import samplers
    from mulosd_pack.nodes.loaders import load
    from mulosd_pack.nodes.types import Conditioning

    monkeypatch.setattr(decode_engine, "_run", lambda *a, **k: pytest.fail("a model ran before validation"))
    c2i = {role: load(f"embedded/{role}.safetensors", "auto", 0, "cpu", "float32") for role in ("target", "drafter")}
    # a t2i target without a caption
    with pytest.raises(ValueError, match=r"conditioning: expected a caption for t2i_tiny_target.*t2i.*got nothing"):
        samplers.MuLoSDSampler.execute(t2i["drafter"], t2i["target"], **mulo_kw())
    with pytest.raises(ValueError, match=r"conditioning: expected a caption .*got nothing"):
        samplers.MuLoSDARSampler.execute(t2i["target"], **ar_kw())
    # a caption for a c2i target
    with pytest.raises(ValueError, match=r"conditioning: expected nothing for embedded/target.*c2i.*got the caption 'a red cat"):
        samplers.MuLoSDSampler.execute(c2i["drafter"], c2i["target"], conditioning=conditioning, **mulo_kw())
    with pytest.raises(ValueError, match=r"conditioning: expected nothing .*c2i"):
        samplers.MuLoSDARSampler.execute(c2i["target"], conditioning=conditioning, **ar_kw())
    # caption features of the wrong width (another encoder than the model was trained with)
    narrow = Conditioning(conditioning.features[..., :16], conditioning.mask, PROMPT, "other-t5")
    with pytest.raises(ValueError, match=r"conditioning: target t2i_tiny_target.* expects 120 caption tokens of width 24.*"
                                         r"got 120 x 16; were the captions encoded by another text encoder\?"):
        samplers.MuLoSDARSampler.execute(t2i["target"], conditioning=narrow, **ar_kw())
    # a c2i drafter for a t2i target
    with pytest.raises(ValueError, match=r"drafter/target: .*c2i.*t2i"):
        samplers.MuLoSDSampler.execute(c2i["drafter"], t2i["target"], conditioning=conditioning, **mulo_kw())
