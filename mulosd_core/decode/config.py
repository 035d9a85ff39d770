"""Decoding configuration as plain data: how drafts are verified (VerifierConfig) and which method runs
with which schedule (MethodConfig). Each config checks itself when built, against the rule and method
tables (decode.rules, decode.methods)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .. import verify
from ..upsample import UpsamplerConfig
from .methods import METHODS
from .rules import RULES, rule_names

REJECTIONS = ("local", "raster")
RESAMPLINGS = ("islands", "serial")
RECHECK_SCOPES = ("drafts", "all")
WAVE_FEEDS = ("local", "span")
COMMITS = ("draft", "pool")      # what an accepted position commits (VerifierConfig.commit)


@dataclass
class VerifierConfig:
    """How drafts are accepted, rejected and resampled. The defaults are the paper's method at this project's
    starting tau and k (presets.MULO_DEFAULTS["paper"]); presets.resolve gives the shipped settings of a
    family."""

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
        for name, value, allowed in (("rule", self.rule, tuple(RULES)), ("rejection", self.rejection, REJECTIONS),
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
        rule = RULES[self.rule]
        if self.recheck and self.rejection == "local" and not rule.repeatable:
            raise ValueError(f"verifier recheck needs a deterministic rule that can be repeated "
                             f"({', '.join(rule_names(lambda r: r.repeatable))}), got rule {self.rule!r} with local "
                             f"rejection; set recheck to 0 for it")
        if self.commit == "pool" and (not rule.pool or self.rejection != "local"):
            raise ValueError(f"verifier commit 'pool' draws from a rule's neighbour pool under local rejection "
                             f"(rules with a pool: {', '.join(rule_names(lambda r: r.pool))}), got rule {self.rule!r} "
                             f"with {self.rejection} rejection; set commit to 'draft' for it")


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
            raise ValueError(f"method must be one of {tuple(METHODS)}, got {self.method!r}")
        for name in ("rows_per_step", "zipar_window", "sjd_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("parallel_window", "draft_len"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    def to_dict(self) -> dict:
        return asdict(self)
