"""Speculative Jacobi decoding (docs/DESIGN.md section 5.5): the target alone refines a window of L drafts
by a p/q test. The test is the verifier's rule when SJD can run it (decode.rules: Rule.sjd_label; "gsd"
makes this GSD, docs/DESIGN.md section 5.6), else exact speculative sampling; a rejection resamples from
the rule's residual."""
from __future__ import annotations

import torch

from .. import verify
from ..sampling import sample_tokens
from ..schedules import jacobi_window
from .context import ACCEPTED, DRAFTER_STREAM, REJECTED, TARGET, Method, RunContext
from .rules import RULES, Rule


def sjd_rule(verifier) -> Rule:
    """The rule SJD runs for a verifier: its own when it is a p/q test SJD can run, else exact."""
    rule = RULES[verifier.rule]
    return rule if rule.sjd_label else RULES["exact"]


def run(ctx: RunContext) -> tuple[torch.Tensor, torch.Tensor]:
    target, v = ctx.target, ctx.method.verifier
    tr = ctx.runner(target)
    B, N, V, L = tr.batch, target.num_tokens, target.vocab_size, ctx.method.sjd_window
    ts, ds = ctx.streams(B), ctx.streams(B, offset=DRAFTER_STREAM)
    rule = sjd_rule(v)
    tables = rule.prepare(v, target)
    tokens = torch.zeros(B, N, dtype=torch.long, device=target.device)
    codes = torch.full_like(tokens, TARGET)
    drafts = torch.stack([torch.randint(0, V, (N,), generator=g, device=target.device) for g in ds.gens])
    q = torch.zeros(B, N, V, device=target.device)       # distribution each draft was drawn from
    q.scatter_(-1, drafts[..., None], 1.0)                # fresh drafts: one-hot q (upstream's 'random' init)
    with ctx.stats.timer("verify"):
        logits0 = tr.prefill()
    f = 0
    while f < N:
        n = jacobi_window(f, N, L)
        tokens[:, f:f + n] = drafts[:, f:f + n]
        with ctx.stats.timer("verify"):
            parts = [logits0[:, None]] if f == 0 else []
            a = max(f, 1)
            if f + n > a:
                parts.append(tr.feed(tokens[:, a - 1:f + n - 1], tr.positions[a - 1:f + n - 1]))
            p = tr.probs(torch.cat(parts, 1))                       # [B, n, V]
            x = tokens[:, f:f + n]
            acc, aux = rule.test(tables, v, p, x, q[:, f:f + n], ds.uniform(n))
        cut = verify.raster_cut(~acc)
        j = int(cut.min())
        ctx.stats.drafted += n * B
        ctx.stats.accepted += j * B
        codes[:, f:f + j] = ACCEPTED
        if j < n:
            with ctx.stats.timer("resample"):
                for b in range(B):
                    if int(cut[b]) == j:
                        dist = rule.residual(tables, v, p[b, j], q[b, f + j], x[b, j], None if aux is None else aux[b, j])
                        tokens[b, f + j] = sample_tokens(dist[None], ctx.sampling, ts, [b])[0]
                        codes[b, f + j] = REJECTED
                        ctx.stats.resampled += 1
                    else:
                        codes[b, f + j] = ACCEPTED
                        ctx.stats.accepted += 1
                # later window positions keep this iteration's samples as drafts, with p as their q
                for i in range(j + 1, n):
                    for b in range(B):
                        drafts[b, f + i] = sample_tokens(p[b, i:i + 1], ctx.sampling, ds, [b])[0]
                    q[:, f + i] = p[:, i]
            f += j + 1
        else:
            f += n
        ctx.stats.steps += 1
        ctx.report(f, tokens)
    return tokens, codes


METHOD = Method("sjd", needs_drafter=False, run=run,
                call_sizes=lambda method, target, drafter: (min(target.num_tokens, method.sjd_window), 0),
                label=lambda method: sjd_rule(method.verifier).sjd_label)
