"""The plain AR sampler: prefill, then one target call per token with the KV cache.

This is the reference every speed-up is measured against, so it stays as lean as the
model allows: positions are preallocated, no host sync happens inside the loop except
what sampling needs, and time inside the model forward is counted separately.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from .cancel import Check, interruptible
from .models.kv_cache import cache_scope
from .models.protocol import ImageARModel
from .sampling import SamplingConfig, Streams, cfg_combine, process_logits, sample_tokens
from .stats import RunStats

# progress(done_tokens, total_tokens, tokens_so_far [B, N]); may raise to cancel.
Progress = Callable[[int, int, torch.Tensor], None]


@dataclass
class GenerationResult:
    tokens: torch.Tensor                 # [B, N] long, raster order
    images: Optional[torch.Tensor]       # [B, 3, H, W] in [0, 1], or None when decode=False
    stats: RunStats
    maps: Optional[torch.Tensor] = None  # [B, 3, grid, grid] acceptance maps (speculative methods)


def decode_images(model: ImageARModel, tokens: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model.decode(tokens)


def model_sampling(model, sampling: Optional[SamplingConfig] = None) -> SamplingConfig:
    """`sampling` when given, else the sampling the model was trained for (`model.default_sampling`,
    which the loaders set from the model's card; mulosd_core.models.registry), else SamplingConfig()."""
    if sampling is not None:
        return sampling
    return getattr(model, "default_sampling", None) or SamplingConfig()


def generate_ar(model: ImageARModel, cond, sampling: Optional[SamplingConfig] = None, seed: int = 0,
                progress: Optional[Progress] = None, decode: bool = True, mask: Optional[torch.Tensor] = None,
                progress_every: int = 0, interrupt: Optional[Check] = None) -> GenerationResult:
    """Sample [B, N] tokens one target call at a time; `cond` is class ids [B] or caption features.

    `interrupt()` is called before every model call and raises to cancel (mulosd_core.cancel)."""
    t_start = time.perf_counter()
    sampling = model_sampling(model, sampling)
    model = interruptible(model, interrupt)
    with torch.inference_mode(), cache_scope():
        rows = model.condition_rows(cond, sampling.uses_cfg, mask)
        batch = rows.rows // (2 if sampling.uses_cfg else 1)
        n_tok = model.num_tokens
        stats = RunStats(method="ar", batch=batch, tokens=n_tok)
        streams = Streams(seed, batch, model.device)
        cache = model.new_cache(rows.rows)
        tokens = torch.zeros(batch, n_tok, dtype=torch.long, device=model.device)
        positions = torch.arange(n_tok, device=model.device)
        fwd = 0.0
        t0 = time.perf_counter()
        logits = model.prefill(rows, cache)
        fwd += time.perf_counter() - t0
        every = progress_every or model.grid
        for n in range(n_tok):
            probs = process_logits(cfg_combine(logits, sampling.cfg_scale), sampling)
            tok = sample_tokens(probs, sampling, streams)
            tokens[:, n] = tok
            if progress is not None and ((n + 1) % every == 0 or n + 1 == n_tok):
                progress(n + 1, n_tok, tokens)
            if n + 1 < n_tok:
                fed = torch.cat([tok, tok]) if sampling.uses_cfg else tok
                t0 = time.perf_counter()
                logits = model.forward_tokens(fed[:, None], positions[n:n + 1], cache)[:, 0]
                fwd += time.perf_counter() - t0
        stats.target_calls = n_tok
        stats.resampled = n_tok * batch
        stats.seconds["forward"] = fwd
        stats.seconds["loop_overhead"] = time.perf_counter() - t_start - fwd
        images = None
        if decode:
            t0 = time.perf_counter()
            images = model.decode(tokens)
            stats.seconds["decode"] = time.perf_counter() - t0
    stats.seconds["total"] = time.perf_counter() - t_start
    return GenerationResult(tokens, images, stats)
