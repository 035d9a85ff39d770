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

from .models.protocol import ImageARModel

MB = 1 << 20


class NotEnoughMemory(MemoryError):
    """A run was refused or stopped for lack of memory; the message says what to lower."""


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


def estimate_bytes(model: ImageARModel, batch: int, cfg: bool, chunk: Optional[int] = None) -> int:
    """Upper bound of what sampling allocates for `model`: its KV cache plus float32 logits and
    probabilities for one verified chunk (`chunk` tokens, the whole grid by default), plus the
    block in flight when its weights stream from the CPU (mulosd_core.offload)."""
    rows = batch * (2 if cfg else 1)
    cache = model.cache_bytes(rows) if hasattr(model, "cache_bytes") else 0
    chunk = model.num_tokens if chunk is None else min(chunk, model.num_tokens)
    streamer = getattr(model, "streamer", None)
    return cache + 2 * rows * chunk * model.vocab_size * 4 + (streamer.block_bytes if streamer is not None else 0)


def check_fits(batch: int, cfg: bool, target: ImageARModel, drafter: Optional[ImageARModel] = None,
               available=None) -> dict[str, int]:
    """Raise NotEnoughMemory when the run's estimate exceeds free memory on any device it uses.

    Returns the estimate per model name (bytes). `available` is injectable for tests.
    """
    available = available or available_bytes
    need: dict[str, int] = {target.name: estimate_bytes(target, batch, cfg)}
    if drafter is not None:
        need[f"{drafter.name} (drafter)"] = estimate_bytes(drafter, batch, cfg)
    per_device: dict[str, int] = {}
    for model, (name, n) in zip([target, drafter], need.items()):
        per_device[str(model.device)] = per_device.get(str(model.device), 0) + n
    for dev, n in per_device.items():
        free = available(torch.device(dev))
        if free is not None and n > free:
            parts = ", ".join(f"{k} {v / MB:.0f} MB" for k, v in need.items())
            raise NotEnoughMemory(
                f"this run needs about {n / MB:.0f} MB on {dev} ({parts}) but only {free / MB:.0f} MB are free; "
                f"lower batch_size (now {batch}) or the image size, load the models in bfloat16, stream the target's weights from the "
                f"cpu (the loaders' weights input), or put the drafter on another device")
    return need


@contextlib.contextmanager
def out_of_memory_advice(model: ImageARModel, batch: int) -> Iterator[None]:
    """Turn an allocator failure inside the block into NotEnoughMemory naming the model and what to lower."""
    try:
        yield
    except (torch.OutOfMemoryError, MemoryError) as e:
        if isinstance(e, NotEnoughMemory):
            raise
        streamer = getattr(model, "streamer", None)
        if streamer is not None:
            streamer.drop_all()  # the block that was in flight
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        raise NotEnoughMemory(
            f"{model.name} ran out of memory on {model.device} while sampling a batch of {batch} at grid "
            f"{model.grid}x{model.grid}; its caches were freed. Lower batch_size or the image size, load the models in "
            f"bfloat16/float16, stream the target's weights from the cpu (the loaders' weights input), or put the "
            f"drafter on another device ({type(e).__name__}: {str(e)[:200]})") from None
