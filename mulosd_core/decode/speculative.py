"""The speculative method (docs/DESIGN.md sections 2 and 4): draft -> upsample -> verify -> expand ->
resample -> commit. SD, LANTERN and every MuLo-SD variant are settings of this step: drafter resolution,
acceptance rule (decode.rules), local or raster rejection, serial or island resampling, sequential or
parallel drafting."""
from __future__ import annotations

from typing import Optional

import torch

from .. import verify
from ..cancel import check_now
from ..recheck import ContextClock
from ..sampling import sample_tokens
from ..schedules import parallel_draft_schedule
from ..upsample import downsample_rows, resolution_ratio, upsample_logits, upsample_rows
from .context import ACCEPTED, DRAFTER_STREAM, NEIGHBOUR, REJECTED, TARGET, Method, RunContext
from .rules import RULES


class Speculative:
    """One speculative run: the drafter's and the target's caches, the tokens and map codes so far."""

    def __init__(self, ctx: RunContext) -> None:
        target, drafter = ctx.target, ctx.drafter
        self.target, self.drafter, self.sampling, self.method, self.stats = target, drafter, ctx.sampling, ctx.method, ctx.stats
        self.ctx = ctx
        self.ratio = resolution_ratio(target.grid, drafter.grid)   # the pair was checked by generate
        self.verifier = ctx.method.verifier
        self.rule = RULES[self.verifier.rule]
        self.grid, self.num_tokens, self.drafter_grid = target.grid, target.num_tokens, drafter.grid
        self.target_run = ctx.runner(target, "target_calls")
        self.drafter_run = ctx.runner(drafter, "drafter_calls")
        self.batch = self.target_run.batch
        dev = target.device
        self.target_streams = ctx.streams(self.batch)
        self.drafter_streams = ctx.streams(self.batch, drafter, offset=DRAFTER_STREAM)
        self.tokens = torch.zeros(self.batch, self.num_tokens, dtype=torch.long, device=dev)
        self.codes = torch.full((self.batch, self.num_tokens), TARGET, dtype=torch.long, device=dev)
        self.drafter_fed = torch.full((self.batch, drafter.num_tokens), -1, dtype=torch.long, device=drafter.device)
        self.target_stale = self.num_tokens   # first target slot whose K/V a resample left stale (N: none)
        self.target_logits0: Optional[torch.Tensor] = None    # prefill logits: the first position's
        self.drafter_logits0: Optional[torch.Tensor] = None   # distributions, set by run()
        self.aux = None                                       # the last test's aux for its residual (decode.rules)
        self.clock = ContextClock(self.batch, self.num_tokens, dev)   # for recheck rounds (our extension)
        self.tables = self.rule.prepare(self.verifier, target)

    # -- drafter ------------------------------------------------------------------------
    def _context(self, f: int) -> torch.Tensor:
        """The drafter's context: committed target rows, re-encoded at the drafter's resolution."""
        if self.ratio == 1:
            return self.tokens[:, :f]
        rows = (f // self.grid) // self.ratio * self.ratio
        with self.stats.timer("context"):
            return downsample_rows(self.method.upsampler, self.drafter, self.target, self.tokens, rows)

    def _sync(self, ctx: torch.Tensor) -> torch.Tensor:
        """Bring the drafter's cache to `ctx`; return raw logits [R, V] predicting position len(ctx)."""
        L = ctx.shape[1]
        self.drafter_run.model.truncate(self.drafter_run.cache, L)
        self.drafter_fed[:, L:] = -1
        if L == 0:
            return self.drafter_logits0
        diff = (ctx != self.drafter_fed[:, :L]).any(0).nonzero()
        start = min(int(diff[0]) if len(diff) else L, L - 1)
        logits = self.drafter_run.feed(ctx[:, start:], self.drafter_run.positions[start:L])
        self.drafter_fed[:, start:L] = ctx[:, start:]
        return logits[:, -1]

    def _draft_sequential(self, start: int, n: int, logits: torch.Tensor) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Draft n tokens from drafter position `start`; returns tokens [B, n] and q [B, n, V] (r = 1)."""
        toks = torch.empty(self.batch, n, dtype=torch.long, device=self.drafter.device)
        qs = [] if self.ratio == 1 else None
        for j in range(n):
            q = self.drafter_run.probs(logits)
            toks[:, j] = sample_tokens(q, self.sampling, self.drafter_streams)
            if qs is not None:
                qs.append(q)
            if j + 1 < n:
                logits = self.drafter_run.feed(toks[:, j:j + 1], self.drafter_run.positions[start + j:start + j + 1])[:, 0]
                self.drafter_fed[:, start + j] = toks[:, j]
        return toks, (torch.stack(qs, 1) if qs is not None else None)

    def _draft_parallel(self, row0: int, rows: int, logits0: torch.Tensor) -> torch.Tensor:
        """ZipAR-style drafting of `rows` low-res rows from row `row0` (schedules.parallel_draft_schedule)."""
        Wq, base = self.drafter_grid, row0 * self.drafter_grid
        block = torch.zeros(self.batch, rows * Wq, dtype=torch.long, device=self.drafter.device)
        last_ctx = self.drafter_fed[:, base - 1] if base > 0 else None
        for step in parallel_draft_schedule(rows, Wq, self.method.parallel_window):
            feeds = [(src, at) for src, at in step.fed if at >= 0]
            out = {}
            if feeds:
                src_tok = torch.stack([(block[:, s] if s >= 0 else (last_ctx if last_ctx is not None else block[:, 0]))
                                       for s, _ in feeds], 1)
                slots = torch.tensor([base + at for _, at in feeds], device=self.drafter.device)
                lg = self.drafter_run.feed(src_tok, slots)
                for i, (_, at) in enumerate(feeds):
                    out[at] = lg[:, i]
                for i, (s, at) in enumerate(feeds):
                    self.drafter_fed[:, base + at] = src_tok[:, i] if s == at else -2
            for fi, pos in step.sampled:
                at = step.fed[fi][1]
                lg = logits0 if at < 0 else out[at]
                q = self.drafter_run.probs(lg)
                block[:, pos] = sample_tokens(q, self.sampling, self.drafter_streams)
        return block

    # -- target ---------------------------------------------------------------------------
    def _target_probs(self, lo: int, hi: int) -> torch.Tensor:
        """Target probabilities [B, hi-lo, V] for positions lo..hi-1, feeding tokens lo-1..hi-2."""
        parts = []
        a = lo
        if lo == 0:
            parts.append(self.target_logits0[:, None])
            a = 1
        if hi > a:
            s = min(a - 1, self.target_stale)   # re-feed tokens whose K/V went stale (their logits are dropped)
            parts.append(self.target_run.feed(self.tokens[:, s:hi - 1], self.target_run.positions[s:hi - 1])[:, a - 1 - s:])
            self.target_stale = self.num_tokens
        return self.target_run.probs(torch.cat(parts, 1))

    def _sample_at(self, probs: torch.Tensor, b: int, pos: list[int], base: int) -> None:
        self.tokens[b, pos] = sample_tokens(probs[b, [p - base for p in pos]], self.sampling, self.target_streams, [b] * len(pos))

    # -- one step -----------------------------------------------------------------------------
    def step(self, first: int) -> int:
        """One chunk from position `first`: draft -> upsample -> verify -> (expand -> resample) -> commit.
        Returns the first position of the next chunk."""
        draft, q = self._draft(first)
        end = first + draft.shape[1]
        self.stats.drafted += draft.numel()
        self.tokens[:, first:end] = draft
        bonus = self.verifier.rejection == "raster" and end < self.num_tokens   # raster: the next token's p
        with self.stats.timer("verify"):
            probs = self._target_probs(first, end + int(bonus))
            accepted = self._accept(probs[:, :draft.shape[1]], draft, q)
        self.stats.steps += 1
        if self.verifier.rejection == "raster":
            return self._commit_raster(first, end, probs, accepted, draft, q)
        return self._commit_local(first, end, probs, accepted)

    def _draft(self, first: int) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Drafts [B, n] for the chunk from `first`, at the target's resolution, and the distributions they
        were drawn from [B, n, V]: the drafter's (r = 1) or the learned upsampler's (`draw`), else None."""
        ctx = self._context(first)
        with self.stats.timer("draft"):
            logits = self._sync(ctx)
            if self.ratio == 1:
                rows_end = (first // self.grid + self.method.rows_per_step) * self.grid
                end = min(self.num_tokens, first + self.method.draft_len if self.method.draft_len else rows_end)
                return self._draft_sequential(first, end - first, logits)
            row0 = ctx.shape[1] // self.drafter_grid
            rows = min(self.method.rows_per_step, self.drafter_grid - row0)
            if self.method.parallel_window and rows > 1:
                low = self._draft_parallel(row0, rows, logits)
            else:
                low, _ = self._draft_sequential(ctx.shape[1], rows * self.drafter_grid, logits)
        up_cfg = self.method.upsampler
        if up_cfg.kind == "learned":
            check_now(self.target)   # a network of its own, not one of the models' calls
        chunk0 = row0 * self.ratio * self.grid   # the low-res rows cover target rows from here
        end = min(self.num_tokens, chunk0 + rows * self.ratio * self.grid)
        with self.stats.timer("upsample"):
            if not up_cfg.draw:
                up = upsample_rows(up_cfg, self.drafter, self.target, low, rows, ctx)
                return up[:, first - chunk0:end - chunk0], None
            # distribution-valued: each draft is drawn from q, which the rule's p/q test then reads
            logits = upsample_logits(up_cfg, self.drafter, self.target, low, rows, ctx)[:, first - chunk0:end - chunk0]
            q = torch.softmax(logits.float(), -1).to(self.target.device)
            return self._draw(q), q

    def _draw(self, q: torch.Tensor) -> torch.Tensor:
        """Drafts [B, n] drawn from q [B, n, V], image b from its drafter stream."""
        n = q.shape[1]
        return self.drafter_streams.sample(q.reshape(-1, q.shape[-1]), [b for b in range(self.batch) for _ in range(n)]).view(self.batch, n)

    def _accept(self, probs: torch.Tensor, draft: torch.Tensor, q: Optional[torch.Tensor]) -> torch.Tensor:
        if self.method.oracle:
            return torch.ones_like(draft, dtype=torch.bool)
        u = self.drafter_streams.uniform(draft.shape[1], draft.device) if self.rule.needs_q else None
        accepted, self.aux = self.rule.test(self.tables, self.verifier, probs, draft, q, u)
        return accepted

    def _repeatable_test(self, probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """A recheck round's test: the rule again, on the current tokens (the rule is repeatable)."""
        return self.rule.test(self.tables, self.verifier, probs, tokens, None, None)[0]

    def _commit_raster(self, f, e, probs, accepted, draft, q) -> int:
        """Classic rejection: keep the accepted prefix, correct the first rejection, drop the rest."""
        n = e - f
        cut = verify.raster_cut(~accepted)              # [B], n where all accepted
        j = int(cut.min())
        self.codes[:, f:f + j] = ACCEPTED
        self.stats.accepted += j * self.batch
        if j < n:  # some sample rejected position f + j
            with self.stats.timer("resample"):
                p = probs[:, j]
                for b in range(self.batch):
                    if int(cut[b]) == j:
                        pb = self.rule.residual(self.tables, self.verifier, p[b], None if q is None else q[b, j], draft[b, j],
                                                None if self.aux is None else self.aux[b, j])
                        self.tokens[b, f + j] = sample_tokens(pb[None], self.sampling, self.target_streams, [b])[0]
                        self.codes[b, f + j] = REJECTED
                        self.stats.resampled += 1
                    else:
                        self.codes[b, f + j] = ACCEPTED
                        self.stats.accepted += 1
            return f + j + 1
        if e < self.num_tokens:  # all accepted: the verify call already gives the next token
            with self.stats.timer("resample"):
                for b in range(self.batch):
                    self._sample_at(probs, b, [e], f)
                self.codes[:, e] = TARGET
                self.stats.resampled += self.batch
            return e + 1
        return e

    def _commit_local(self, f, e, probs, accepted) -> int:
        """Local rejection: grow rejections into neighbourhoods, resample them, keep the rest (steps 4-5)."""
        W = self.grid
        r0, r1 = f // W, (e - 1) // W + 1
        inside = torch.zeros(self.batch, (r1 - r0) * W, dtype=torch.bool, device=accepted.device)
        inside[:, f - r0 * W:e - r0 * W] = True
        rej = torch.zeros_like(inside)
        rej[:, f - r0 * W:e - r0 * W] = ~accepted
        region = verify.expand_local(rej.view(self.batch, r1 - r0, W), self.verifier.expansion_radius).view(self.batch, -1) & inside
        base = r0 * W
        self.codes[:, f:e] = ACCEPTED
        self.clock.verified(f, e)
        codes = self.codes[:, base:r1 * W]
        codes[region] = NEIGHBOUR
        codes[rej] = REJECTED
        n_region = int(region.sum())
        self.stats.accepted += int(inside.sum()) - n_region
        self.stats.resampled += n_region
        if n_region == 0:
            self.stats.waves.append(0)
            self._pool_commit(f, e, probs)
            return e
        with self.stats.timer("resample"):
            waves = self._resample(region.view(self.batch, r1 - r0, W), base, f, e, probs)
            for _ in range(self.verifier.recheck):
                more = self._recheck(base, r1 - r0, e)
                if more is None:
                    break
                self.stats.recheck_rounds += 1
                waves += more
            else:
                self.stats.recheck_exhausted += int(self.verifier.recheck > 0)
        self.stats.waves.append(waves)   # one entry per step, recheck rounds' waves added
        self._pool_commit(f, e, probs)
        return e

    def _pool_commit(self, f: int, e: int, probs: torch.Tensor) -> None:
        """VerifierConfig.commit = "pool": every position of the chunk still holding an accepted draft gets a
        code drawn from the target's distribution there restricted to the draft's neighbour pool (renormalised;
        the test guarantees mass >= tau). Changed tokens were fed as drafts, so the next verify re-feeds them."""
        if self.verifier.commit != "pool":
            return
        with self.stats.timer("resample"):
            acc = self.codes[:, f:e] == ACCEPTED
            p = probs[:, :e - f]
            pool = torch.zeros_like(p).scatter_(-1, self.tables.neighbours.long()[self.tokens[:, f:e]], 1.0) * p
            mass = pool.sum(-1)
            acc &= mass > 0
            first = None
            for b in range(self.batch):
                idx = acc[b].nonzero().flatten()
                if not len(idx):
                    continue
                new = sample_tokens(pool[b, idx] / mass[b, idx, None], self.sampling, self.target_streams, [b] * len(idx))
                moved = idx[new != self.tokens[b, f + idx]]
                self.tokens[b, f + idx] = new
                if len(moved):
                    first = f + int(moved.min()) if first is None else min(first, f + int(moved.min()))
            if first is not None:
                self.target_stale = min(self.target_stale, first)

    def _recheck(self, base: int, rows: int, e: int) -> Optional[int]:
        """One round of `VerifierConfig.recheck`: the stale tokens in scope are verified again given the
        current tokens (one target call, which also refreshes stale K/V), and those that fail are
        resampled. Returns the round's resampling waves, None when nothing failed. Tokens before the
        first failure are all current afterwards, so that position moves forward and the rounds end.
        """
        stale = self.clock.stale(base, e)
        if self.verifier.recheck_scope == "drafts":
            stale &= self.codes[:, base:e] == ACCEPTED
        if not bool(stale.any()):
            return None
        lo = base + int(stale.any(0).nonzero().min())
        probs = self._target_probs(lo, e)
        tokens = self.tokens[:, lo:e]
        ok = self._repeatable_test(probs, tokens)
        check = stale[:, lo - base:]
        fail = check & ~ok
        self.clock.confirmed(lo, e, check & ok)
        n_fail = int(fail.sum())
        if n_fail == 0:
            return None
        drafts = int((fail & (self.codes[:, lo:e] == ACCEPTED)).sum())
        self.codes[:, lo:e][fail] = REJECTED
        self.stats.accepted -= drafts
        self.stats.resampled += drafts
        self.stats.rechecked += n_fail
        region = torch.zeros(self.batch, rows * self.grid, dtype=torch.bool, device=fail.device)
        region[:, lo - base:e - base] = fail
        return self._resample(region.view(self.batch, rows, self.grid), base, lo, e, probs)

    def _resample(self, region: torch.Tensor, base: int, f: int, e: int, probs: torch.Tensor) -> int:
        """Serial (raster order, one call each) or island waves (one call per wave for all islands);
        returns the number of waves (serial: positions)."""
        flat = region.view(self.batch, -1)
        if self.verifier.resampling == "serial":
            waves = [[(b, p) for b in flat[:, p].nonzero().flatten().tolist()] for p in flat.any(0).nonzero().flatten().tolist()]
        else:
            waves = [w.tolist() for w in verify.island_waves_batched(region)]
        if self.verifier.wave_feed == "local":
            return self._resample_local(waves, base, f, probs)
        # Invariant: tokens before kv_ok have current K/V and logits are current for positions <= kv_ok.
        kv_ok = e - 1
        lo = f
        for wave in waves:
            pos = [(b, base + p) for b, p in wave]
            top = max(p for _, p in pos)
            if top > kv_ok:
                new = self._target_probs(kv_ok + 1, top + 1)
                probs = torch.cat([probs[:, :kv_ok + 1 - lo], new, probs[:, top + 1 - lo:]], 1)
                kv_ok = top
            self._sample_wave(probs, pos, lo)
            kv_ok = min(kv_ok, min(p for _, p in pos))
        # Resampled tokens from kv_ok on were fed with their old values (and everything after them
        # attended those): the next verify call must re-feed them before reading any logits.
        self.target_stale = kv_ok
        return len(waves)

    def _sample_wave(self, probs: torch.Tensor, pos: list[tuple[int, int]], lo: int) -> None:
        """Sample one wave's positions (image b, position p) from `probs` (chunk distributions from `lo`)."""
        per_b: dict[int, list[int]] = {}
        for b, p in pos:
            per_b.setdefault(b, []).append(p)
        for b, ps in per_b.items():
            self._sample_at(probs, b, ps, lo)
            self.clock.sampled(b, ps)
        self.clock.wave_done()

    def _resample_local(self, waves: list[list[list[int]]], base: int, lo: int, probs: torch.Tensor) -> int:
        """Island waves that feed only what changed (VerifierConfig.wave_feed = "local").

        Wave 1 reads the verify call's distributions, which are current (nothing changed yet). Each later
        wave makes one call that feeds the tokens the previous wave sampled (their K/V were written with
        the old drafts) and the token before every position it samples (to read that position's logits);
        every other token of the chunk keeps the K/V of the verify call. So a wave costs about one AR call
        per island instead of a re-read of the chunk from the first change on; the price is that a
        resampled token sees accepted tokens whose deeper-layer K/V still reflect the old drafts before
        it. Serial resampling with everything rejected still reproduces AR exactly (nothing in between
        is accepted). The committed K/V are exact: the next verify re-feeds from the first change.
        """
        previous: list[int] = []
        exact = None   # first slot whose K/V no longer match the tokens before it (None: all do)
        for i, wave in enumerate(waves):
            pos = [(b, base + p) for b, p in wave]
            if i:
                slots = sorted(set(previous) | {p - 1 for _, p in pos})
                new = self.target_run.probs(self.target_run.feed(self.tokens[:, slots], self.target_run.positions[slots]))
                for j, s in enumerate(slots):
                    if s + 1 - lo < probs.shape[1]:
                        probs[:, s + 1 - lo] = new[:, j]
                fed = set(slots)
                while exact in fed:   # a slot fed on top of exact K/V is exact too
                    exact += 1
            self._sample_wave(probs, pos, lo)
            previous = sorted({p for _, p in pos})
            exact = previous[0] if exact is None else min(exact, previous[0])
        if exact is not None:   # the next verify re-feeds from here, so committed K/V are exact
            self.target_stale = min(self.target_stale, exact)
        return len(waves)

    def decode(self) -> tuple[torch.Tensor, torch.Tensor]:
        with self.stats.timer("verify"):
            self.target_logits0 = self.target_run.prefill()
        with self.stats.timer("draft"):
            self.drafter_logits0 = self.drafter_run.prefill()
        f = 0
        while f < self.num_tokens:
            f = self.step(f)
            self.ctx.report(f, self.tokens)
        return self.tokens, self.codes


def call_sizes(method, target, drafter) -> tuple[int, int]:
    """A step's chunk plus a row of stale or bonus positions. A low-resolution drafter may re-read its whole
    context (the committed rows are re-encoded each step), a same-resolution one at most the last chunk."""
    W, N = target.grid, target.num_tokens
    r = max(1, W // drafter.grid) if drafter is not None else 1
    if r > 1:
        return min(N, (method.rows_per_step * r + 1) * W + 1), drafter.num_tokens
    chunk = min(N, (method.draft_len or method.rows_per_step * W) + W + 1)
    return chunk, chunk


METHOD = Method("speculative", needs_drafter=True, run=lambda ctx: Speculative(ctx).decode(), call_sizes=call_sizes)
