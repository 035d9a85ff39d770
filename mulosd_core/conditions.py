"""Is a condition one a model can take? Checked once, by decode.generate, before any model runs.

The library, the benchmark and the nodes all go through generate, so all of them get these errors;
each names the input, what the model expects and what it was given. The kinds of condition:
class ids [B] (c2i), caption features [B, T, C] with an optional mask [B, T] (LlamaGen t2i), and
prompts as text or token ids (Janus-Pro).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def check_condition(model, cond, mask: torch.Tensor | None = None, role: str = "target") -> int:
    """Raise ValueError when `cond` (and `mask`) does not fit `model` (`role`: "target" or "drafter"); else
    return how many images it asks for (a single class id, e.g. a plain int, asks for one)."""
    kind = model.model_type
    if kind == "c2i":
        return _check_class_ids(model, cond)
    if kind == "t2i":
        return _check_captions(model, cond, mask, role)
    if kind == "janus":
        return _check_prompts(model, cond, role)
    raise ValueError(f"{role}: expected a c2i, t2i or Janus-Pro model, got {model.name!r}, a {kind} model")


def _check_class_ids(model, cond) -> int:
    try:
        ids = torch.as_tensor(cond).reshape(-1)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"class_id: expected class ids (integers) for {model.name}, a class-conditional (c2i) model; "
                         f"got {type(cond).__name__}") from None
    if not ids.numel():
        raise ValueError(f"class_id: expected at least one class id for {model.name}, got none")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"class_id: expected whole numbers for {model.name}, got {ids.dtype} values {ids.tolist()[:4]}")
    n = model.num_classes
    bad = (ids < 0) | (ids >= n)
    if bool(bad.any()):
        raise ValueError(f"class_id: expected 0..{n - 1} ({model.name} has {n} classes), got {int(ids[bad][0])}")
    return ids.numel()


def _check_captions(model, cond, mask, role: str) -> int:
    want = (model.cond_len, model.caption_dim)
    if not isinstance(cond, torch.Tensor) or cond.dim() != 3:
        got = tuple(cond.shape) if isinstance(cond, torch.Tensor) else type(cond).__name__
        raise ValueError(f"conditioning: {role} {model.name} is a text-to-image (t2i) model and expects caption "
                         f"features [B, {want[0]}, {want[1]}], got {got}")
    got = tuple(cond.shape[1:])
    if got != want:
        raise ValueError(f"conditioning: {role} {model.name} expects {want[0]} caption tokens of width {want[1]} "
                         f"(LlamaGen t2i: FLAN-T5-XL, 120 x 2048), got {got[0]} x {got[1]}; were the captions "
                         f"encoded by another text encoder?")
    if mask is not None and tuple(mask.shape) != tuple(cond.shape[:2]):
        raise ValueError(f"conditioning: the caption mask must be [B, T] = {tuple(cond.shape[:2])} like the features, "
                         f"got {tuple(mask.shape)}")
    return cond.shape[0]


def _check_prompts(model, cond, role: str) -> int:
    if isinstance(cond, torch.Tensor):     # token ids [B, T], already formatted
        prompts = list(cond.reshape(-1, cond.shape[-1])) if cond.dim() else [cond]
    else:
        prompts = cond if isinstance(cond, Sequence) and not isinstance(cond, str) else [cond]
    for p in prompts:
        if isinstance(p, str):
            if not p.strip():
                raise ValueError(f"prompt: expected a prompt for Janus-Pro (non-empty text; use cfg, not an empty "
                                 f"prompt, for unconditional guidance), got {p!r}")
            n = len(model.format_prompt(p))
        else:
            n = len(p)
        if n > model.cond_len:
            raise ValueError(f"prompt: expected at most {model.cond_len} tokens once chat-formatted for {role} "
                             f"{model.name}, got {n}; shorten the prompt")
    return len(prompts)
