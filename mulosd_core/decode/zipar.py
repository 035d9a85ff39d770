"""ZipAR (docs/DESIGN.md section 5.4): the target alone, every call feeds one token per active row
(next-set prediction over schedules.zipar_schedule)."""
from __future__ import annotations

import torch

from ..sampling import sample_tokens
from ..schedules import zipar_schedule
from .context import TARGET, Method, RunContext


def run(ctx: RunContext) -> tuple[torch.Tensor, torch.Tensor]:
    target = ctx.target
    tr = ctx.runner(target)
    streams = ctx.streams(tr.batch)
    tokens = torch.zeros(tr.batch, target.num_tokens, dtype=torch.long, device=target.device)
    done = 0
    for step in zipar_schedule(target.grid, ctx.method.zipar_window):
        out: dict[int, torch.Tensor] = {}
        feeds = [(src, at) for src, at in step.fed if at >= 0]
        with ctx.stats.timer("verify"):
            if any(at < 0 for _, at in step.fed):
                out[-1] = tr.prefill()
            if feeds:
                slots = torch.tensor([at for _, at in feeds], device=target.device)
                lg = tr.feed(tokens[:, [src for src, _ in feeds]], slots)
                for i, (_, at) in enumerate(feeds):
                    out[at] = lg[:, i]
        for fi, pos in step.sampled:
            tokens[:, pos] = sample_tokens(tr.probs(out[step.fed[fi][1]]), ctx.sampling, streams)
        done += len(step.sampled)
        ctx.report(done, tokens)
    ctx.stats.resampled = target.num_tokens * tr.batch
    return tokens, torch.full_like(tokens, TARGET)


METHOD = Method("zipar", needs_drafter=False, run=run,
                call_sizes=lambda method, target, drafter: (target.grid, 0))   # one token per row
