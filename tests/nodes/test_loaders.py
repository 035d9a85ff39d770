"""Load Target / Load Drafter on tiny models in a temporary model folder."""
import pytest
import torch

from mulosd_core.models.checkpoints import CheckpointError


@pytest.fixture
def loaders(tiny_models):
    from mulosd_pack.nodes import loaders
    return loaders


def run(cls, model_name, vq_name="auto", image_size=0, device="auto", dtype="float32", weights="auto"):
    return cls.execute(model_name=model_name, vq_name=vq_name, image_size=image_size, device=device, dtype=dtype,
                       weights=weights)


def test_lists_embedded_and_user_files(loaders):
    files = loaders.model_files()
    for name in ("embedded/target.safetensors", "embedded/drafter.safetensors", "embedded/sd_drafter.safetensors",
                 "embedded/vq.safetensors", "c2i_tiny_32.pt", "vq_other.safetensors"):
        assert name in files
    gpts = loaders.gpt_files()
    assert "embedded/target.safetensors" in gpts and "embedded/vq.safetensors" not in gpts
    target = {i.id: i for i in loaders.MuLoSDLoadTarget.GET_SCHEMA().inputs}
    drafter = {i.id: i for i in loaders.MuLoSDLoadDrafter.GET_SCHEMA().inputs}
    assert target["model_name"].default == "embedded/target.safetensors"
    assert drafter["model_name"].default == "embedded/drafter.safetensors"
    assert "embedded/sd_drafter.safetensors" in drafter["model_name"].options
    assert target["vq_name"].options[0] == "auto"


def test_auto_vq_of_a_family_in_a_sub_folder_is_its_own(loaders):
    """embedded/patterns/* (the second shipped family) load with the tokenizer beside them, not the default's."""
    assert "embedded/patterns/target.safetensors" in loaders.gpt_files()
    auto = run(loaders.MuLoSDLoadTarget, "embedded/patterns/target.safetensors").result[0].model
    own = run(loaders.MuLoSDLoadTarget, "embedded/patterns/target.safetensors",
              vq_name="embedded/patterns/vq.safetensors").result[0].model
    default = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors").result[0].model
    assert auto.codebook_id() == own.codebook_id() != default.codebook_id()


def test_model_folder_is_appended_not_replaced(loaders):
    import folder_paths

    paths = folder_paths.get_folder_paths("mulosd")
    assert paths[0].endswith("mulosd")  # ComfyUI/models/mulosd stays first
    assert ".safetensors" in folder_paths.folder_names_and_paths["mulosd"][1]


def test_load_target_embedded(loaders):
    out = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors")
    handle = out.result[0]
    m = handle.model
    assert (m.image_size, m.grid, m.num_classes, m.model_type) == (32, 8, 10, "c2i")
    assert m.device.type == "cpu" and m.dtype == torch.float32
    assert handle.description in out.ui["text"]
    assert "grid 8x8" in handle.description and "10 classes" in handle.description


def test_same_settings_reuse_the_loaded_model(loaders):
    a = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors").result[0]
    b = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors").result[0]
    c = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors", dtype="bfloat16").result[0]
    d = run(loaders.MuLoSDLoadDrafter, "embedded/drafter.safetensors").result[0]
    assert a.model is b.model
    assert c.model is not a.model and c.model.dtype == torch.bfloat16
    assert d.model.vq is a.model.vq  # one tokenizer shared by the pair


def test_model_cache_keeps_the_most_recently_used(loaders):
    """The one cache helper behind Load Target/Drafter, Load Janus-Pro and Load Text Encoder."""
    cache, loads = loaders.ModelCache(2), []

    def load(name):
        loads.append(name)
        return [name]
    a = cache.get(("a",), lambda: load("a"))
    assert cache.get(("a",), lambda: load("again")) is a and loads == ["a"]   # a hit loads nothing
    cache.get(("b",), lambda: load("b"))
    cache.get(("a",), lambda: load("again"))                                  # a is now the most recent
    cache.get(("c",), lambda: load("c"))                                      # so b is forgotten
    assert loads == ["a", "b", "c"] and cache.values() == [a, ["c"]]
    cache.keep(lambda v: v != ["c"])
    assert len(cache) == 1 and cache.values() == [a]
    with pytest.raises(ValueError):
        cache.get(("d",), lambda: (_ for _ in ()).throw(ValueError("bad file")))
    assert len(cache) == 1                                                    # a failed load keeps nothing


def test_image_size_overrides_the_file(loaders):
    h = run(loaders.MuLoSDLoadDrafter, "embedded/drafter.safetensors", image_size=32).result[0]
    assert (h.model.image_size, h.model.grid) == (32, 8)


def test_image_size_from_file_name(loaders, tiny_models):
    path = str(tiny_models / "c2i_tiny_32.pt")
    assert loaders.resolve_image_size("c2i_XL_384.pt", path, 0) == 384
    assert loaders.resolve_image_size("t2i_XL_stage1_256.pt", path, 0) == 256
    assert loaders.resolve_image_size("llamagen/t2i_XL_stage2_512.pt", path, 0) == 512
    assert loaders.resolve_image_size("c2i_XL_384.pt", path, 256) == 256
    with pytest.raises(ValueError, match="image_size: mystery.pt"):
        loaders.resolve_image_size("mystery.pt", path, 0)


def test_auto_vq_is_only_for_embedded_models(loaders):
    with pytest.raises(ValueError, match=r"vq_name: 'auto'.*c2i_tiny_32\.pt"):
        run(loaders.MuLoSDLoadTarget, "c2i_tiny_32.pt")


def test_checkpoint_errors_pass_through_naming_the_file(loaders):
    with pytest.raises(CheckpointError, match=r"c2i_tiny_32\.pt.*head count"):
        run(loaders.MuLoSDLoadTarget, "c2i_tiny_32.pt", vq_name="vq_other.safetensors")
    with pytest.raises(ValueError, match=r"^model_name: vq_other\.safetensors is a VQ tokenizer, not a LlamaGen GPT"):
        run(loaders.MuLoSDLoadTarget, "vq_other.safetensors", vq_name="vq_other.safetensors", image_size=32)


def test_validate_inputs_names_missing_files(loaders):
    cls = loaders.MuLoSDLoadTarget
    assert cls.validate_inputs(model_name="embedded/target.safetensors", vq_name="auto") is True
    msg = cls.validate_inputs(model_name="t2i_XL_stage2_512.pt", vq_name="auto")
    assert msg.startswith("model_name: 't2i_XL_stage2_512.pt' is not in the mulosd model folders") and "download it" in msg
    msg = cls.validate_inputs(model_name="embedded/target.safetensors", vq_name="vq_ds16_c2i.pt")
    assert msg.startswith("vq_name: 'vq_ds16_c2i.pt' is not in") and "model_name" not in msg


def test_every_missing_file_is_named_after_its_input(loaders):
    """Issue 37, case 2: the llamagen_c2i workflow without its downloads named the GPT only, never the VQ."""
    for cls in (loaders.MuLoSDLoadTarget, loaders.MuLoSDLoadDrafter):
        msg = cls.validate_inputs(model_name="c2i_XL_384.pt", vq_name="vq_ds16_c2i.pt")
        first, second = msg.split("; vq_name: ")
        assert first.startswith("model_name: 'c2i_XL_384.pt' is not in") and second.startswith("'vq_ds16_c2i.pt' is not in")
        with pytest.raises(ValueError, match=r"^model_name: 'c2i_XL_384\.pt' .*; vq_name: 'vq_ds16_c2i\.pt' "):
            run(cls, "c2i_XL_384.pt", vq_name="vq_ds16_c2i.pt", image_size=384)


@pytest.fixture
def other_kinds(loaders, tmp_path):
    """The shipped classifier and upsampler in a user folder (other/), beside a truncated file whose header
    cannot tell what it is."""
    import shutil

    import folder_paths

    from mulosd_core.models.registry import embedded_path

    folder = tmp_path / "other"
    folder.mkdir()
    for member in ("classifier", "upsampler"):
        shutil.copy(embedded_path(member), folder / f"{member}.safetensors")
    (folder / "truncated.safetensors").write_bytes(open(embedded_path("vq"), "rb").read()[:5000])
    folder_paths.add_model_folder_path(loaders.FOLDER, str(tmp_path))
    yield "other"
    folder_paths.folder_names_and_paths[loaders.FOLDER][0].remove(str(tmp_path))


def test_each_list_offers_only_files_of_its_kind(loaders, other_kinds):
    """Issue 37, case 1: the classifier and the upsampler were offered as GPTs and tokenizers."""
    gpts, vqs = loaders.gpt_files(), loaders.vq_files()
    for name in ("other/classifier.safetensors", "other/upsampler.safetensors"):
        assert name in loaders.model_files() and name not in gpts and name not in vqs
    assert {"embedded/target.safetensors", "c2i_tiny_32.pt"} <= set(gpts) and not {"embedded/vq.safetensors",
                                                                                  "vq_other.safetensors"} & set(gpts)
    assert {"embedded/vq.safetensors", "vq_other.safetensors"} <= set(vqs) and not {"embedded/target.safetensors",
                                                                                  "c2i_tiny_32.pt"} & set(vqs)
    assert "other/truncated.safetensors" in gpts and "other/truncated.safetensors" in vqs   # loading it says why
    target = {i.id: i for i in loaders.MuLoSDLoadTarget.GET_SCHEMA().inputs}
    assert target["model_name"].options == gpts and target["vq_name"].options == ["auto"] + vqs


@pytest.mark.parametrize("member,kind", [("classifier", "an image classifier"), ("upsampler", "a learned upsampler")])
def test_a_file_of_another_kind_is_named_as_such_first(loaders, other_kinds, member, kind):
    """Picking one said 'does not record its image size' first; now its kind, on the input, before anything runs."""
    name = f"other/{member}.safetensors"
    msg = loaders.MuLoSDLoadTarget.validate_inputs(model_name=name, vq_name="auto")
    assert msg.startswith(f"model_name: {name} is {kind}") and "not a LlamaGen GPT; choose a LlamaGen GPT file" in msg
    msg = loaders.MuLoSDLoadDrafter.validate_inputs(model_name="embedded/drafter.safetensors", vq_name=name)
    assert msg.startswith(f"vq_name: {name} is {kind}") and "not a VQ tokenizer" in msg
    for size in (0, 32):
        with pytest.raises(ValueError, match=rf"^model_name: {name} is {kind}"):
            run(loaders.MuLoSDLoadTarget, name, image_size=size)
    msg = loaders.MuLoSDLoadTarget.validate_inputs(model_name=name, vq_name="embedded/target.safetensors")
    assert "; vq_name: embedded/target.safetensors is a LlamaGen GPT, not a VQ tokenizer" in msg   # both named


def test_the_loaders_text_names_the_vq_file_as_listed(loaders):
    """Issue 37: both families' loaders said 'VQ vq.safetensors' although their tokenizers differ."""
    scenes = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors").result[0]
    patterns = run(loaders.MuLoSDLoadDrafter, "embedded/patterns/drafter.safetensors").result[0]
    chosen = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors", vq_name="vq_other.safetensors").result[0]
    assert "VQ embedded/vq.safetensors (codebook" in scenes.description
    assert "VQ embedded/patterns/vq.safetensors (codebook" in patterns.description
    assert "VQ vq_other.safetensors (codebook" in chosen.description
    assert loaders.MuLoSDSelfDrafter.execute(scenes, 2).result[0].vq_name == "embedded/vq.safetensors"
    with pytest.raises(ValueError, match=r"^image_size: .*tokenizer embedded/patterns/vq\.safetensors\), got 30$"):
        run(loaders.MuLoSDLoadDrafter, "embedded/patterns/drafter.safetensors", image_size=30)


def test_device_and_dtype_errors(loaders):
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device: .*cuda"):
            run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors", device="cuda")
    with pytest.raises(ValueError, match="dtype: "):
        run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors", dtype="int8")


def test_weights_mode_errors_and_cpu_placement(loaders):
    with pytest.raises(ValueError, match=r"weights: expected one of \['auto', 'on device', 'stream from cpu'\], got 'disk'"):
        run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors", weights="disk")
    h = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors", device="cpu", weights="stream from cpu").result[0]
    assert h.model.device.type == "cpu" and "stream" not in h.description  # on the cpu the weights are home already


def test_streamed_target_through_the_loader(loaders, monkeypatch):
    """What a GPU user gets from weights = 'stream from cpu', with the CPU standing in for the GPU: the
    blocks wait in CPU memory behind hooks, the loader says so, and the model still samples."""
    from mulosd_core import offload
    from mulosd_core.decode import generate_ar
    from mulosd_core.sampling import SamplingConfig

    real = offload.choose_weights
    monkeypatch.setattr(loaders, "_models", loaders.ModelCache(loaders.CACHE_SIZE))  # not the cpu-resident load of another test
    monkeypatch.setattr(offload, "choose_weights",
                        lambda mode, dev, b, free: "stream" if mode == "stream from cpu" else real(mode, dev, b, free))
    plain = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors", device="cpu").result[0]
    out = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors", device="cpu", weights="stream from cpu")
    h = out.result[0]
    assert h.model is not plain.model and offload.is_streamed(h.model) and not offload.is_streamed(plain.model)
    assert "blocks" in h.description and "stream from the cpu" in h.description and h.description in out.ui["text"]
    sampling = SamplingConfig(cfg_scale=1.0, temperature=0.0)
    a = generate_ar(plain.model, torch.tensor([1, 2]), sampling, decode=False).tokens
    b = generate_ar(h.model, torch.tensor([1, 2]), sampling, decode=False).tokens
    assert torch.equal(a, b)


def test_gpu_index_choices_and_errors(loaders, monkeypatch):
    """cuda:N is offered and accepted for each GPU torch sees (drafter and target on different GPUs),
    and refused by name when N is not one of them."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert loaders.device_options()[-2:] == ["cuda:0", "cuda:1"]
    assert loaders.resolve_device("cuda:1") == torch.device("cuda", 1)
    for bad in ("cuda:2", "cuda:x"):
        with pytest.raises(ValueError, match=rf"device: expected one of the GPUs torch sees \(cuda:0 to cuda:1\), got '{bad}'"):
            loaders.resolve_device(bad)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert "cuda:0" not in loaders.device_options()          # one GPU: 'cuda' / 'auto' say it all
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
        loaders.resolve_device("cuda:0")


def test_auto_device_is_comfyuis_compute_device(loaders):
    import comfy.model_management

    h = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors", device="auto").result[0]
    assert h.model.device.type == comfy.model_management.get_torch_device().type


def _official_key_names():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "core" / "models" / "official_keys.py"
    spec = importlib.util.spec_from_file_location("official_keys", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_official_t2i_layout_loads_as_t2i(loaders, tmp_path, monkeypatch):
    """Files laid out as the released t2i_XL_stage1_256.pt / vq_ds16_t2i.pt (same key names, nesting under "model",
    released file names), with small shapes: the loader reads them, detects t2i and takes 256 px from the name."""
    import folder_paths

    from mulosd_core.models import llamagen_gpt
    from mulosd_core.models.llamagen_vq import VQConfig, VQModel
    from mulosd_core.testing import randomize_, tiny_gpt

    official = _official_key_names()
    # GPT: every official t2i key (caption width 2048, 120 null-caption rows), 2 layers of width 32
    gpt = tiny_gpt(3, vocab_size=64, model_type="t2i", caption_dim=2048, cls_token_num=120).state_dict()
    assert set(gpt) == set(official.gpt_keys("GPT-B t2i", 2))
    for name, shape in official.gpt_keys("GPT-B t2i", 2).items():
        if name.startswith("cls_embedding.uncond") or name == "cls_embedding.cap_proj.fc1.weight":
            assert gpt[name].shape[-1] == shape[-1] == 2048
    torch.save({"model": gpt}, tmp_path / "t2i_XL_stage1_256.pt")
    # VQ: every official VQ-16 key (5 levels, 2 res blocks, 16x downsampling), 32 channels, 64 codes
    vq = randomize_(VQModel(VQConfig(codebook_size=64, ch=32, z_channels=32)), 4).state_dict()
    assert set(vq) == set(official.sections()["VQ-16"]["keys"])
    torch.save({"model": vq}, tmp_path / "vq_ds16_t2i.pt")
    # the head count of a released file comes from the size table by width; give the small width an entry there
    monkeypatch.setitem(llamagen_gpt.GPT_SIZES, "GPT-tiny", (2, 2, 32))
    folder_paths.add_model_folder_path(loaders.FOLDER, str(tmp_path))
    try:
        assert {"t2i_XL_stage1_256.pt", "vq_ds16_t2i.pt"} <= set(loaders.model_files())
        out = run(loaders.MuLoSDLoadDrafter, "t2i_XL_stage1_256.pt", vq_name="vq_ds16_t2i.pt", device="cpu")
    finally:
        folder_paths.folder_names_and_paths[loaders.FOLDER][0].remove(str(tmp_path))
    m = out.result[0].model
    assert (m.model_type, m.image_size, m.grid, m.cond_len, m.gpt.config.caption_dim) == ("t2i", 256, 16, 120, 2048)
    text = out.ui["text"][0]
    for part in ("t2i_XL_stage1_256.pt: LlamaGen text-to-image (t2i) GPT GPT-tiny", "256 px", "grid 16x16",
                 "120 caption tokens of width 2048", "VQ vq_ds16_t2i.pt (codebook 64, 16x downsampling)"):
        assert part in text, (part, text)


def test_self_drafter_is_the_target_at_a_lower_grid_with_no_second_file(loaders):
    from mulosd_core.memory import weight_bytes
    target = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors").result[0]
    out = loaders.MuLoSDSelfDrafter.execute(target, 2)
    drafter = out.result[0]
    assert drafter.model.gpt is target.model.gpt and drafter.model.grid * 2 == target.model.grid
    assert weight_bytes(target.model, drafter.model) == weight_bytes(target.model)
    assert "no second file loaded" in out.ui["text"][0] and drafter.path == target.path
    assert drafter.model.exit_layers is None and "all 2 blocks" in out.ui["text"][0]   # the plain target records no exit
    early = loaders.MuLoSDSelfDrafter.execute(target, 2, 1)
    assert early.result[0].model.exit_layers == 1 and "1 of 2 blocks" in early.ui["text"][0]
    own = run(loaders.MuLoSDLoadTarget, "embedded/self_target.safetensors").result[0]
    trained = loaders.MuLoSDSelfDrafter.execute(own, 2)   # layers 0: the exit its metadata records
    assert trained.result[0].model.exit_layers == 1 and "1 of 2 blocks" in trained.ui["text"][0]
    with pytest.raises(ValueError, match="is not divisible by 3"):
        loaders.MuLoSDSelfDrafter.execute(target, 3)
    with pytest.raises(ValueError, match="layers: expected a whole number of blocks from 1 to 2"):
        loaders.MuLoSDSelfDrafter.execute(target, 2, 3)
