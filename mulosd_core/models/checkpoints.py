"""Safe checkpoint reading: safetensors, or torch.load(weights_only=True) with a tiny allow-list.

No code from a checkpoint ever runs. Official LlamaGen files nest the weights under
"model" (DDP), "module" (DeepSpeed) or "state_dict", or are flat (FSDP consolidated);
sampling takes them in that order and never reads "ema" unless asked (docs/DESIGN.md section 7.6).
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
    except Exception as e:  # whatever the library raises (bad header, truncation, ...): the loader's error
        raise CheckpointError(f"{path}: not a readable safetensors file: {looks_like(path)} ({_detail(e)})") from None
    return tensors, meta


def read_torch(path: str) -> Any:
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        lines = [ln for ln in str(e).splitlines() if ln.strip()]
        if not any("GLOBAL" in ln or "global" in ln for ln in lines):
            # no object was refused: the bytes are not a pickle at all (random data, JSON, ...)
            what = next((ln.strip() for ln in lines if "nsupported" in ln), _detail(e))
            raise CheckpointError(f"{path}: truncated or not a PyTorch checkpoint: {looks_like(path)} "
                                  f"(the unpickler read: {what})") from None
        # torch's first line is generic advice to set weights_only=False; name the refused object instead
        detail = next((ln for ln in lines if "GLOBAL" in ln or "nsupported" in ln), lines[0] if lines else "")
        raise CheckpointError(
            f"{path}: refused to load: the file holds a pickled object that is not plain weights "
            f"(loading it could run code). Convert it to .safetensors with trusted tooling. Detail: {detail}"
        ) from None
    except Exception as e:
        # torch.load fails on garbage in many ways (a text file: IndexError from the legacy pickle reader, a
        # truncated archive: OSError, a foreign zip: RuntimeError, ...); each is the same problem to the user
        raise CheckpointError(f"{path}: truncated or not a PyTorch checkpoint: {looks_like(path)} "
                              f"({_detail(e)})") from None


def _detail(e: BaseException) -> str:
    """The first line of an exception, with its type (kept short: it ends up in a UI)."""
    first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def looks_like(path: str) -> str:
    """What a file that failed to load seems to be, from its first bytes, to say what is wrong with it."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
        size = os.path.getsize(path)
    except OSError as e:
        return f"the file cannot be read ({_detail(e)})"
    if head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except Exception:
            return f"the file is a damaged or truncated zip archive ({size} bytes)"
        if any(n.endswith("data.pkl") for n in names):
            return f"the file is a PyTorch archive that is damaged or truncated ({size} bytes)"
        return f"the file is a zip archive without the data.pkl of a PyTorch checkpoint (holds {names[:3]})"
    for magic, kind in ((b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
                        (b"RIFF", "a RIFF (WebP/WAV) file"), (b"\x1f\x8b", "a gzip archive"), (b"%PDF", "a PDF document")):
        if head.startswith(magic):
            return f"the file is {kind}, not model weights"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return (f"the file is a bare pickle stream ({size} bytes), not a PyTorch checkpoint archive; "
                f"it was not unpickled")
    if len(head) >= 8 and head[8:9] == b"{":
        n = int.from_bytes(head[:8], "little")
        if n > size - 8:
            return f"the file is a safetensors file whose header says {n} bytes but the file has {size}: truncated"
        return f"the file is a safetensors file ({size} bytes) with a damaged header or data"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.strip():
        if text.lstrip()[:1] in "{[":
            return "the file is JSON text, not model weights"
        if all(c.isprintable() or c.isspace() for c in text):
            return f"the file is text, not model weights (starts {text.strip()[:40]!r})"
    return f"the file holds {size} bytes of no known weights format"


PICKLE_LIMIT = 64 << 20   # a checkpoint's pickle holds names and storage references only: megabytes at most


def torch_pickle(path: str) -> Optional[bytes]:
    """The pickle (data.pkl) of a PyTorch zip archive as bytes, never unpickled, for a cheap look at the
    names it holds; None when the file is not such an archive (a legacy or damaged file, another format)."""
    try:
        with zipfile.ZipFile(path) as z:
            entry = next((i for i in z.infolist() if i.filename.endswith("data.pkl")), None)
            if entry is None or entry.file_size > PICKLE_LIMIT:
                return None
            return z.read(entry)
    except (OSError, zipfile.BadZipFile, RuntimeError, ValueError):
        return None


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
    try:
        if path.endswith(".safetensors"):
            sd, meta = read_safetensors(path)
            if not sd:
                raise CheckpointError(f"{path}: the safetensors file holds no tensors")
            return clean_keys(sd), meta
        return clean_keys(select_weights(read_torch(path), path, key)), {}
    except CheckpointError:
        raise
    except Exception as e:   # anything else while reading is still the file's problem, named as such
        raise CheckpointError(f"{path}: could not be read as model weights: {looks_like(path)} ({_detail(e)})") from None


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
