"""Named method configurations: the paper's methods, baselines and ablations.

One place defines what "mulo_islands" or "lantern" means, so the demo, the benchmark
and the nodes run the same thing. MuLo-SD's defaults (tau, k, l, w, rows, recheck) are chosen
per model family by the committed sweep (bench/sweep.py, MULO_DEFAULTS names the result
each comes from), not by hand; the engine and the nodes take the target's family.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

from .decode import MethodConfig, VerifierConfig
from .sampling import SamplingConfig
from .upsample import UpsamplerConfig

# Sampling of the patterns family (its card records it too; the scenes card says temperature 1, no
# top-k). Those small GPTs sample best without guidance and with a short top-k: on 120 samples of the
# target, cfg 1 / top-k 2 gave 90% class accuracy, top-k 3 83-86%, no top-k 76%, and guidance
# hurt (cfg 2: 62%, cfg 4: 14%). Real LlamaGen models keep their own defaults (SamplingConfig()).
EMBEDDED_SAMPLING = SamplingConfig(cfg_scale=1.0, temperature=1.0, top_k=2, top_p=1.0)


@dataclass(frozen=True)
class MuloDefaults:
    """MuLo-SD's shipped settings for one model family, and the measurement they come from."""
    tau: float
    k_neighbours: int
    expansion_radius: int
    rows_per_step: int          # low-res rows drafted per step
    parallel_window: int        # ZipAR-style drafting window (0 = sequential)
    recheck: int                # our extension (VerifierConfig.recheck); 0 = the paper's method
    recheck_scope: str
    source: str
    rule: str = "mulo"          # the pool: "mulo" (k nearest codes) or "grouped" (GSD's group)
    commit: str = "draft"       # what an accepted position commits (VerifierConfig.commit)
    tier: str = "not measured"  # the quality tier it was measured in (bench.measures), with its speed-up over AR
    rejection: str = "local"    # VerifierConfig.rejection: "raster" with the exact rule is the lossless mode
    upsampler: str = "pixel"    # UpsamplerConfig.kind
    draw: bool = False          # UpsamplerConfig.draw: drafts drawn from the learned upsampler's q


# `python -m bench.sweep --family scenes --samples 48 --final-top 5 --threads 1 --recheck 0` (71 min, one thread):
# screening at 48 samples per setting, then the 5 fastest survivors and the paper's settings at 400 images each,
# each given its quality tier (bench.measures). Every finalist but the paper's settings failed both tiers (C2ST
# against AR 0.59-0.70, against real 0.64-0.69 where AR's is 0.57) at 0.92-0.98x AR; the paper's settings are
# indistinguishable (C2ST 0.53) at 0.72x. No MuLo-SD setting beats AR inside a tier on this pair.
_SCENES = MuloDefaults(tau=0.3, k_neighbours=8, expansion_radius=1, rows_per_step=1, parallel_window=4,
                       recheck=0, recheck_scope="drafts",
                       source="bench/results/sweep-embedded-scenes.md (48 samples per setting, 400 in the final stage)",
                       tier="indistinguishable at 0.72x AR's speed: no MuLo-SD setting beats AR inside a tier")

# The lossless mode (docs/DESIGN.md section 3.7): drafts drawn from the learned upsampler's q, the exact rule,
# raster rejection with the residual. Its images are the target's own samples (tests/core/decode/test_lossless.py);
# tau and k are not read. The near-lossless entry keeps the exact test but rejects locally (radius 0).
_LOSSLESS = MuloDefaults(tau=_SCENES.tau, k_neighbours=_SCENES.k_neighbours, expansion_radius=0, rows_per_step=1,
                         parallel_window=4, recheck=0, recheck_scope="drafts", rule="exact", rejection="raster",
                         upsampler="learned", draw=True,
                         source="tests/core/decode/test_lossless.py (exact); bench/results/cpu-embedded-lossless.md",
                         tier="lossless (exact) at 0.13x AR's speed, indistinguishable (C2ST against AR 0.50)")

# Chosen per family by the sweep (bench/sweep.py); real families (LlamaGen, Janus-Pro) keep "paper".
MULO_DEFAULTS: dict[str, MuloDefaults] = {
    # `python -m bench.sweep --family patterns --samples 24 --threads 1 --recheck 64 --recheck-scope all` on the
    # near-deterministic patterns pair (bench/results/sweep-recheck-embedded.md; 24 samples, noisy): every k = 1
    # setting but tau 0.45 qualified under the recheck, no pooled one; 8 rows (the whole image per step) fastest.
    # The recheck: 16 and 64 rounds were within AR's quality (bench/results/recheck-all-embedded.md).
    "patterns": MuloDefaults(tau=0.05, k_neighbours=1, expansion_radius=1, rows_per_step=8, parallel_window=4,
                             recheck=64, recheck_scope="all",
                             source="bench/results/sweep-recheck-embedded.md (24 samples per setting)"),
    "scenes": _SCENES,
    "scenes/indistinguishable": replace(_SCENES, tier="indistinguishable at 0.72x AR's speed (the family's defaults)"),
    # no faster setting passed "as good as AR" in the sweep's final stage: its fastest there is the indistinguishable one
    "scenes/as good as AR": replace(_SCENES, tier="indistinguishable (so as good as AR too) at 0.72x AR's speed"),
    "scenes/lossless": _LOSSLESS,
    "scenes/near-lossless": replace(_LOSSLESS, rejection="local", source="bench/results/cpu-embedded-lossless.md",
                                    tier="outside the tiers at 1.09x AR's speed (C2ST against AR 0.74)"),
    # The scenes defaults before the tiers (chosen by accuracy and FD, docs/HISTORY.md): the pool of 64 nearest
    # codes accepts 99.8% of the upsampled drafts, so the images are the drafter's (bench/results/cpu-embedded.md,
    # 400 images: C2ST against AR 0.99-1.00).
    "scenes/fastest": MuloDefaults(tau=0.05, k_neighbours=64, expansion_radius=0, rows_per_step=8, parallel_window=4,
                                   recheck=0, recheck_scope="drafts",
                                   source="bench/results/cpu-embedded.md (400 images per method)",
                                   tier="outside the tiers at 7.43x AR's speed: the drafter's images"),
    # scenes' self_target drafting for itself (models.llamagen.self_drafter), with its 5-block exit at 8 x 8:
    # `python -m bench.sweep --family scenes --self-drafting --upsampler learned --samples 32 --final-samples 120
    # --threads 1 --recheck 0 --tag sweep-embedded-self-learned`, started from the family's settings. The family's
    # verifier with a drafting window of 2 instead of 4 (22 drafter calls against 36): self_target was taught the
    # partial rows parallel drafting shows it (train.parallel_context), so window 2 keeps AR's FD. Chosen with the
    # learned upsampler, the one with which the pair keeps AR's FD too. Chosen before the tiers, not measured in
    # one: it accepts almost every draft, like the old scenes defaults ("scenes/fastest").
    "scenes/self": MuloDefaults(tau=0.05, k_neighbours=64, expansion_radius=0, rows_per_step=8, parallel_window=2,
                                recheck=0, recheck_scope="drafts",
                                source="bench/results/sweep-embedded-self-learned.md (32 samples per setting, 120 in the final stage)"),
    # The paper's method (no recheck, pixel upsampler, islands, parallel drafting). The sources this project
    # has give no tau or k for it: these are the values the project started from.
    "paper": MuloDefaults(tau=VerifierConfig.tau, k_neighbours=VerifierConfig.k_neighbours,
                          expansion_radius=VerifierConfig.expansion_radius, rows_per_step=1, parallel_window=4,
                          recheck=0, recheck_scope="drafts",
                          source="the paper's method; tau and k are this project's starting values"),
}
PAPER = "paper"


INDISTINGUISHABLE = "indistinguishable"   # the named preset beside a family's defaults (bench.measures' tier name)
AS_GOOD = "as good as AR"                 # ... the other tier (bench.measures.AS_GOOD)
FASTEST = "fastest"                       # ... and the fastest setting measured, whatever its tier
LOSSLESS = "lossless"                     # ... the lossless mode (exact rule, raster rejection, drawn drafts)
NEAR_LOSSLESS = "near-lossless"           # ... its exact test with local rejection
NAMED = (LOSSLESS, NEAR_LOSSLESS, INDISTINGUISHABLE, AS_GOOD, FASTEST)   # "<family>/<name>" entries, methods "mulo_<name>"
SHIPPED = "shipped"                       # the quality choice that means the family's defaults
QUALITIES = (SHIPPED, *NAMED)             # the MuLo-SD Sampler's quality choice (resolve's quality=)


def method_name(quality: str) -> str:
    """The benchmark's method name of a named preset: mulo_lossless, mulo_as_good_as_ar, ..."""
    return "mulo_" + quality.lower().replace("-", "_").replace(" ", "_")


def defaults_key(family: str | None, self_drafting: bool = False) -> str:
    """The MULO_DEFAULTS entry the sweep chooses for `family` ("<family>/self" when the target drafts for itself)."""
    return f"{family}/self" if self_drafting else f"{family}"


def mulo_defaults(family: str | None = None, self_drafting: bool = False, tier: str | None = None) -> MuloDefaults:
    """The shipped settings of an embedded family by name (its card's data_family); anything else, a real
    LlamaGen or Janus-Pro model included (family None), gets the paper's. `self_drafting` (the target drafts
    for itself): the family's "<family>/self" entry where the sweep chose one, else the family's. `tier`
    ("indistinguishable"): the family's fastest setting measured in that tier ("<family>/<tier>")."""
    if tier is not None:
        key = f"{family}/{tier}"
        if key not in MULO_DEFAULTS:
            have = sorted(k for k in MULO_DEFAULTS if k.endswith("/" + tier))
            raise ValueError(f"no {tier!r} preset for family {family!r}: the sweep found none there (presets with one: "
                             f"{have or 'none'})")
        return MULO_DEFAULTS[key]
    if family is None:
        return MULO_DEFAULTS[PAPER]
    if self_drafting and defaults_key(family, True) in MULO_DEFAULTS:
        return MULO_DEFAULTS[defaults_key(family, True)]
    return MULO_DEFAULTS.get(family, MULO_DEFAULTS[PAPER])


def model_family(model) -> str | None:
    """The embedded family a model belongs to (from its card), None for real models."""
    return getattr(model, "family", None)


def drafts_for_itself(target, drafter) -> bool:
    """Whether `drafter` is `target` at a lower grid (models.llamagen.self_drafter): the same weights module."""
    return drafter is not None and drafter.weights_module() is target.weights_module()


# The default embedded family's settings under their old names (the sweep, the tests).
_DEFAULT = MULO_DEFAULTS["scenes"]
MULO_TAU, MULO_K = _DEFAULT.tau, _DEFAULT.k_neighbours
MULO_RECHECK, MULO_RECHECK_SCOPE = _DEFAULT.recheck, _DEFAULT.recheck_scope
LANTERN_DELTA = 0.1
SD_DRAFT_LEN = 4      # SD and LANTERN: tokens drafted per step (the AR Sampler's and MuLo-SD Sampler's defaults too)
ZIPAR_WINDOW = 8      # ZipAR: tokens a row runs ahead of the next
SJD_WINDOW = 16       # SJD and GSD: tokens drafted and verified per Jacobi iteration
LANTERN_K = 0   # LANTERN's 1000 of 16384 codes scaled to the codebook: 62 for the embedded 1024 (verify.lantern_neighbours)


def mulo_config(d: MuloDefaults, **kw) -> MethodConfig:
    """MuLo-SD at the settings `d` (islands resampling, parallel drafting, d's upsampler), `kw` overriding the
    verifier's fields."""
    base = dict(rule=d.rule, tau=d.tau, k_neighbours=d.k_neighbours, expansion_radius=d.expansion_radius,
                rejection=d.rejection, resampling="islands", recheck=d.recheck, recheck_scope=d.recheck_scope,
                commit=d.commit)
    base.update(kw)
    return MethodConfig(verifier=VerifierConfig(**base), upsampler=UpsamplerConfig(kind=d.upsampler, draw=d.draw),
                        rows_per_step=d.rows_per_step, parallel_window=d.parallel_window)


def mulo_verifier(family: str | None = "scenes", *, self_drafting: bool = False, tier: str | None = None,
                  **kw) -> VerifierConfig:
    """The Local Verifier with a family's shipped settings (mulo_defaults), `kw` overriding."""
    return mulo_config(mulo_defaults(family, self_drafting, tier), **kw).verifier


def mulo_islands(family: str | None = "scenes", *, self_drafting: bool = False, tier: str | None = None,
                 **kw) -> MethodConfig:
    """MuLo-SD as shipped for a family: islands resampling + ZipAR-style parallel drafting, pixel upsampler."""
    return mulo_config(mulo_defaults(family, self_drafting, tier), **kw)


# The target-only methods by the name the AR Sampler's mode and the benchmark use. GSD is SJD's window of 16 with
# GSD's grouped test (decode.rules), upstream's rank window 7, p_thr 0.15, d_thr 0.5 (verify.gsd_group).
TARGET_ONLY: dict[str, MethodConfig] = {
    "ar": MethodConfig(method="ar"),
    "zipar": MethodConfig(method="zipar", zipar_window=ZIPAR_WINDOW),
    "sjd": MethodConfig(method="sjd", sjd_window=SJD_WINDOW),
    "gsd": MethodConfig(method="sjd", sjd_window=SJD_WINDOW, verifier=VerifierConfig(rule="gsd")),
}


# Every baseline method by name: the target-only ones above, then the two that need a same-resolution drafter.
BASELINES = ("zipar", "sjd", "gsd", "sd", "lantern")


def resolve(target, drafter=None, *, verifier: VerifierConfig | None = None, upsampler: UpsamplerConfig | None = None,
            quality: str | None = None, rows_per_step: int | None = None, parallel_window: int | None = None,
            draft_len: int | None = None) -> MethodConfig:
    """The one place a pair's settings are decided: MuLo-SD for `target` drafted by `drafter`, each setting
    given here or, when None, the shipped one (mulo_defaults of the target's family, its "<family>/self"
    entry when the drafter is the target itself, its "<family>/<quality>" entry when `quality` names a
    tier). A low-resolution drafter drafts rows (parallel window from the defaults); a same-resolution one
    (SD, LANTERN) drafts SD_DRAFT_LEN tokens sequentially. No drafter: the target alone, AR. The nodes, the
    demo, the benchmark and the README's snippet all call this."""
    if quality is not None and quality not in QUALITIES:
        raise ValueError(f"quality: expected one of {list(QUALITIES)}, got {quality!r}")
    if drafter is None:
        return MethodConfig(method="ar")
    d = mulo_defaults(model_family(target), drafts_for_itself(target, drafter), None if quality == SHIPPED else quality)
    base = mulo_config(d)
    low = drafter.grid < target.grid
    pick = lambda given, shipped: shipped if given is None else given
    return MethodConfig(verifier=pick(verifier, base.verifier), upsampler=pick(upsampler, base.upsampler),
                        rows_per_step=pick(rows_per_step, d.rows_per_step),
                        parallel_window=pick(parallel_window, d.parallel_window) if low else 0,
                        draft_len=0 if low else pick(draft_len, SD_DRAFT_LEN))


# name -> (method config, which drafter it needs: "low", "same", "self" (the target at the low grid) or None)
def method_presets(family: str | None = "scenes") -> dict[str, tuple[MethodConfig, str | None]]:
    """Every named method with MuLo-SD at `family`'s shipped settings ("mulo_paper": the paper's)."""
    mi, ms = mulo_islands(family), mulo_islands(family, self_drafting=True)

    def mv(**kw) -> VerifierConfig:
        return mulo_verifier(family, **kw)
    return {
        **{name: (cfg, None) for name, cfg in TARGET_ONLY.items()},
        "sd": (MethodConfig(verifier=VerifierConfig(rule="exact", rejection="raster"), draft_len=SD_DRAFT_LEN), "same"),
        "lantern": (MethodConfig(verifier=VerifierConfig(rule="lantern", rejection="raster", lantern_delta=LANTERN_DELTA,
                                                         lantern_k=LANTERN_K), draft_len=SD_DRAFT_LEN), "same"),
        "mulo_serial": (replace(mi, verifier=mv(resampling="serial"), parallel_window=0), "low"),
        "mulo_islands": (mi, "low"),
        "mulo_paper": (mulo_islands(PAPER), "low"),
        # ablations (the paper's tables): each switches one thing off the default
        "mulo_no_pooling": (replace(mi, verifier=mv(k_neighbours=1)), "low"),
        "mulo_raster": (replace(mi, verifier=mv(rejection="raster", recheck=0)), "low"),
        "mulo_no_recheck": (replace(mi, verifier=mv(recheck=0)), "low"),
        # GSD's dynamic group as MuLo-SD's pool (verify.grouped_accept) instead of the k nearest codes
        "mulo_grouped": (replace(mi, verifier=mv(rule="grouped")), "low"),
        "mulo_sequential_draft": (replace(mi, parallel_window=0), "low"),
        "mulo_nearest": (replace(mi, upsampler=UpsamplerConfig(kind="nearest")), "low"),
        "mulo_embedding": (replace(mi, upsampler=UpsamplerConfig(kind="embedding")), "low"),
        "mulo_learned": (replace(mi, upsampler=UpsamplerConfig(kind="learned")), "low"),
        "mulo_oracle": (replace(mi, oracle=True), "low"),
        # an accepted draft commits a code drawn from the target's p within the draft's pool (VerifierConfig.commit)
        "mulo_pool": (replace(mi, verifier=mv(commit="pool")), "low"),
        "mulo_pool_learned": (replace(mi, verifier=mv(commit="pool"), upsampler=UpsamplerConfig(kind="learned")), "low"),
        # self-drafting: the target drafts for itself at the drafter's grid (LlamaGenModel.at_grid)
        "mulo_self": (ms, "self"),                                          # the family's self-drafting settings
        "mulo_self_pair_defaults": (mi, "self"),                            # the two-model pair's settings
        "mulo_self_paper": (mulo_islands(PAPER), "self"),
        "mulo_self_learned": (replace(ms, upsampler=UpsamplerConfig(kind="learned")), "self"),
    } | {method_name(t): (mulo_islands(family, tier=t), "low") for t in NAMED if f"{family}/{t}" in MULO_DEFAULTS}


def same_settings(stored: dict | None, config: MethodConfig) -> bool:
    """Whether a results row's stored config (MethodConfig.to_dict, read back from JSON) is `config`; a field
    the row lacks was added later, at a default that keeps the behaviour the row measured."""
    def same(a, b) -> bool:
        if isinstance(a, dict) and isinstance(b, dict):
            return all(k in b and same(v, b[k]) for k, v in a.items())
        return a == b
    return stored is not None and same(stored, json.loads(json.dumps(config.to_dict())))

