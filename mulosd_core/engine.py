"""The one decoding loop (docs/DESIGN.md sections 2 and 4). Every method is a configuration of it.

    generate(target, cond, sampling=None, method=None, drafter=None, seed=0)

sampling=None samples as the target was trained to (its card; ar.model_sampling); method=None is
MuLo-SD as shipped for the target's family (presets.mulo_islands; real models: the paper's settings).

- "ar":           one token per target call (the reference sampler in ar.py).
- "speculative":  draft -> upsample -> verify -> expand -> resample -> commit. SD, LANTERN
                  and every MuLo-SD variant are settings of this step (drafter resolution,
                  acceptance rule, local or raster rejection, serial or island resampling,
                  sequential or parallel drafting).
- "zipar":        target only, next-set schedule (schedules.zipar_schedule).
- "sjd":          target only, speculative Jacobi window with p/q acceptance; with
                  VerifierConfig(rule="gsd") it is GSD (grouped acceptance, verify.gsd_accept).

The target and the drafter draw from separate random streams (sampling.Streams with
different offsets), so the target's samples do not depend on how much the drafter drew.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, asdict
from typing import Callable, Optional

import torch

from . import verify
from .ar import GenerationResult, generate_ar, model_sampling
from .cancel import Check, check_now, interruptible
from .conditions import check_condition
from .memory import check_fits, out_of_memory_advice
from .models.kv_cache import cache_scope
from .models.protocol import ImageARModel
from .neighbours import cached_knn_table
from .recheck import ContextClock
from .sampling import SamplingConfig, Streams, cfg_combine, process_logits
from .schedules import parallel_draft_schedule, zipar_schedule, jacobi_window
from .stats import RunStats
from .upsample import UpsamplerConfig, downsample_rows, learned_net, resolution_ratio, upsample_rows

RULES = ("mulo", "lantern", "exact", "greedy", "gsd", "grouped")
REPEATABLE_RULES = ("mulo", "greedy", "grouped")   # deterministic tests: a recheck round can repeat them
REJECTIONS = ("local", "raster")
RESAMPLINGS = ("islands", "serial")
RECHECK_SCOPES = ("drafts", "all")
WAVE_FEEDS = ("local", "span")
COMMITS = ("draft", "pool")      # what an accepted position commits (VerifierConfig.commit)
METHODS = ("ar", "speculative", "zipar", "sjd")
DRAFTER_STREAM = 1   # Streams offset of the drafter and of acceptance uniforms

# acceptance-map codes and colours: accepted, rejected, resampled neighbour, target-sampled
MAP_COLOURS = torch.tensor([[0.16, 0.65, 0.27], [0.86, 0.18, 0.15], [0.98, 0.75, 0.18], [0.25, 0.45, 0.85]])
ACCEPTED, REJECTED, NEIGHBOUR, TARGET = 0, 1, 2, 3


@dataclass
class VerifierConfig:
    """How drafts are accepted, rejected and resampled. The defaults are the paper's method at this project's
    starting tau and k (presets.MULO_DEFAULTS["paper"]); the embedded families ship swept values
    (presets.mulo_verifier(family))."""

    rule: str = "mulo"
    tau: float = 0.3
    k_neighbours: int = 8
    expansion_radius: int = 1
    rejection: str = "local"
    resampling: str = "islands"
    lantern_delta: float = 0.1
    lantern_k: int = 0          # 0: upstream's 1000 of 16384 codes, scaled to the codebook (verify.lantern_neighbours)
    # GSD's group (verify.gsd_group): rank window, probability and squared-distance thresholds (docs/DESIGN.md section 5.6)
    gsd_rank_window: int = verify.GSD_RANK_WINDOW
    gsd_p_thr: float = verify.GSD_P_THR
    gsd_d_thr: float = verify.GSD_D_THR
    # Our extension, not in the paper: after resampling, verify tokens whose context changed again, in
    # their current context, and resample those that now fail; at most this many rounds (0 = the paper's
    # method). With local rejection it needs the mulo or greedy rule; under raster rejection it is a no-op.
    recheck: int = 0
    # What a recheck round verifies again: "drafts" (accepted drafts whose context changed after they were
    # verified) or "all" (also resampled tokens whose context changed after they were sampled).
    recheck_scope: str = "drafts"
    # How a resampling wave reaches the target (see _Speculative._resample_local): "local" feeds only the
    # tokens that changed and those whose logits the wave reads (about an AR call per wave); "span"
    # re-feeds the chunk from the first changed token, so every resampled token sees exact K/V.
    wave_feed: str = "local"
    # Our extension, not in the paper: what an accepted position commits. "draft" (the paper) keeps the
    # upsampled draft code; "pool" draws a code from the target's own distribution at that position (the
    # verify call computed it) restricted to the draft's neighbour pool: the draft fixes the neighbourhood,
    # the target supplies the texture. Needs the mulo rule and local rejection.
    commit: str = "draft"

    def __post_init__(self) -> None:
        for name, value, allowed in (("rule", self.rule, RULES), ("rejection", self.rejection, REJECTIONS),
                                     ("resampling", self.resampling, RESAMPLINGS),
                                     ("recheck_scope", self.recheck_scope, RECHECK_SCOPES),
                                     ("wave_feed", self.wave_feed, WAVE_FEEDS), ("commit", self.commit, COMMITS)):
            if value not in allowed:
                raise ValueError(f"verifier {name} must be one of {allowed}, got {value!r}")
        for name, ok, want in (("tau", self.tau >= 0, ">= 0"), ("k_neighbours", self.k_neighbours >= 1, ">= 1"),
                               ("expansion_radius", self.expansion_radius >= 0, ">= 0"),
                               ("lantern_delta", self.lantern_delta >= 0, ">= 0"), ("lantern_k", self.lantern_k >= 0, ">= 0 (0 = scaled to the codebook)"),
                               ("gsd_rank_window", self.gsd_rank_window >= 0, ">= 0"), ("gsd_p_thr", self.gsd_p_thr >= 0, ">= 0"),
                               ("gsd_d_thr", self.gsd_d_thr >= 0, ">= 0"),
                               ("recheck", self.recheck >= 0, ">= 0")):
            if not ok:
                raise ValueError(f"verifier {name} must be {want}, got {getattr(self, name)}")
        # Raster rejection keeps nothing after a rejection, so no kept token's context changes: recheck has
        # nothing to do there and is allowed (the defaults stay valid when only the rejection is switched).
        if self.recheck and self.rejection == "local" and self.rule not in REPEATABLE_RULES:
            raise ValueError(f"verifier recheck needs the mulo, greedy or grouped rule (a deterministic test that can be "
                             f"repeated), got rule {self.rule!r} with local rejection; set recheck to 0 for it")
        if self.commit == "pool" and (self.rule != "mulo" or self.rejection != "local"):
            raise ValueError(f"verifier commit 'pool' draws from the mulo rule's neighbour pool under local rejection, got "
                             f"rule {self.rule!r} with {self.rejection} rejection; set commit to 'draft' for it")


@dataclass
class MethodConfig:
    """A decoding method: which loop, its verifier and upsampler, and its drafting schedule (defaults: the
    paper's MuLo-SD with sequential drafting; presets.method_presets names every method)."""

    method: str = "speculative"
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    upsampler: UpsamplerConfig = field(default_factory=UpsamplerConfig)
    rows_per_step: int = 1           # low-res rows drafted per step
    parallel_window: int = 0         # ZipAR-style drafting window w (0 = sequential)
    draft_len: int = 0               # r = 1 only: tokens drafted per step (0 = to the end of the row)
    zipar_window: int = 8
    sjd_window: int = 16
    oracle: bool = False             # accept every draft: the speed ceiling of this pipeline

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        for name in ("rows_per_step", "zipar_window", "sjd_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("parallel_window", "draft_len"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def to_dict(self) -> dict:
        return asdict(self)


Progress = Callable[[int, int, torch.Tensor], None]


def check_pair(target: ImageARModel, drafter: ImageARModel, method: MethodConfig) -> int:
    """Validate a drafter/target pair before any model runs; returns the ratio r."""
    if drafter.codebook_id() != target.codebook_id():
        raise ValueError(f"drafter {drafter.name!r} and target {target.name!r} use different codebooks; "
                         "MuLo-SD needs both to share one VQ tokenizer")
    if drafter.model_type != target.model_type:
        raise ValueError(f"drafter {drafter.name!r} is {drafter.model_type} but target {target.name!r} "
                         f"is {target.model_type}; both must take the same conditioning")
    r = resolution_ratio(target.grid, drafter.grid)
    if method.upsampler.ratio is not None and method.upsampler.ratio != r:
        raise ValueError(f"upsampler ratio {method.upsampler.ratio} does not match the models: target grid {target.grid} / "
                         f"drafter grid {drafter.grid} = {r}")
    if r > 1 and method.verifier.rule in ("exact", "lantern", "gsd"):
        raise ValueError(f"acceptance rule {method.verifier.rule!r} needs the drafter's probability of each draft, "
                         f"which an upsampled (r = {r}) draft does not have; use 'mulo', 'grouped' or 'greedy', or a same-resolution drafter")
    if r == 1 and method.parallel_window:
        raise ValueError("parallel drafting is for a low-resolution drafter (r > 1); set parallel_window = 0 for r = 1")
    if r > 1 and method.upsampler.kind == "learned":
        learned_net(method.upsampler, target, r)   # file, ratio and codebook checked before any model runs
    return r


def check_run(target: ImageARModel, cond, method: MethodConfig, drafter: Optional[ImageARModel] = None,
              mask: Optional[torch.Tensor] = None) -> int:
    """What generate checks before any model runs: the drafter/target pair against the method (check_pair)
    and the condition against both models (conditions.check_condition). Settings check themselves when
    their configs are built. Errors name the input: "drafter/target: ...", "class_id: ...", "prompt: ...".
    Returns the batch: how many images the condition asks for."""
    if method.method == "speculative":
        if drafter is None:
            raise ValueError("drafter: the speculative method (MuLo-SD, the default) needs a drafter model; got none. "
                             "Pass drafter= (e.g. registry.load_embedded('drafter')), or sample with the target "
                             "alone: method=\"ar\" (or \"zipar\", \"sjd\")")
        try:
            check_pair(target, drafter, method)
        except ValueError as e:
            raise ValueError(f"drafter/target: {e}") from None
    batch = check_condition(target, cond, mask, "target")
    if method.method == "speculative":
        check_condition(drafter, cond, mask, "drafter")
    return batch


class _Runner:
    """Cache + condition + logits bookkeeping of one model for one run."""

    def __init__(self, model: ImageARModel, cond, sampling: SamplingConfig, mask, stats: RunStats, counter: str) -> None:
        self.model, self.sampling, self.stats, self.counter = model, sampling, stats, counter
        self.rows = model.condition_rows(cond, sampling.uses_cfg, mask)
        self.cache = model.new_cache(self.rows.rows)
        self.cfg = sampling.uses_cfg
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


def _draw(probs: torch.Tensor, sampling: SamplingConfig, streams: Streams, b: int) -> torch.Tensor:
    """Tokens [k] for rows of probs [k, V] of batch element b (argmax when greedy)."""
    if sampling.greedy:
        return probs.argmax(-1)
    return torch.multinomial(probs, 1, generator=streams.gens[b])[:, 0]


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


# ------------------------------------------------------------------------------ speculative
class _Speculative:
    def __init__(self, target, drafter, cond, sampling, method, seed, mask, stats, progress) -> None:
        self.target, self.drafter, self.sampling, self.method, self.stats, self.progress = target, drafter, sampling, method, stats, progress
        self.ratio = resolution_ratio(target.grid, drafter.grid)   # the pair was checked by generate
        self.verifier = method.verifier
        self.grid, self.num_tokens, self.drafter_grid = target.grid, target.num_tokens, drafter.grid
        self.target_run = _Runner(target, cond, sampling, mask, stats, "target_calls")
        self.drafter_run = _Runner(drafter, cond, sampling, mask, stats, "drafter_calls")
        self.batch = self.target_run.rows.rows // (2 if sampling.uses_cfg else 1)
        dev = target.device
        self.target_streams = Streams(seed, self.batch, dev)
        self.drafter_streams = Streams(seed, self.batch, drafter.device, offset=DRAFTER_STREAM)
        self.tokens = torch.zeros(self.batch, self.num_tokens, dtype=torch.long, device=dev)
        self.codes = torch.full((self.batch, self.num_tokens), TARGET, dtype=torch.long, device=dev)
        self.drafter_fed = torch.full((self.batch, drafter.num_tokens), -1, dtype=torch.long, device=drafter.device)
        self.target_stale = self.num_tokens   # first target slot whose K/V a resample left stale (N: none)
        self.target_logits0: Optional[torch.Tensor] = None    # prefill logits: the first position's
        self.drafter_logits0: Optional[torch.Tensor] = None   # distributions, set by run()
        self.lantern_used: Optional[torch.Tensor] = None      # LANTERN: whether each draft's pool used neighbours
        self.clock = ContextClock(self.batch, self.num_tokens, dev)   # for recheck rounds (our extension)
        if self.verifier.rule == "mulo":
            self.neighbours = cached_knn_table(target.codebook(), min(self.verifier.k_neighbours, target.vocab_size), include_self=True)
        elif self.verifier.rule == "lantern":
            raw = target.raw_codebook()
            self.lantern_k = verify.lantern_neighbours(target.vocab_size, self.verifier.lantern_k)
            self.neighbours = cached_knn_table(raw, min(self.lantern_k + 1, target.vocab_size - 1), include_self=False)
        elif self.verifier.rule in ("gsd", "grouped"):
            self.unit_codebook = _unit_codebook(target)

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
            toks[:, j] = torch.stack([_draw(q[b:b + 1], self.sampling, self.drafter_streams, b)[0] for b in range(self.batch)])
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
                block[:, pos] = torch.stack([_draw(q[b:b + 1], self.sampling, self.drafter_streams, b)[0] for b in range(self.batch)])
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
        toks = _draw(probs[b, [p - base for p in pos]], self.sampling, self.target_streams, b)
        self.tokens[b, pos] = toks

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
        """Drafts [B, n] for the chunk from `first`, at the target's resolution, and the drafter's
        distributions they were drawn from [B, n, V] (same-resolution drafter only; None once upsampled)."""
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
        if self.method.upsampler.kind == "learned":
            check_now(self.target)   # a network of its own, not one of the models' calls
        with self.stats.timer("upsample"):
            up = upsample_rows(self.method.upsampler, self.drafter, self.target, low, rows, ctx)
        chunk0 = row0 * self.ratio * self.grid   # the low-res rows cover target rows from here
        end = min(self.num_tokens, chunk0 + up.shape[1])
        return up[:, first - chunk0:end - chunk0], None

    def _accept(self, probs: torch.Tensor, draft: torch.Tensor, q: Optional[torch.Tensor]) -> torch.Tensor:
        if self.method.oracle:
            return torch.ones_like(draft, dtype=torch.bool)
        rule = self.verifier.rule
        if rule == "greedy":
            return verify.greedy_accept(probs, draft)
        if rule in ("mulo", "grouped"):
            return self._repeatable_test(probs, draft)
        q_x = q.gather(-1, draft[..., None])[..., 0]
        u = self.drafter_streams.uniform(draft.shape[1], draft.device)
        if rule == "exact":
            p_x = probs.gather(-1, draft[..., None])[..., 0]
            return verify.exact_accept(p_x, q_x, u)
        if rule == "gsd":
            return _gsd_accept(self.verifier, probs, q, draft, self.unit_codebook, u)
        pooled, self.lantern_used = verify.lantern_pool(probs, draft, self.neighbours, self.lantern_k, self.verifier.lantern_delta)
        return verify.lantern_test(pooled, q_x, u)

    def _repeatable_test(self, probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The deterministic acceptance test of the mulo, grouped or greedy rule (verify and recheck)."""
        v = self.verifier
        if v.rule == "mulo":
            return verify.mulo_accept(probs, tokens, self.neighbours, v.tau)
        if v.rule == "grouped":
            return verify.grouped_accept(probs, tokens, self.unit_codebook, v.tau, v.gsd_rank_window, v.gsd_p_thr,
                                         v.gsd_d_thr)
        return verify.greedy_accept(probs, tokens)

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
                        pb = p[b]
                        if self.verifier.rule in ("exact", "gsd"):
                            pb = verify.residual(pb, q[b, j])
                        elif self.verifier.rule == "lantern":
                            pb = verify.lantern_reject_update(pb, draft[b, j], self.neighbours, self.lantern_k, self.lantern_used[b, j])
                        self.tokens[b, f + j] = _draw(pb[None], self.sampling, self.target_streams, b)[0]
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
            pool = torch.zeros_like(p).scatter_(-1, self.neighbours.long()[self.tokens[:, f:e]], 1.0) * p
            mass = pool.sum(-1)
            acc &= mass > 0
            first = None
            for b in range(self.batch):
                idx = acc[b].nonzero().flatten()
                if not len(idx):
                    continue
                new = _draw(pool[b, idx] / mass[b, idx, None], self.sampling, self.target_streams, b)
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

    def run(self) -> tuple[torch.Tensor, torch.Tensor]:
        with self.stats.timer("verify"):
            self.target_logits0 = self.target_run.prefill()
        with self.stats.timer("draft"):
            self.drafter_logits0 = self.drafter_run.prefill()
        f = 0
        while f < self.num_tokens:
            f = self.step(f)
            if self.progress is not None:
                self.progress(f, self.num_tokens, self.tokens)
        return self.tokens, self.codes


# ------------------------------------------------------------------------- target-only
def _run_zipar(target: ImageARModel, cond, sampling, method: MethodConfig, seed, mask, stats, progress):
    """ZipAR (docs/DESIGN.md section 5.4): every forward feeds one token per active row (next-set prediction)."""
    tr = _Runner(target, cond, sampling, mask, stats, "target_calls")
    B = tr.rows.rows // (2 if sampling.uses_cfg else 1)
    streams = Streams(seed, B, target.device)
    tokens = torch.zeros(B, target.num_tokens, dtype=torch.long, device=target.device)
    done = 0
    for step in zipar_schedule(target.grid, method.zipar_window):
        out: dict[int, torch.Tensor] = {}
        feeds = [(src, at) for src, at in step.fed if at >= 0]
        if any(at < 0 for _, at in step.fed):
            out[-1] = tr.prefill()
        if feeds:
            slots = torch.tensor([at for _, at in feeds], device=target.device)
            lg = tr.feed(tokens[:, [src for src, _ in feeds]], slots)
            for i, (_, at) in enumerate(feeds):
                out[at] = lg[:, i]
        for fi, pos in step.sampled:
            probs = tr.probs(out[step.fed[fi][1]])
            tokens[:, pos] = torch.stack([_draw(probs[b:b + 1], sampling, streams, b)[0] for b in range(B)])
        done += len(step.sampled)
        if progress is not None:
            progress(done, target.num_tokens, tokens)
    stats.resampled = target.num_tokens * B
    return tokens, torch.full_like(tokens, TARGET)


def _unit_codebook(target: ImageARModel) -> torch.Tensor:
    """The target's codebook vectors l2-normalised, the space GSD's distance gate works in (verify.gsd_group)."""
    return torch.nn.functional.normalize(target.codebook().detach().float(), p=2, dim=-1)


def _gsd_accept(v: VerifierConfig, probs, q, draft, unit_codebook, u) -> torch.Tensor:
    return verify.gsd_accept(probs, q, draft, unit_codebook, u, v.gsd_rank_window, v.gsd_p_thr, v.gsd_d_thr)


def _run_sjd(target: ImageARModel, cond, sampling, method: MethodConfig, seed, mask, stats, progress):
    """Speculative Jacobi decoding (docs/DESIGN.md section 5.5): a window of L drafts refined by p/q acceptance.

    With verifier.rule == "gsd" it is Grouped Speculative Decoding (docs/DESIGN.md section 5.6): the same drafts,
    window and uniforms, the test over GSD's group (verify.gsd_accept), the same residual on rejection.
    Other verifier rules do not apply here (p/q acceptance).
    """
    tr = _Runner(target, cond, sampling, mask, stats, "target_calls")
    B, N, V, L = tr.rows.rows // (2 if sampling.uses_cfg else 1), target.num_tokens, target.vocab_size, method.sjd_window
    ts = Streams(seed, B, target.device)
    ds = Streams(seed, B, target.device, offset=DRAFTER_STREAM)
    tokens = torch.zeros(B, N, dtype=torch.long, device=target.device)
    codes = torch.full_like(tokens, TARGET)
    drafts = torch.stack([torch.randint(0, V, (N,), generator=g, device=target.device) for g in ds.gens])
    q = torch.zeros(B, N, V, device=target.device)       # distribution each draft was drawn from
    q.scatter_(-1, drafts[..., None], 1.0)                # fresh drafts: one-hot q (upstream's 'random' init)
    grouped = method.verifier.rule == "gsd"
    unit_codebook = _unit_codebook(target) if grouped else None
    logits0 = tr.prefill()
    f = 0
    while f < N:
        n = jacobi_window(f, N, L)
        tokens[:, f:f + n] = drafts[:, f:f + n]
        parts = [logits0[:, None]] if f == 0 else []
        a = max(f, 1)
        if f + n > a:
            parts.append(tr.feed(tokens[:, a - 1:f + n - 1], tr.positions[a - 1:f + n - 1]))
        p = tr.probs(torch.cat(parts, 1))                       # [B, n, V]
        x = tokens[:, f:f + n]
        p_x = p.gather(-1, x[..., None])[..., 0]
        q_x = q[:, f:f + n].gather(-1, x[..., None])[..., 0]
        u = ds.uniform(n)
        acc = (_gsd_accept(method.verifier, p, q[:, f:f + n], x, unit_codebook, u) if grouped
               else verify.exact_accept(p_x, q_x, u))
        cut = verify.raster_cut(~acc)
        j = int(cut.min())
        stats.drafted += n * B
        stats.accepted += j * B
        codes[:, f:f + j] = ACCEPTED
        if j < n:
            for b in range(B):
                if int(cut[b]) == j:
                    tokens[b, f + j] = _draw(verify.residual(p[b, j], q[b, f + j])[None], sampling, ts, b)[0]
                    codes[b, f + j] = REJECTED
                    stats.resampled += 1
                else:
                    codes[b, f + j] = ACCEPTED
                    stats.accepted += 1
            # later window positions keep this iteration's samples as drafts, with p as their q
            for i in range(j + 1, n):
                for b in range(B):
                    drafts[b, f + i] = _draw(p[b, i:i + 1], sampling, ds, b)[0]
                q[:, f + i] = p[:, i]
            f += j + 1
        else:
            f += n
        stats.steps += 1
        if progress is not None:
            progress(f, N, tokens)
    return tokens, codes


def call_sizes(method: MethodConfig, target: ImageARModel, drafter: Optional[ImageARModel] = None) -> tuple[int, int]:
    """The most positions one target call and one drafter call of this method compute (for the memory
    estimate before a run): AR one token, ZipAR one per row, SJD its window, a speculative step its chunk
    plus a row of stale or bonus positions. A low-resolution drafter may re-read its whole context (the
    committed rows are re-encoded each step), a same-resolution one at most the last chunk."""
    W, N = target.grid, target.num_tokens
    if method.method == "ar":
        return 1, 0
    if method.method == "zipar":
        return W, 0
    if method.method == "sjd":
        return min(N, method.sjd_window), 0
    r = max(1, W // drafter.grid) if drafter is not None else 1
    if r > 1:
        return min(N, (method.rows_per_step * r + 1) * W + 1), drafter.num_tokens
    chunk = min(N, (method.draft_len or method.rows_per_step * W) + W + 1)
    return chunk, chunk


def generate(target: ImageARModel, cond, sampling: Optional[SamplingConfig] = None,
             method: MethodConfig | str | None = None,
             drafter: Optional[ImageARModel] = None, seed: int = 0, mask: Optional[torch.Tensor] = None,
             progress: Optional[Progress] = None, decode: bool = True,
             interrupt: Optional[Check] = None) -> GenerationResult:
    """Run one method on a batch of conditions; returns tokens, images, statistics and acceptance maps.

    `cond`: class ids (a list, a tensor [B] or one int) for c2i, caption features for t2i, prompts for
    Janus-Pro. `method`: a MethodConfig, a method name ("ar", "zipar", "sjd", "speculative": that
    method at its config's defaults), or None for the shipped MuLo-SD settings of the target's family.

    Before anything runs, the memory the run needs is checked against what is free; every KV
    cache of the run is released when it ends, also when it fails or is cancelled, and an
    out-of-memory error becomes a NotEnoughMemory naming the model and what to lower.
    `interrupt()` is called before every model call (target, drafter, VQ encode/decode) and raises
    to cancel the run (mulosd_core.cancel); `progress` is called after every decoding step.
    """
    sampling = model_sampling(target, sampling)
    if method is None:
        from .presets import drafts_for_itself, model_family, mulo_islands  # presets imports this module
        method = mulo_islands(model_family(target), self_drafting=drafts_for_itself(target, drafter))
    elif isinstance(method, str):
        method = MethodConfig(method=method)
    elif not isinstance(method, MethodConfig):
        raise TypeError(f"method: expected a MethodConfig, a method name {METHODS} or None, got {type(method).__name__}")
    batch = check_run(target, cond, method, drafter, mask)
    used_drafter = drafter if method.method == "speculative" else None
    target_chunk, drafter_chunk = call_sizes(method, target, used_drafter)
    check_fits(batch, sampling.uses_cfg, target, used_drafter, target_chunk=target_chunk, drafter_chunk=drafter_chunk)
    gpus = sorted({m.device for m in (target, used_drafter) if m is not None and m.device.type == "cuda"}, key=str)
    for dev in gpus:
        torch.cuda.reset_peak_memory_stats(dev)
    with cache_scope() as caches, out_of_memory_advice(target, batch, used_drafter):
        res = _generate(interruptible(target, interrupt), cond, sampling, method, interruptible(drafter, interrupt),
                        seed, mask, progress, decode)
        res.stats.cache_bytes = sum(c.allocated_bytes for c in caches)
    res.stats.peak_memory_by_device = {str(dev): int(torch.cuda.max_memory_allocated(dev)) for dev in gpus}
    res.stats.peak_memory_bytes = sum(res.stats.peak_memory_by_device.values())
    return res


def _generate(target, cond, sampling, method, drafter, seed, mask, progress, decode) -> GenerationResult:
    if method.method == "ar":
        res = generate_ar(target, cond, sampling, seed, progress=progress, decode=decode, mask=mask)
        res.maps = acceptance_map(torch.full_like(res.tokens, TARGET), target.grid)
        return res
    t0 = time.perf_counter()
    gsd = method.method == "sjd" and method.verifier.rule == "gsd"
    stats = RunStats(method="gsd" if gsd else method.method, tokens=target.num_tokens)
    with torch.inference_mode():
        if method.method == "speculative":
            tokens, codes = _Speculative(target, drafter, cond, sampling, method, seed, mask, stats, progress).run()
        elif method.method == "zipar":
            tokens, codes = _run_zipar(target, cond, sampling, method, seed, mask, stats, progress)
        else:
            tokens, codes = _run_sjd(target, cond, sampling, method, seed, mask, stats, progress)
        stats.batch = tokens.shape[0]
        images = None
        if decode:
            with stats.timer("decode"):
                images = target.decode(tokens)
    stats.seconds["total"] = time.perf_counter() - t0
    return GenerationResult(tokens, images, stats, acceptance_map(codes, target.grid))
