"""Sampling exactly as LlamaGen samples (upstream-facts A.6), with explicit random streams.

CFG combines raw logits as uncond + (cond - uncond) * scale, only when scale > 1; then
temperature, top-k (ties at the k-th value survive), top-p (the first token crossing the
threshold is kept), softmax. Every sample draws from one torch.Generator per batch
element, so sample i of a batch equals a batch-1 run seeded with seed + i.
"""
from __future__ import annotations

from dataclasses import dataclass, asdict
from typing import Sequence

import torch


@dataclass
class SamplingConfig:
    cfg_scale: float = 4.0
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        checks = [("cfg_scale", self.cfg_scale >= 0, ">= 0"), ("temperature", self.temperature >= 0, ">= 0"),
                  ("top_k", self.top_k >= 0, ">= 0 (0 = off)"), ("top_p", 0 < self.top_p <= 1, "in (0, 1]")]
        for name, ok, want in checks:
            if not ok:
                raise ValueError(f"sampling {name} must be {want}, got {getattr(self, name)}")

    @property
    def uses_cfg(self) -> bool:
        return self.cfg_scale > 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        return asdict(self)


def cfg_combine(logits: torch.Tensor, scale: float) -> torch.Tensor:
    """[2B, ...] rows ordered [cond; uncond] -> guided [B, ...]; a no-op split when scale <= 1."""
    if scale <= 1.0:
        return logits
    cond, uncond = logits.chunk(2, dim=0)
    return uncond + (cond - uncond) * scale


def process_logits(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Guided logits [..., V] -> probabilities the sampler draws from (one-hot argmax when greedy)."""
    if cfg.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.float32)
    logits = logits.float() / max(cfg.temperature, 1e-5)
    vocab = logits.shape[-1]
    if cfg.top_k > 0:
        k = min(max(cfg.top_k, 1), vocab)
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum > cfg.top_p
        drop[..., 1:] = drop[..., :-1].clone()
        drop[..., 0] = False
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits.softmax(-1)


class Streams:
    """One generator per batch element; `offset` separates the target's stream from the drafter's."""

    def __init__(self, seed: int, batch: int, device: torch.device | str = "cpu", offset: int = 0) -> None:
        self.seed, self.offset = int(seed), int(offset)
        self.gens = []
        for i in range(batch):
            g = torch.Generator(device=device)
            g.manual_seed((self.seed + i + self.offset * 1_000_003) % (2**63))
            self.gens.append(g)

    def __len__(self) -> int:
        return len(self.gens)

    def sample(self, probs: torch.Tensor, rows: Sequence[int] | None = None) -> torch.Tensor:
        """One token per row of probs [B, V] (or the listed batch rows) with that row's generator."""
        rows = range(probs.shape[0]) if rows is None else rows
        out = [torch.multinomial(probs[j], 1, generator=self.gens[i]) for j, i in enumerate(rows)]
        return torch.cat(out)

    def uniform(self, n: int, device=None) -> torch.Tensor:
        """[B, n] uniforms in [0, 1), one row per generator."""
        return torch.stack([torch.rand(n, generator=g, device=g.device) for g in self.gens]).to(device or self.gens[0].device)


def sample_tokens(probs: torch.Tensor, cfg: SamplingConfig, streams: Streams, rows: Sequence[int] | None = None) -> torch.Tensor:
    """Draw from probs [B, V]; argmax when greedy (no randomness consumed)."""
    if cfg.greedy:
        return probs.argmax(-1)
    return streams.sample(probs, rows)
