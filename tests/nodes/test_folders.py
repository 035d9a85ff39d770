"""nodes/folders.py: the one walk of the model folders that Load Target, Load Janus-Pro and Load Text
Encoder list from, on a folder tree made here and registered with ComfyUI's folder_paths."""
import json
import os

import pytest

KIND, OTHER = "mulosd_test_folders", "mulosd_test_folders_other"


def hf_folder(path, model_type="t5", weights="model.safetensors"):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": model_type}))
    (path / weights).write_bytes(b"w")
    return path


@pytest.fixture
def folders(pack, tmp_path):
    import folder_paths

    from mulosd_pack.nodes import folders

    base, other = tmp_path / "base", tmp_path / "other"
    hf_folder(base / "flan")                                   # listed as "flan"
    hf_folder(base / "a" / "b" / "c")                          # three levels down: listed
    hf_folder(base / "a" / "b" / "c2" / "d")                   # four: too deep
    hf_folder(base / "flan" / "inner")                         # inside a model folder: its own business
    hf_folder(base / ".hidden" / "t5")                         # dot folders are skipped
    hf_folder(base / "bert", model_type="bert")                # another model_type
    (base / "broken").mkdir()
    (base / "broken" / "config.json").write_text("[not json")   # unreadable config: not listed
    (base / "loose.safetensors").write_bytes(b"w")
    (base / "a" / "loose2.safetensors").write_bytes(b"w")
    hf_folder(other / "flan")                                  # the same name in a later base: the first wins
    hf_folder(other / "mt5", model_type="mt5")
    folder_paths.add_model_folder_path(KIND, str(base))
    folder_paths.add_model_folder_path(OTHER, str(other))
    folder_paths.folder_names_and_paths[KIND][1].update({".safetensors"})
    yield folders, base, other
    for k in (KIND, OTHER):
        del folder_paths.folder_names_and_paths[k]


def test_lists_model_folders_by_type_depth_and_base(folders):
    f, base, other = folders
    assert f.model_folders((KIND, OTHER, "not_registered"), ("t5", "mt5")) == {
        "a/b/c": str(base / "a" / "b" / "c"), "flan": str(base / "flan"), "mt5": str(other / "mt5")}
    assert f.model_folders((KIND,), ("bert",)) == {"bert": str(base / "bert")}
    assert f.model_folders((KIND,), ("t5",), max_depth=1) == {"flan": str(base / "flan")}
    assert f.base_paths((OTHER, "not_registered", KIND)) == [str(other), str(base)]


def test_config_type(folders):
    f, base, _ = folders
    assert f.config_type(str(base / "bert")) == "bert"
    assert f.config_type(str(base / "broken")) is None and f.config_type(str(base / "a")) is None


def test_weights_files_leave_out_those_inside_model_folders(folders):
    f, _, _ = folders
    assert f.weights_files(KIND) == ["a/loose2.safetensors", "loose.safetensors"]


def test_stamps_change_with_the_files(folders):
    f, base, _ = folders
    before, file_before = f.folder_stamp(str(base / "flan")), f.file_stamp(str(base / "loose.safetensors"))
    assert before[0] == os.path.realpath(base / "flan") and [s[-1] for s in before[1:]] == ["config.json",
                                                                                           "model.safetensors"]
    (base / "flan" / "model.safetensors").write_bytes(b"longer")
    (base / "loose.safetensors").write_bytes(b"longer")
    assert f.folder_stamp(str(base / "flan")) != before
    assert f.file_stamp(str(base / "loose.safetensors"))[2] == 6 != file_before[2]
