"""Load Target / Load Drafter on tiny models in a temporary model folder."""
import pytest
import torch

from mulosd_core.models.checkpoints import CheckpointError


@pytest.fixture
def loaders(tiny_models):
    from mulosd_pack.nodes import loaders
    return loaders


def run(cls, model_name, vq_name="auto", image_size=0, device="auto", dtype="float32"):
    return cls.execute(model_name=model_name, vq_name=vq_name, image_size=image_size, device=device, dtype=dtype)


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


def test_image_size_overrides_the_file(loaders):
    h = run(loaders.MuLoSDLoadDrafter, "embedded/drafter.safetensors", image_size=32).result[0]
    assert (h.model.image_size, h.model.grid) == (32, 8)


def test_image_size_from_file_name(loaders, tiny_models):
    path = str(tiny_models / "c2i_tiny_32.pt")
    assert loaders.resolve_image_size("c2i_XL_384.pt", path, 0) == 384
    assert loaders.resolve_image_size("c2i_XL_384.pt", path, 256) == 256
    with pytest.raises(ValueError, match="image_size: mystery.pt"):
        loaders.resolve_image_size("mystery.pt", path, 0)


def test_auto_vq_is_only_for_embedded_models(loaders):
    with pytest.raises(ValueError, match=r"vq_name: 'auto'.*c2i_tiny_32\.pt"):
        run(loaders.MuLoSDLoadTarget, "c2i_tiny_32.pt")


def test_checkpoint_errors_pass_through_naming_the_file(loaders):
    with pytest.raises(CheckpointError, match=r"c2i_tiny_32\.pt.*head count"):
        run(loaders.MuLoSDLoadTarget, "c2i_tiny_32.pt", vq_name="vq_other.safetensors")
    with pytest.raises(CheckpointError, match=r"vq_other\.safetensors.*expected a LlamaGen GPT"):
        run(loaders.MuLoSDLoadTarget, "vq_other.safetensors", vq_name="vq_other.safetensors", image_size=32)


def test_validate_inputs_names_missing_files(loaders):
    cls = loaders.MuLoSDLoadTarget
    assert cls.validate_inputs(model_name="embedded/target.safetensors", vq_name="auto") is True
    msg = cls.validate_inputs(model_name="t2i_XL_stage2_512.pt", vq_name="auto")
    assert msg.startswith("model_name:") and "t2i_XL_stage2_512.pt" in msg
    msg = cls.validate_inputs(model_name="embedded/target.safetensors", vq_name="vq_ds16_c2i.pt")
    assert msg.startswith("vq_name:") and "vq_ds16_c2i.pt" in msg


def test_device_and_dtype_errors(loaders):
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device: .*cuda"):
            run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors", device="cuda")
    with pytest.raises(ValueError, match="dtype: "):
        run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors", dtype="int8")


def test_auto_device_is_comfyuis_compute_device(loaders):
    import comfy.model_management

    h = run(loaders.MuLoSDLoadTarget, "embedded/target.safetensors", device="auto").result[0]
    assert h.model.device.type == comfy.model_management.get_torch_device().type
