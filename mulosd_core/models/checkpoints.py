"""Safe checkpoint reading: safetensors, or torch.load(weights_only=True) with a tiny allow-list.

No code from a checkpoint ever runs. Official LlamaGen files nest the weights under
"model" (DDP), "module" (DeepSpeed) or "state_dict", or are flat (FSDP consolidated);
sampling takes them in that order and never reads "ema" unless asked (upstream-facts A.7).
Every error names the file and says what is wrong.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import zipfile
from typing import Any, Optional

import torch

NESTING_ORDER = ("model", "module", "state_dict")
IGNORED_KEY_PARTS = ("freqs_cis", "kv_cache.", "causal_mask")
PREFIXES = ("module.", "_orig_mod.")


class CheckpointError(ValueError):
    """A checkpoint file could not be used; the message names the file and the problem."""


def _is_state_dict(obj: Any) -> bool:
    return isinstance(obj, dict) and len(obj) > 0 and all(isinstance(v, torch.Tensor) for v in obj.values())


def read_safetensors(path: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    from safetensors import safe_open

    try:
        with safe_open(path, framework="pt", device="cpu") as f:
            meta = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises its own error types for bad headers / truncation
        raise CheckpointError(f"{path}: not a readable safetensors file ({type(e).__name__}: {e})") from None
    return tensors, meta


def read_torch(path: str) -> Any:
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        # torch's first line is generic advice to set weights_only=False; name the refused object instead
        detail = next((ln for ln in lines if "GLOBAL" in ln or "nsupported" in ln), lines[0] if lines else "")
        raise CheckpointError(
            f"{path}: refused to load: the file holds a pickled object that is not plain weights "
            f"(loading it could run code). Convert it to .safetensors with trusted tooling. Detail: {detail}"
        ) from None
    except (RuntimeError, zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, UnicodeDecodeError) as e:
        # a truncated zip archive surfaces as OSError(EINVAL) from PyTorchFileReader, others as RuntimeError
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"{path}: truncated or not a PyTorch checkpoint ({msg})") from None


def select_weights(obj: Any, path: str, key: Optional[str] = None) -> dict[str, torch.Tensor]:
    """Pick the state dict out of a loaded checkpoint (flat, or nested under model/module/state_dict)."""
    if key is not None:
        if not isinstance(obj, dict) or key not in obj:
            have = sorted(obj)[:10] if isinstance(obj, dict) else type(obj).__name__
            raise CheckpointError(f"{path}: has no {key!r} entry (top-level entries: {have})")
        obj = obj[key]
        if not _is_state_dict(obj):
            raise CheckpointError(f"{path}: entry {key!r} is not a dict of tensors")
        return obj
    if _is_state_dict(obj):
        return obj
    if isinstance(obj, dict):
        for name in NESTING_ORDER:
            if name in obj and _is_state_dict(obj[name]):
                return obj[name]
        raise CheckpointError(
            f"{path}: no weights found: expected a flat dict of tensors or one nested under "
            f"{'/'.join(NESTING_ORDER)}; top-level entries are {sorted(map(str, obj))[:10]}"
            + (" (an 'ema' entry exists: ask for it explicitly)" if "ema" in obj else "")
        )
    raise CheckpointError(f"{path}: expected a dict of weights, found {type(obj).__name__}")


def clean_keys(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop runtime buffers that some files carry (freqs_cis, kv caches) and wrapper prefixes."""
    out = {}
    for k, v in sd.items():
        if any(part in k for part in IGNORED_KEY_PARTS):
            continue
        for p in PREFIXES:
            if k.startswith(p):
                k = k[len(p):]
        out[k] = v
    return out


def read_checkpoint(path: str, key: Optional[str] = None) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Return (state dict, metadata) of a weights file; metadata is the safetensors header's."""
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: no such file")
    if os.path.getsize(path) == 0:
        raise CheckpointError(f"{path}: the file is empty")
    if path.endswith(".safetensors"):
        sd, meta = read_safetensors(path)
        if not sd:
            raise CheckpointError(f"{path}: the safetensors file holds no tensors")
        return clean_keys(sd), meta
    return clean_keys(select_weights(read_torch(path), path, key)), {}


def save_safetensors(sd: dict[str, torch.Tensor], path: str, metadata: Optional[dict[str, Any]] = None) -> None:
    """Write contiguous CPU tensors; metadata values that are not strings are stored as JSON."""
    from safetensors.torch import save_file

    meta = {k: v if isinstance(v, str) else json.dumps(v) for k, v in (metadata or {}).items()}
    save_file({k: v.detach().contiguous().cpu() for k, v in sd.items()}, path, metadata=meta)


def check_and_load(module: torch.nn.Module, sd: dict[str, torch.Tensor], path: str, what: str) -> None:
    """Strictly load sd into module, with errors that list the first differing keys and shapes."""
    own = module.state_dict()
    missing = [k for k in own if k not in sd]
    unexpected = [k for k in sd if k not in own]
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: does not match the {what}: {len(missing)} missing keys {missing[:5]}, "
            f"{len(unexpected)} unexpected keys {unexpected[:5]}"
        )
    for k, v in sd.items():
        if own[k].shape != v.shape:
            raise CheckpointError(f"{path}: shape mismatch for {k}: checkpoint {tuple(v.shape)}, {what} expects {tuple(own[k].shape)}")
    module.load_state_dict(sd, strict=True)
