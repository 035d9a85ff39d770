"""What every decoding method shares: the run context, a model's call bookkeeping, the method interface,
the result, and the acceptance-map codes.

The target and the drafter draw from separate random streams (sampling.Streams with different offsets),
so the target's samples do not depend on how much the drafter drew.

Timers (RunStats.seconds), one vocabulary for every method: "verify" (target calls: AR's and ZipAR's
token calls, a speculative chunk's verifying call, SJD's window), "draft" (drafter calls and drafting),
"upsample", "context" (re-encoding committed rows for a low-resolution drafter), "resample" (target
calls and sampling outside the verifying call), "decode" (VQ decoder), "total".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from ..models.protocol import ImageARModel
from ..sampling import SamplingConfig, Streams, cfg_combine, process_logits
from ..stats import RunStats

DRAFTER_STREAM = 1   # Streams offset of the drafter and of acceptance uniforms

# Progress(done_tokens, total_tokens, tokens_so_far [B, N]); may raise to cancel.
Progress = Callable[[int, int, torch.Tensor], None]

# acceptance-map codes and colours: accepted, rejected, resampled neighbour, target-sampled
MAP_COLOURS = torch.tensor([[0.16, 0.65, 0.27], [0.86, 0.18, 0.15], [0.98, 0.75, 0.18], [0.25, 0.45, 0.85]])
ACCEPTED, REJECTED, NEIGHBOUR, TARGET = 0, 1, 2, 3


@dataclass
class GenerationResult:
    tokens: torch.Tensor                 # [B, N] long, raster order
    images: Optional[torch.Tensor]       # [B, 3, H, W] in [0, 1], or None when decode=False
    stats: RunStats
    maps: Optional[torch.Tensor] = None  # [B, 3, grid, grid] acceptance maps


def acceptance_map(codes: torch.Tensor, grid: int) -> torch.Tensor:
    """Codes [B, N] -> colour image [B, 3, grid, grid] in [0, 1]."""
    return MAP_COLOURS.to(codes.device)[codes].reshape(-1, grid, grid, 3).permute(0, 3, 1, 2).contiguous()


def map_codes(maps: torch.Tensor) -> torch.Tensor:
    """Acceptance maps [B, 3, g, g] -> codes [B, g*g]: the inverse of `acceptance_map`, for tools that
    read the maps back. A pixel that is none of MAP_COLOURS means the input is not an acceptance map."""
    px = maps.permute(0, 2, 3, 1).reshape(maps.shape[0], -1, 1, 3)
    best = (px - MAP_COLOURS.to(maps.device)).abs().amax(-1).min(-1)
    if best.values.numel() and float(best.values.max()) > 1e-6:
        raise ValueError(f"map_codes: maps is not an acceptance map: a pixel is {float(best.values.max()):.3g} "
                         f"away from every colour in MAP_COLOURS")
    return best.indices


class Runner:
    """Cache + condition + logits bookkeeping of one model for one run; counts its calls in `counter`."""

    def __init__(self, model: ImageARModel, cond, sampling: SamplingConfig, mask, stats: RunStats, counter: str) -> None:
        self.model, self.sampling, self.stats, self.counter = model, sampling, stats, counter
        self.rows = model.condition_rows(cond, sampling.uses_cfg, mask)
        self.cache = model.new_cache(self.rows.rows)
        self.cfg = sampling.uses_cfg
        self.batch = self.rows.rows // (2 if self.cfg else 1)
        self.positions = torch.arange(model.num_tokens, device=model.device)

    def _count(self) -> None:
        setattr(self.stats, self.counter, getattr(self.stats, self.counter) + 1)

    def prefill(self) -> torch.Tensor:
        self._count()
        return self.model.prefill(self.rows, self.cache)

    def feed(self, tokens: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """tokens [B, n] at image slots [n] -> raw logits [R, n, V] (rows duplicated for CFG)."""
        self._count()
        fed = torch.cat([tokens, tokens]) if self.cfg else tokens
        return self.model.forward_tokens(fed, slots, self.cache)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        return process_logits(cfg_combine(logits, self.sampling.cfg_scale), self.sampling)


@dataclass
class RunContext:
    """One run's inputs, shared by every method: models, condition, sampling, the method's config
    (decode.config.MethodConfig), seed, inpainting mask, statistics and the progress callback."""
    target: ImageARModel
    drafter: Optional[ImageARModel]
    cond: Any
    sampling: SamplingConfig
    method: Any
    seed: int
    mask: Optional[torch.Tensor]
    stats: RunStats
    progress: Optional[Progress]

    def runner(self, model: ImageARModel, counter: str = "target_calls") -> Runner:
        return Runner(model, self.cond, self.sampling, self.mask, self.stats, counter)

    def streams(self, batch: int, model: Optional[ImageARModel] = None, offset: int = 0) -> Streams:
        return Streams(self.seed, batch, (model or self.target).device, offset=offset)

    def report(self, done: int, tokens: torch.Tensor) -> None:
        if self.progress is not None:
            self.progress(done, self.target.num_tokens, tokens)


@dataclass(frozen=True)
class Method:
    """A decoding method: what it is called, whether it needs a drafter, how it runs, and the largest call
    it makes (for the memory check before a run)."""
    name: str
    needs_drafter: bool
    run: Callable[[RunContext], tuple[torch.Tensor, torch.Tensor]]   # -> tokens [B, N], map codes [B, N]
    call_sizes: Callable[[Any, ImageARModel, Optional[ImageARModel]], tuple[int, int]]
    label: Callable[[Any], str] = lambda method: method.method        # RunStats.method of a run
