"""Memory: estimate what a run needs before it starts, and turn an out-of-memory error into advice.

A node pack runs inside someone else's server, so a run that cannot fit should say so
before it starts (CPU: an estimate against free RAM) or, when the device runs out anyway
(CUDA), stop cleanly: caches released, the error naming the model and what to lower.
"""
from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator
from typing import Optional

import torch

from .models.kv_cache import KVCache
from .models.protocol import ImageARModel

MB = 1 << 20


class NotEnoughMemory(MemoryError):
    """A run was refused or stopped for lack of memory; the message says what to lower."""


def weight_bytes(*models: Optional[ImageARModel]) -> int:
    """Bytes of the weights the given models hold, each storage counted once: a self-drafter (the target
    at a lower grid, LlamaGenModel.at_grid) adds nothing to its target. Counts `weights_module` (the GPT;
    a VQ tokenizer shared by the pair is left out)."""
    seen: dict[tuple[str, int], int] = {}
    for m in models:
        if m is None:
            continue
        module = m.weights_module()
        for t in [*module.parameters(), *module.buffers()]:
            st = t.untyped_storage()
            seen[(str(t.device), st.data_ptr())] = st.nbytes()
    return sum(seen.values())


def available_bytes(device: torch.device) -> Optional[int]:
    """Free memory on `device` (None where it cannot be told)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


F32 = 4


def cache_len(model: ImageARModel) -> int:
    """Key slots of the model's KV cache (condition + image positions, rounded up to 8 as built)."""
    return -(-(model.cond_len + model.num_tokens) // 8) * 8


def call_bytes(model: ImageARModel, rows: int, queries: int) -> int:
    """Working memory of one GPT call on `queries` positions of `rows` cache rows: float32 logits and
    probabilities [rows, queries, V], and the attention mask over every cache slot (bool [rows, queries, L],
    the [queries, L] comparison it is built from, and the float copy SDPA makes of it)."""
    L = cache_len(model)
    return 2 * rows * queries * model.vocab_size * F32 + KVCache.mask_bytes(rows, queries, L) + rows * queries * L * F32


def vq_bytes(model: ImageARModel, images: int) -> int:
    """Working memory of one VQ decode or encode of `images` whole images at the model's size.

    LlamaGen's VQ runs self-attention blocks at the token grid that hold two float32 [P, P] matrices per
    image (P = grid^2 positions): this term grows with the fourth power of the image side and is what
    makes very large sizes impossible. Add about a dozen activations of the widest full-resolution layer,
    the nearest-code distances [P, V] of an encode, and the output images with their copies."""
    P, px = model.num_tokens, model.image_size * model.image_size
    need = 2 * P * P * F32 + 3 * P * model.vocab_size * F32 + 3 * 3 * px * F32
    channels = model.decoder_channels()   # level j runs at 4^j times fewer pixels than the image
    if channels:
        need += 12 * F32 * max(c * px // 4 ** j for j, c in enumerate(channels))
    return images * need


def estimate(model: ImageARModel, batch: int, cfg: bool, chunk: Optional[int] = None) -> dict[str, int]:
    """What sampling allocates for `model`, by part (bytes): its KV cache, the largest GPT call (`chunk`
    query positions, the whole grid by default, at least the condition's prefill), one VQ call on the
    batch's images, and the block in flight when its weights stream from the CPU (mulosd_core.offload)."""
    rows = batch * (2 if cfg else 1)
    chunk = model.num_tokens if chunk is None else min(chunk, model.num_tokens)
    return {
        "KV cache": model.cache_bytes(rows),
        "largest model call": call_bytes(model, rows, max(chunk, model.cond_len)),
        "VQ decode/encode": vq_bytes(model, batch),
        "weights in flight": model.streamer.block_bytes if model.streamer is not None else 0,
    }


def estimate_bytes(model: ImageARModel, batch: int, cfg: bool, chunk: Optional[int] = None) -> int:
    """Upper bound of what sampling allocates for `model`: the KV cache lives through the run, while a GPT
    call and a VQ call never overlap, so the larger of the two counts (see `estimate`)."""
    part = estimate(model, batch, cfg, chunk)
    return part["KV cache"] + max(part["largest model call"], part["VQ decode/encode"]) + part["weights in flight"]


def _mb(n: int) -> str:
    return f"{n / MB:,.0f} MB"


def check_fits(batch: int, cfg: bool, target: ImageARModel, drafter: Optional[ImageARModel] = None,
               available=None, target_chunk: Optional[int] = None, drafter_chunk: Optional[int] = None) -> dict[str, int]:
    """Raise NotEnoughMemory when the run's estimate exceeds free memory on any device it uses.

    `target_chunk` / `drafter_chunk`: the most positions one call of that model computes (the engine
    knows them per method; the whole grid when not given). Returns the estimate per model name (bytes).
    `available` is injectable for tests.
    """
    available = available or available_bytes
    models = [(target.name, target, target_chunk)]
    if drafter is not None:
        models.append((f"{drafter.name} (drafter)", drafter, drafter_chunk))
    need: dict[str, int] = {}
    parts: dict[str, dict[str, int]] = {}
    per_device: dict[str, int] = {}
    for name, model, chunk in models:
        parts[name] = estimate(model, batch, cfg, chunk)
        need[name] = estimate_bytes(model, batch, cfg, chunk)
        per_device[str(model.device)] = per_device.get(str(model.device), 0) + need[name]
    for dev, n in per_device.items():
        free = available(torch.device(dev))
        if free is not None and n > free:
            detail = "; ".join(f"{k} {_mb(need[k])}: " + ", ".join(f"{p} {_mb(v)}" for p, v in parts[k].items() if v)
                               for k in need)
            biggest = max(((k, p) for k in parts for p in parts[k]), key=lambda kp: parts[kp[0]][kp[1]])
            size = f"image_size (now {target.image_size} px" + (f", drafter {drafter.image_size} px" if drafter else "") + ")"
            raise NotEnoughMemory(
                f"this run needs about {_mb(n)} on {dev} but only {_mb(free)} are free ({detail}); the largest part is "
                f"{biggest[0]}'s {biggest[1]}. To fit, lower batch_size (now {batch}) or the loaders' {size}, or "
                f"{_lighter(drafter is not None, torch.device(dev))}")
    return need


def _lighter(pair: bool, device: torch.device) -> str:
    """The rest of the advice, only what applies: lighter weights; streaming them from the cpu where the run is
    not on the cpu already; moving the drafter where the run has one."""
    steps = [f"load {'the models' if pair else 'the model'} in bfloat16/float16"]
    if device.type != "cpu":
        steps.append("stream the target's weights from the cpu (the loaders' weights input)")
    if pair:
        steps.append("put the drafter on another device")
    return ", ".join(steps[:-1]) + (" or " if len(steps) > 1 else "") + steps[-1]


@contextlib.contextmanager
def out_of_memory_advice(model: ImageARModel, batch: int, drafter: Optional[ImageARModel] = None) -> Iterator[None]:
    """Turn an allocator failure inside the block into NotEnoughMemory naming the model and what to lower
    (`drafter`: the run's drafter, None for a target-only run)."""
    try:
        yield
    except (torch.OutOfMemoryError, MemoryError) as e:
        if isinstance(e, NotEnoughMemory):
            raise
        if model.streamer is not None:
            model.streamer.drop_all()  # the block that was in flight
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        raise NotEnoughMemory(
            f"{model.name} ran out of memory on {model.device} while sampling a batch of {batch} at grid "
            f"{model.grid}x{model.grid}; its caches were freed. Lower batch_size or the image size, or "
            f"{_lighter(drafter is not None, model.device)} ({type(e).__name__}: {str(e)[:200]})") from None
