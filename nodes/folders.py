"""The model folders every loader lists from: one walk, one idea of what a model folder is.

A model folder is a directory with a config.json (a transformers model: a FLAN-T5 encoder, a Janus-Pro
folder); its files are its own. Load Text Encoder and Load Janus-Pro list such folders by their config's
model_type (`model_folders`); Load Target / Load Drafter list the loose weights files ComfyUI finds,
less those inside a model folder (`weights_files`). A load is keyed by `file_stamp` / `folder_stamp`,
so a changed file on disk is loaded again.
"""
from __future__ import annotations

import json
import os
from typing import Optional

import folder_paths

CONFIG = "config.json"
MAX_DEPTH = 3   # <base>/<a>/<b>/<c>/config.json (e.g. a Hugging Face snapshot)


def base_paths(kinds: tuple[str, ...]) -> list[str]:
    """The folders of ComfyUI's model folder names `kinds`, in order (names not registered have none)."""
    return [p for k in kinds if k in folder_paths.folder_names_and_paths for p in folder_paths.get_folder_paths(k)]


def config_type(path: str) -> Optional[str]:
    """The model_type in a folder's config.json; None when it has none or cannot be read."""
    try:
        with open(os.path.join(path, CONFIG), encoding="utf-8") as f:
            return json.load(f).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def model_folders(kinds: tuple[str, ...], model_types: tuple[str, ...], max_depth: int = MAX_DEPTH) -> dict[str, str]:
    """Listed name ("a/b", relative to its base) -> full path of every model folder whose config's model_type
    is one of `model_types`, up to `max_depth` levels under the folders of `kinds`; the first base wins a name."""
    found: dict[str, str] = {}
    for base in base_paths(kinds):
        if not os.path.isdir(base):
            continue
        for root, dirs, files in os.walk(base, followlinks=True):
            rel = os.path.relpath(root, base)
            depth = 0 if rel == "." else rel.count(os.sep) + 1
            if rel != "." and CONFIG in files:
                dirs[:] = []  # a model folder: its subfolders are its own business
                if config_type(root) in model_types:
                    found.setdefault(rel.replace(os.sep, "/"), root)
            elif depth >= max_depth:
                dirs[:] = []
            else:
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    return dict(sorted(found.items()))


def weights_files(kind: str) -> list[str]:
    """The weights files ComfyUI lists in its model folder name `kind`, less those inside a model folder
    (e.g. a FLAN-T5 encoder kept there): those are no single-file weights."""
    files = folder_paths.get_filename_list(kind)
    bases = folder_paths.get_folder_paths(kind)
    return [f for f in files if not (os.path.dirname(f) and
                                     any(_in_model_folder(base, os.path.dirname(f)) for base in bases))]


def _in_model_folder(base: str, rel_dir: str) -> bool:
    parts = rel_dir.replace("\\", "/").split("/")
    return any(os.path.isfile(os.path.join(base, *parts[:i], CONFIG)) for i in range(1, len(parts) + 1))


def file_stamp(path: str) -> tuple:
    """A file's real path, modification time and size."""
    st = os.stat(path)
    return os.path.realpath(path), st.st_mtime_ns, st.st_size


def folder_stamp(path: str) -> tuple:
    """A model folder and the times and sizes of its config and weights: a changed file is loaded again."""
    files = sorted(n for n in os.listdir(path) if n == CONFIG or n.endswith((".safetensors", ".bin")))
    return (os.path.realpath(path),) + tuple(file_stamp(os.path.join(path, n))[1:] + (n,) for n in files)
