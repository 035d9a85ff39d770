"""Teach a self-drafter the contexts parallel drafting shows it (docs/DESIGN.md section 3.4).

Parallel drafting starts row r+1 while row r is still being drafted, so a draft at (r+1, c) sees
only the first columns of the row above: a context the model never meets in raster training.
`schedules.parallel_draft_layout` writes the whole drafting schedule as one sequence with an
attention mask; training on it is teacher forcing on exactly what the drafter will see (the
layout's exactness against the KV-cache replay is a test).
"""
from __future__ import annotations

from functools import lru_cache

import torch

from ..models.llamagen_gpt import LlamaGenGPT
from ..schedules import parallel_draft_layout


@lru_cache(maxsize=None)
def _layout_tensors(W: int, window: int, cond_len: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sources [E], sequence positions [cond_len + E], attention mask [S, S], and for each grid position n
    the sequence output that predicts it [W * W]). Built once per (W, window)."""
    lay = parallel_draft_layout(W, window)
    E = len(lay.source)
    S = cond_len + E
    mask = torch.zeros(S, S, dtype=torch.bool)
    mask[:cond_len, :cond_len] = torch.ones(cond_len, cond_len, dtype=torch.bool).tril()   # the prefix is causal
    mask[cond_len:, :cond_len] = True
    for e, seen in enumerate(lay.sees):
        mask[cond_len + e, [cond_len + j for j in seen]] = True
    positions = torch.cat([torch.arange(cond_len), cond_len + torch.tensor(lay.slot)])
    predictor = torch.empty(W * W, dtype=torch.long)
    predictor[0] = cond_len - 1   # the prefix's last output predicts position 0
    for e, n in enumerate(lay.target):
        if n >= 0:
            predictor[n] = cond_len + e
    return torch.tensor(lay.source), positions, mask, predictor


def parallel_logits(model: LlamaGenGPT, tokens: torch.Tensor, cond: torch.Tensor, grid: int, window: int,
                    layers: int | None = None) -> torch.Tensor:
    """Logits [B, N, V] where logits[:, n] predicts grid position n as parallel drafting at `window`
    would, teacher-forced on `tokens` [B, N] (a grid x grid image drafted from an empty context).
    Class-conditioned models only: a t2i caption's padding mask is not applied here."""
    if model.config.model_type != "c2i":
        raise ValueError(f"parallel_logits: expected a c2i model (class ids), got a {model.config.model_type} model; "
                         f"t2i caption masks are not supported in parallel-context training")
    source, positions, mask, predictor = (t.to(tokens.device) for t in _layout_tensors(grid, window, model.cond_len))
    h = torch.cat([model.embed_condition(cond), model.tok_embeddings(tokens[:, source])], dim=1)
    return model.forward_embeddings(h, positions, grid, attn_mask=mask[None, None], layers=layers)[:, predictor]
