"""Sampling exactly as LlamaGen samples (docs/DESIGN.md section 8), with explicit random streams.

CFG combines raw logits as uncond + (cond - uncond) * scale, only when scale > 1; then
temperature, top-k (ties at the k-th value survive), top-p (the first token crossing the
threshold is kept), softmax. Every sample draws from one torch.Generator per batch
element, so sample i of a batch equals a batch-1 run seeded with seed + i.
"""
from __future__ import annotations

from typing import Sequence

import torch

from .config import SamplingConfig   # its home is config.py (the model layer names it too); callers import it here


def cfg_combine(logits: torch.Tensor, scale: float) -> torch.Tensor:
    """[2B, ...] rows ordered [cond; uncond] -> guided [B, ...]; a no-op split when scale <= 1."""
    if scale <= 1.0:
        return logits
    cond, uncond = logits.chunk(2, dim=0)
    return uncond + (cond - uncond) * scale


def _top_k_top_p_fast(logits: torch.Tensor, k: int, top_p: float) -> torch.Tensor | None:
    """Top-k then top-p for float logits [..., V] on CPU, or None when ties make it differ from the general path.

    Without equal values among the k + 1 largest, the k survivors are exactly topk's values in order,
    the top-p cut is a prefix of them (its cumulative probability only grows), and the kept set is
    "logits >= the value of the last kept token": a handful of ops on k values instead of sorting
    the vocabulary (16384 codes on CPU: a full sort costs more than the rest of the sampler).
    """
    vals = torch.topk(logits, k + 1, dim=-1).values
    if bool((vals[..., 1:] == vals[..., :-1]).any()):
        return None  # ties: which equal token comes first is the sort's business, use the general path
    top = vals[..., :k]
    if top_p < 1.0:
        cum = top.softmax(-1).cumsum(-1)
        keep = 1 + (cum[..., :-1] <= top_p).sum(-1, keepdim=True)  # first token always kept, then until crossing
        threshold = top.gather(-1, keep - 1)
    else:
        threshold = top[..., -1:]
    return logits.masked_fill(logits < threshold, float("-inf"))


def process_logits(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Guided logits [..., V] -> probabilities the sampler draws from (one-hot argmax when greedy)."""
    if cfg.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.float32)
    logits = logits.float()
    if cfg.temperature != 1.0:  # dividing by exactly 1 changes nothing: skip the op
        logits = logits / max(cfg.temperature, 1e-5)
    vocab = logits.shape[-1]
    # k >= V removes nothing upstream (the k-th value is the minimum): skip it
    k = min(cfg.top_k, vocab) if cfg.top_k > 0 else vocab
    if k < vocab and cfg.top_p < 1.0 and logits.device.type == "cpu":
        fast = _top_k_top_p_fast(logits, k, cfg.top_p)
        if fast is not None:
            return fast.softmax(-1)
    if k < vocab:
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        # drop what comes after the first token whose cumulative probability crosses top_p (it is kept)
        drop = torch.cat([torch.zeros_like(cum[..., :1], dtype=torch.bool), cum[..., :-1] > cfg.top_p], dim=-1)
        remove = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device).scatter_(-1, order, drop)
        logits = logits.masked_fill(remove, float("-inf"))
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
        if probs.device.type != "cpu":
            return torch.cat([torch.multinomial(probs[j], 1, generator=self.gens[i]) for j, i in enumerate(rows)])
        # On CPU, torch.multinomial(p, 1) is ATen's single-sample path: argmax(p / q) with q ~ Exp(1) drawn
        # from the generator (the exponential form of the Gumbel-max trick). Doing that directly gives the
        # same draws and leaves the generators in the same state (checked in tests/core/test_sampling.py),
        # while skipping multinomial's per-call input checks and batching the division and argmax.
        if bool(torch.isnan(probs.sum())):  # what multinomial's checks would catch from softmax output
            raise ValueError("cannot sample: the probabilities are NaN (non-finite logits from the model?)")
        q = torch.empty_like(probs)
        for j, i in enumerate(rows):
            q[j].exponential_(1, generator=self.gens[i])
        return (probs / q).argmax(-1)

    def uniform(self, n: int, device=None) -> torch.Tensor:
        """[B, n] uniforms in [0, 1), one row per generator."""
        return torch.stack([torch.rand(n, generator=g, device=g.device) for g in self.gens]).to(device or self.gens[0].device)


def sample_tokens(probs: torch.Tensor, cfg: SamplingConfig, streams: Streams, rows: Sequence[int] | None = None) -> torch.Tensor:
    """Draw from probs [B, V]; argmax when greedy (no randomness consumed)."""
    if cfg.greedy:
        return probs.argmax(-1)
    return streams.sample(probs, rows)
