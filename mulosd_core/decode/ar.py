"""AR: prefill, then one target call per token with the KV cache.

The reference every speed-up is measured against, so it stays as lean as the model allows: positions
are preallocated and no host sync happens inside the loop except what sampling needs.
"""
from __future__ import annotations

import torch

from ..sampling import sample_tokens
from .context import TARGET, Method, RunContext


def run(ctx: RunContext) -> tuple[torch.Tensor, torch.Tensor]:
    tr = ctx.runner(ctx.target)
    streams = ctx.streams(tr.batch)
    n_tok, every = ctx.target.num_tokens, ctx.target.grid    # progress once per row
    tokens = torch.zeros(tr.batch, n_tok, dtype=torch.long, device=ctx.target.device)
    with ctx.stats.timer("verify"):
        logits = tr.prefill()
    for n in range(n_tok):
        tok = sample_tokens(tr.probs(logits), ctx.sampling, streams)
        tokens[:, n] = tok
        if (n + 1) % every == 0 or n + 1 == n_tok:
            ctx.report(n + 1, tokens)
        if n + 1 < n_tok:
            with ctx.stats.timer("verify"):
                logits = tr.feed(tok[:, None], tr.positions[n:n + 1])[:, 0]
    ctx.stats.resampled = n_tok * tr.batch
    return tokens, torch.full_like(tokens, TARGET)


METHOD = Method("ar", needs_drafter=False, run=run, call_sizes=lambda method, target, drafter: (1, 0))
