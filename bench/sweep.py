"""Sweep MuLo-SD's tau, k, l, w and LANTERN's delta; speed-up against quality, and the chosen defaults.

    python -m bench.sweep [--samples N] [--quick] [--models embedded|tiny] [--device cpu]
                          [--grid-experiment] [--out bench/results] [--threads T]
                          [--family scenes128 --drafter scenes:drafter] [--grid taus=0.1,0.3 windows= ...]
    python -m bench.sweep --baselines-only [--baselines zipar ...] [--samples N] [--final-samples 400] [--threads T]

Stages, each one process-internal run of `bench.methods.run_methods` with its own AR runs on the
same classes and seeds (sample i: class i % the number of classes, seed i; methods interleaved per sample):

  1. tau x k     tau in TAUS, k in KS (l, w at the preset defaults); then what an accepted position
                 commits (VerifierConfig.commit: the draft, or a target code from its pool)
  2. radius l    l in RADII with the chosen tau, k
  3. window w    w in WINDOWS (parallel drafting window) with the chosen tau, k, l
  4. rows        low-res rows drafted per step in ROWS with the chosen tau, k, l, w
  5. LANTERN     delta in DELTAS (k = presets.LANTERN_K)
  6. grid size   (--grid-experiment) AR and MuLo-SD at the chosen defaults with the target at other
                 token grids (drafter at half). The embedded models are trained at ONE grid; the
                 2D RoPE lets them run at others but their quality there is unknown and likely poor:
                 rows at non-native grids are labelled "untrained grid" and are not a quality claim.

--baselines-only runs the baselines instead, each over its own knobs (BASELINE_GRID: ZipAR's window, SJD's
and GSD's Jacobi window, GSD's rank window, SD's draft length, LANTERN's delta and draft length): all settings
screened in one stage, then the BASELINE_FINAL_TOP fastest survivors of each method at the final samples,
each with its tier, and a table of each method's fastest setting per tier (tag baselines-<models>);
`--baselines zipar sjd` sweeps only those.

Selection rule: the quality tiers of bench.measures (TIER_RULE), never the classifier's accuracy or FD
(they cannot see a drafter's smooth image). Stages 1-5 screen at `--samples` images per setting
(bench.measures.screen: a setting survives unless it is clearly outside "as good as AR", its C2ST's
95% interval above the bound or its SWD / precision / recall beyond the bound with a margin); each
stage keeps the fastest survivor and the next stage builds on it (tau and k jointly, then w, rows,
recheck). The final stage runs the `--final-top` fastest survivors of every stage, plus the paper's
settings as an anchor, at `--final-samples` (default bench.measures.TIER_MIN_SAMPLES) each against
their own AR runs and gives each its tier (bench.measures.tier). The chosen defaults are the fastest
setting "as good as AR"; the fastest "indistinguishable" one is recorded beside it (the family's
named preset). Whether either beats AR's wall time is part of the result: nothing is chosen outside
a tier, and when no setting is inside one the preset values are kept and the output says so.

Resumable: every finished stage goes to <out>/<tag>.journal.json and a running stage keeps its records in
<out>/<tag>.<stage>.resume.pt (saved every two minutes), so the same command continues where it stopped.

Writes <out>/sweep-<models>[-quick].json and .md, a frontier PNG per stage (speed-up vs the strongest
C2ST against AR, <tag>-pareto-<stage>-c2st.png), and prints the chosen defaults (to be copied into
mulosd_core/presets.py by whoever owns it). With --models tiny everything is random: the run
only exercises the code path.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import logging
import math
import os
import sys
import time
import uuid
from dataclasses import replace

import torch

from mulosd_core import presets as P
from mulosd_core.decode import model_sampling
from mulosd_core.decode import COMMITS, RECHECK_SCOPES, MethodConfig, VerifierConfig
from mulosd_core.models.llamagen import LlamaGenModel
from mulosd_core.models.registry import DEFAULT_EMBEDDED_FAMILY, DTYPES, EMBEDDED_FAMILIES
from mulosd_core.upsample import KINDS, UpsamplerConfig

from . import measures as Q
from .methods import run_methods
from .models import Models, hardware, load_models, model_info, models_tag
from .quality import N_BOOT_FD, N_BOOT_FD_QUICK, real_features, real_sets
from .summary import summarise
from .tables import fmt_ci, fmt_num, jsonable

log = logging.getLogger("bench.sweep")

TAUS = (0.05, 0.1, 0.2, 0.3, 0.45, 0.7)
KS = (1, 4, 16, 64)
RADII = (0, 1)
WINDOWS = (1, 2, 3, 4)
ROWS = (2, 4, 8)
SWEPT_RECHECKS = (0, 64)     # the recheck stage of the full sweep: the paper's verifier or ours
DELTAS = (0.05, 0.1, 0.2, 0.4)
GRID_FACTORS = (1.0, 1.5, 2.0)
RECHECKS = (0, 1, 4, 16, 64)   # --recheck-only: rounds of VerifierConfig.recheck (our extension; 0 = the paper)
FULL_GRID = dict(taus=TAUS, ks=KS, radii=RADII, windows=WINDOWS, rows=ROWS, rechecks=SWEPT_RECHECKS, deltas=DELTAS,
                 commits=COMMITS, grouped=(True,))
QUICK = dict(taus=(0.1, 0.3), ks=(1, 8), radii=(0, 1), windows=(1, 2), rows=(1, 2), rechecks=(0, 2), deltas=(0.1, 0.4))
GRID_TYPES = dict(taus=float, ks=int, radii=int, windows=int, rows=int, rechecks=int, deltas=float, commits=str,
                  grouped=lambda v: {"yes": True, "no": False}[v])


def parse_grid(items: list[str]) -> dict:
    """`--grid` items "name=v1,v2" (an empty list skips the stage) -> {name: tuple}; names as FULL_GRID's."""
    out = {}
    for item in items:
        name, eq, values = item.partition("=")
        if not eq or name not in GRID_TYPES:
            raise ValueError(f"--grid: expected name=v1,v2 with name one of {', '.join(GRID_TYPES)}, got {item!r}")
        try:
            out[name] = tuple(GRID_TYPES[name](v) for v in values.split(",") if v)
        except (ValueError, KeyError):
            raise ValueError(f"--grid {name}: cannot read {values!r} (grouped takes yes or no)") from None
        if name == "commits" and not set(out[name]) <= set(COMMITS):
            raise ValueError(f"--grid commits: expected some of {', '.join(COMMITS)}, got {values!r}")
    return out
SCREEN_SAMPLES = 64     # samples per setting in the screening stages (--samples)
FINAL_SAMPLES = Q.TIER_MIN_SAMPLES     # samples per candidate in the final stage (--final-samples): a tier needs them
FINAL_TOP = 6           # candidates carried into it: the fastest qualifying settings of the stages (--final-top)
RULE = (f"screening stages (greedy): the fastest setting not clearly outside '{Q.AS_GOOD}' at the stage's samples "
        f"(bench.measures.screen); final stage: every finalist's tier at the final samples (bench.measures.tier, "
        f"{Q.TIER_RULE}); defaults: the fastest '{Q.AS_GOOD}' finalist, with the fastest '{Q.INDISTINGUISHABLE}' one "
        f"beside it; nothing is chosen outside a tier")


def passes(row: dict, which: str = Q.AS_GOOD) -> bool:
    """Whether a stage row is in tier `which`: its tier verdict where it has one (the final stage), else its
    screen (the screening stages)."""
    if row.get("tier") is not None:
        return Q.in_tier(row["tier"], which)
    return bool((row.get("screen") or {}).get(which))


def choose(rows: list[dict], which: str = Q.AS_GOOD) -> dict | None:
    """The row in tier `which` (see passes) with the highest wall_ratio_vs_ar (None when none is)."""
    ok = [r for r in rows if passes(r, which) and r.get("wall_ratio_vs_ar") is not None
          and math.isfinite(r["wall_ratio_vs_ar"])]
    return max(ok, key=lambda r: (r["wall_ratio_vs_ar"], -(r.get("target_calls") or 0))) if ok else None


def compact_measures(q: dict | None) -> dict | None:
    """The measures a sweep row keeps: C2ST against AR and real (strongest, with its interval), SWD, P/R."""
    if not q:
        return None
    ar, real = q.get("c2st_ar") or {}, q.get("c2st_real") or {}
    pick = lambda c: {"max": c["max"], "detector": c["max_detector"], "ci": c[c["max_detector"]]["ci"]} if c else None
    return {"samples": q["samples"], "c2st_ar": pick(ar), "c2st_real": pick(real), "swd": q.get("swd"),
            "precision": q.get("precision"), "recall": q.get("recall"), "diversity_ratio": q.get("diversity_ratio"),
            "nll_gap": q.get("nll_gap")}


KEEP = ("target_calls", "drafter_calls", "tokens_per_target_call", "acceptance_rate", "resampled_fraction",
        "wall_seconds_median", "wall_seconds_iqr", "wall_ratio_vs_ar", "wall_ratio_ci", "accuracy", "accuracy_ci",
        "fd", "fd_ci", "nll", "nll_ci", "vs_ar")


def run_stage(name: str, models: Models, settings: dict[str, tuple[dict, MethodConfig, str]], samples: int,
              batch: int, warmup: int, n_boot_fd: int, real, progress: bool, final: bool = False,
              resume: str | None = None) -> dict:
    """settings: label -> (params, config, drafter kind). Every row is measured (bench.measures) against this
    stage's AR runs; screening rows get their screen, `final` rows their tier. Returns {"ar", "rows", "chosen"
    (the fastest as good as AR), "indistinguishable" (the fastest indistinguishable, final stage only)}.
    `resume`: the file the stage's records are kept in as it runs (bench.methods.run_methods)."""
    methods = {"ar": (MethodConfig(method="ar"), None)}
    methods.update({label: (cfg, kind) for label, (_, cfg, kind) in settings.items()})
    raw = run_methods(models, methods, samples, batch, warmup, progress=progress, label=f"sweep:{name}",
                      resume=resume)
    summ = summarise(raw, methods, real, uuid.uuid4().hex, models.target.device, n_boot_fd=n_boot_fd,
                     reals=real_sets(models, samples), vocab=models.target.vocab_size, grid=models.target.grid)
    ar_full = {**summ["ar"]["measures"], "accuracy": summ["ar"]["accuracy"], "fd": summ["ar"]["fd"]}
    ar = {**{k: summ["ar"][k] for k in KEEP}, "measures": compact_measures(summ["ar"]["measures"])}
    rows = []
    for label, (params, cfg, kind) in settings.items():
        m = summ[label]
        row = {"label": label, "params": params, **{k: m[k] for k in KEEP}, "measures": compact_measures(m["measures"])}
        row["tier"] = m["tier"] if final else None
        row["screen"] = None if final else Q.screen(m["measures"], ar_full)
        row["qualifies"] = passes(row)
        rows.append(row)
    best, ind = choose(rows), choose(rows, Q.INDISTINGUISHABLE) if final else None
    for r in rows:
        r["chosen"] = best is not None and r["label"] == best["label"]
    return {"ar": ar, "rows": rows, "chosen": best["label"] if best else None,
            "indistinguishable": ind["label"] if ind else None}


def stage_records(journal: str, name: str) -> str:
    """Where a journaled stage keeps its records while it runs: beside the journal, <tag>.<stage>.resume.pt."""
    return f"{journal.removesuffix('.journal.json')}.{name}.resume.pt"


def journaled(journal: str | None, run):
    """`run(name, settings, n, real, final=False, resume=None)` behind a journal: a stage whose labels and
    sample count match the journal's record of it is read back, every finished stage is written to it, and
    a stage keeps its records in stage_records while it runs, so an interrupted sweep resumes where it
    stopped, inside a stage too (a final stage at 400 images can take hours)."""
    done = json.load(open(journal)) if journal and os.path.exists(journal) else {}

    def staged(name: str, settings: dict, n: int, real_n, final: bool = False) -> dict:
        old = done.get(name)
        if old and old.get("samples") == n and [r["label"] for r in old["rows"]] == list(settings):
            log.info("sweep: stage %s from the journal %s", name, journal)
            return old
        records = stage_records(journal, name) if journal else None
        t0 = time.perf_counter()
        s = run(name, settings, n, real_n, final=final, resume=records)
        s["seconds"], s["samples"] = time.perf_counter() - t0, n
        if journal:
            done[name] = jsonable(s)
            with open(journal, "w") as fh:
                json.dump(done, fh)
            if os.path.isfile(records):
                os.remove(records)
        return s
    return staged


def journaled_stages(journal: str | None, models: Models, batch: int, warmup: int, n_boot_fd: int, progress: bool):
    """run_stage for `models` at these run settings, behind `journal` (journaled): what every sweep's stages call."""
    return journaled(journal, lambda name, settings, n, real_n, final=False, resume=None: run_stage(
        name, models, settings, n, batch, warmup, n_boot_fd, real_n, progress, final=final, resume=resume))


def _preset_settings(family: str | None, upsampler: str = "pixel", recheck: int | None = None,
                     recheck_scope: str | None = None, self_drafting: bool = False) -> dict:
    """MuLo-SD's swept settings as the presets ship them for `family` now (presets.mulo_defaults); the
    upsampler kind is a condition of the run (an option), not swept."""
    d = P.mulo_defaults(family, self_drafting)
    return dict(rule="mulo", tau=d.tau, k=d.k_neighbours, radius=d.expansion_radius, window=d.parallel_window,
                rows=d.rows_per_step, upsampler=upsampler, recheck=d.recheck if recheck is None else recheck,
                recheck_scope=recheck_scope or d.recheck_scope, commit=d.commit)


def _mulo(tau: float, k: int, radius: int, window: int, rows: int, upsampler: str = "pixel",
          recheck: int = 0, recheck_scope: str = "drafts", rule: str = "mulo", commit: str = "draft") -> MethodConfig:
    base = P.mulo_islands(tau=tau, k_neighbours=k, expansion_radius=radius, recheck=recheck, recheck_scope=recheck_scope,
                          rule=rule, commit=commit)
    return replace(base, parallel_window=window, rows_per_step=rows, upsampler=UpsamplerConfig(kind=upsampler))


def _mulo_at(cur: dict, **over) -> MethodConfig:
    """MuLo-SD at the settings `cur` (see _preset_settings) with some of them overridden."""
    c = {**cur, **over}
    return _mulo(c["tau"], c["k"], c["radius"], c["window"], c["rows"], c["upsampler"], c["recheck"], c["recheck_scope"],
                 c.get("rule", "mulo"), c.get("commit", "draft"))


def _lantern(delta: float) -> MethodConfig:
    return MethodConfig(verifier=VerifierConfig(rule="lantern", rejection="raster", lantern_delta=delta,
                                                lantern_k=P.LANTERN_K), draft_len=4)


# --baselines-only: every target-side and same-resolution baseline over its own knobs (ZipAR's window, SJD's and
# GSD's Jacobi window, GSD's rank window, SD's draft length, LANTERN's delta and draft length), the shipped
# settings (presets.ZIPAR_WINDOW, SJD_WINDOW, SD_DRAFT_LEN, LANTERN_DELTA, verify.GSD_RANK_WINDOW) among them.
BASELINE_GRID = {
    "zipar": [dict(window=w) for w in (2, 3, 4, 6, 8, 12)],
    "sjd": [dict(window=w) for w in (4, 8, 16, 32)],
    "gsd": [dict(window=w, rank=7) for w in (8, 16, 32)] + [dict(window=16, rank=r) for r in (3, 15)],
    "sd": [dict(draft_len=n) for n in (2, 4, 8)],
    "lantern": [dict(delta=d, draft_len=4) for d in (0.02, 0.05, 0.1, 0.2)] + [dict(delta=0.05, draft_len=n) for n in (2, 8)],
}
QUICK_BASELINES = {m: over[:2] for m, over in BASELINE_GRID.items()}
BASELINE_FINAL_TOP = 3   # finalists per baseline: its fastest screen survivors


def baseline_config(method: str, c: dict) -> tuple[MethodConfig, str | None]:
    """A baseline at settings `c` (a BASELINE_GRID entry) and the drafter it needs (None: target only)."""
    if method == "zipar":
        return MethodConfig(method="zipar", zipar_window=c["window"]), None
    if method == "sjd":
        return MethodConfig(method="sjd", sjd_window=c["window"]), None
    if method == "gsd":
        return MethodConfig(method="sjd", sjd_window=c["window"],
                            verifier=VerifierConfig(rule="gsd", gsd_rank_window=c["rank"])), None
    if method == "sd":
        return MethodConfig(verifier=VerifierConfig(rule="exact", rejection="raster"), draft_len=c["draft_len"]), "same"
    if method == "lantern":
        return replace(_lantern(c["delta"]), draft_len=c["draft_len"]), "same"
    raise ValueError(f"baseline: unknown method {method!r}; expected one of {sorted(BASELINE_GRID)}")


def baseline_label(method: str, c: dict) -> str:
    return f"{method}: " + " ".join(f"{k}={v}" for k, v in c.items())


def baselines(models: Models, samples: int, final_samples: int = FINAL_SAMPLES, final_top: int = BASELINE_FINAL_TOP,
              batch: int = 1, warmup: int = 1, progress: bool = True, quick: bool = False,
              journal: str | None = None, methods: list[str] | None = None) -> dict:
    """Every baseline over its own knobs: one screening stage of all settings at `samples` (one AR), then the
    `final_top` fastest survivors of each method at `final_samples` against their own AR, each given its tier.
    `methods`: only these baselines (default all). Returns the sweep's result shape with "baselines":
    method -> tier -> its fastest finalist (or None)."""
    grid = QUICK_BASELINES if quick else BASELINE_GRID
    unknown = sorted(set(methods or ()) - set(grid))
    if unknown:
        raise ValueError(f"baselines: unknown method(s) {unknown}; expected some of {sorted(grid)}")
    grid = {m: over for m, over in grid.items() if not methods or m in methods}
    n_boot_fd = N_BOOT_FD_QUICK if quick else N_BOOT_FD
    staged = journaled_stages(journal, models, batch, warmup, n_boot_fd, progress)
    settings = {}
    for method, over in grid.items():
        for c in over:
            cfg, kind = baseline_config(method, c)
            settings[baseline_label(method, c)] = ({"method": method, **c}, cfg, kind)
    stages = {"baselines": staged("baselines", settings, samples, real_features(models, samples))}
    finalists = {}
    for method in grid:
        ok = [r for r in stages["baselines"]["rows"] if r["params"]["method"] == method and r["qualifies"]]
        ok.sort(key=lambda r: -(r["wall_ratio_vs_ar"] or 0.0))
        finalists.update({r["label"]: settings[r["label"]] for r in ok[:final_top]})
    n = max(final_samples, samples)
    if finalists:
        stages["final"] = staged("final", finalists, n, real_features(models, n), final=True)
    rows = (stages.get("final") or {}).get("rows", [])
    fastest = {m: {t: (lambda r: r and {"label": r["label"], "speed_up": r["wall_ratio_vs_ar"]})(
        choose([r for r in rows if r["params"]["method"] == m], t)) for t in (Q.INDISTINGUISHABLE, Q.AS_GOOD)}
        for m in grid}
    return {"stages": stages, "chosen": None, "kept_preset_value_in": [], "preset_before": None,
            "grid_experiment": None, "baselines": fastest}


def _at_grid(model: LlamaGenModel, grid: int, name: str) -> LlamaGenModel:
    out = LlamaGenModel(model.gpt, model.vq, grid * model.vq.downsample, name=name)
    out.default_sampling = model_sampling(model)   # the same weights sample as they were trained to
    return out


def grid_sizes(models: Models, cur: dict, samples: int, batch: int, warmup: int, n_boot_fd: int,
               progress: bool) -> list[dict]:
    """AR and MuLo-SD (settings `cur`) with the target at each GRID_FACTORS grid, drafter at half."""
    grids = []
    native = models.target.grid
    for f in GRID_FACTORS:
        gt = round(native * f / 2) * 2
        m = dataclasses.replace(models, target=_at_grid(models.target, gt, f"target@{gt}"),
                                drafter=_at_grid(models.drafter, gt // 2, f"drafter@{gt // 2}"))
        n = max(2, samples // 2)
        methods = {"ar": (MethodConfig(method="ar"), None),
                   "mulo_islands": (_mulo_at(cur), "low")}
        t0 = time.perf_counter()
        raw = run_methods(m, methods, n, batch, warmup, progress=progress, label=f"sweep:grid{gt}")
        summ = summarise(raw, methods, real_features(m, n), uuid.uuid4().hex, m.target.device, n_boot_fd=n_boot_fd)
        grids.append({"grid": gt, "drafter_grid": gt // 2, "samples": n, "native": gt == native,
                      "label": "trained grid" if gt == native else "untrained grid: quality unknown, not a claim",
                      "seconds": time.perf_counter() - t0,
                      **{meth: {k: summ[meth][k] for k in KEEP} for meth in methods}})
    return grids


def recheck_stage(models: Models, samples: int, batch: int, warmup: int, n_boot_fd: int, progress: bool,
                  upsampler: str, scope: str = "drafts") -> dict:
    """MuLo-SD at the preset defaults with each RECHECKS number of recheck rounds of `scope`, against AR
    (the rule is applied and reported, but nothing is chosen here: presets.MULO_RECHECK records the choice)."""
    cur = _preset_settings(models.target.family, upsampler)
    t0 = time.perf_counter()
    settings = {f"recheck={n}": (dict(recheck=n, recheck_scope=scope), _mulo_at(cur, recheck=n, recheck_scope=scope), "low")
                for n in RECHECKS}
    s = run_stage("recheck", models, settings, samples, batch, warmup, n_boot_fd, real_features(models, samples),
                  progress)
    s["seconds"] = time.perf_counter() - t0
    return s


def _settings_label(c: dict) -> str:
    pool = "grouped" if c.get("rule") == "grouped" else f"k={c['k']}"
    commit = "" if c.get("commit", "draft") == "draft" else f" commit={c['commit']}"
    return f"tau={c['tau']} {pool} l={c['radius']} w={c['window']} rows={c['rows']} recheck={c['recheck']}{commit}"


def sweep(models: Models, samples: int, quick: bool, batch: int = 1, warmup: int = 1, grid_experiment: bool = False,
          progress: bool = True, upsampler: str = "pixel", recheck: int | None = None,
          recheck_scope: str | None = None, final_samples: int = FINAL_SAMPLES, final_top: int = FINAL_TOP,
          self_drafting: bool = False, journal: str | None = None, grid: dict | None = None) -> dict:
    """Greedy screening stages at `samples` each (tau x k x l jointly, then w, rows, recheck, LANTERN's delta),
    then a final stage: the `final_top` fastest settings that survived any screen, and the paper's settings as
    an anchor, at `final_samples` each against their own AR runs, each given its tier. The fastest "as good as
    AR" finalist is the chosen default, the fastest "indistinguishable" one is recorded beside it.
    `self_drafting`: the target drafts for itself (drafter kind "self"); LANTERN's stage, which needs the
    same-resolution drafter, is left out. `journal`: a JSON file each finished stage is written to; a rerun
    with the same journal reuses every stage whose settings and sample count match (an interrupted sweep
    resumes where it stopped). `grid`: values that replace FULL_GRID's (`--grid`); an empty tuple skips
    that stage (a narrow sweep on a pair whose every setting costs seconds an image)."""
    g = {**FULL_GRID, **(QUICK if quick else {}), **(grid or {})}
    if recheck is not None:
        g = {**g, "rechecks": (recheck,)}
    n_boot_fd = N_BOOT_FD_QUICK if quick else N_BOOT_FD
    real = real_features(models, samples)
    stages: dict[str, dict] = {}
    family = models.target.family
    before = _preset_settings(family, upsampler, recheck, recheck_scope, self_drafting)
    drafter = "self" if self_drafting else "low"
    cur = dict(before)
    kept: list[str] = []
    candidates: dict[str, dict] = {}     # label -> full settings, speed-up: every setting that survived a screen
    staged = journaled_stages(journal, models, batch, warmup, n_boot_fd, progress)

    def stage(name: str, over: list[dict]) -> None:
        if not over:
            return
        settings = {}
        for o in over:
            c = {**cur, **o}
            settings[_settings_label(c)] = (c, _mulo_at(c), drafter)
        s = stages[name] = staged(name, settings, samples, real)
        for r in s["rows"]:
            if r["qualifies"]:
                candidates[r["label"]] = {"settings": r["params"], "speed": r["wall_ratio_vs_ar"] or 0.0}
        best = next((r for r in s["rows"] if r["chosen"]), None)
        if best is None:
            kept.append(name)
        else:
            cur.update(best["params"])

    stage("tau_k_l", [dict(rule="mulo", tau=t, k=k, radius=l) for t in g["taus"] for k in g["ks"] for l in g["radii"]]
          + [dict(rule="grouped", tau=t, radius=l) for t in g["taus"] for l in g["radii"] if True in g["grouped"]])   # GSD's group as the pool
    if cur["rule"] == "mulo":      # the pool commit draws from the k nearest codes' pool, not GSD's group
        stage("commit", [dict(commit=c) for c in g["commits"]])
    stage("window", [dict(window=w) for w in g["windows"]])
    stage("rows", [dict(rows=n) for n in g["rows"]])
    stage("recheck", [dict(recheck=n) for n in g["rechecks"]])
    delta = P.LANTERN_DELTA
    if not self_drafting and g["deltas"]:
        lantern = stages["lantern"] = staged(
            "lantern", {f"delta={d}": (dict(delta=d), _lantern(d), "same") for d in g["deltas"]}, samples, real)
        best = next((r for r in lantern["rows"] if r["chosen"]), None)
        if best:
            delta = best["params"]["delta"]
    top = sorted(candidates.items(), key=lambda kv: -kv[1]["speed"])[:final_top]
    paper = _preset_settings(P.PAPER, upsampler)
    settings = {label: (c["settings"], _mulo_at(c["settings"]), drafter) for label, c in top}
    settings.setdefault(f"paper: {_settings_label(paper)}", (paper, _mulo_at(paper), drafter))
    n = max(final_samples, samples)
    final = stages["final"] = staged("final", settings, n, real_features(models, n), final=True)
    rows = {r["label"]: r for r in final["rows"]}
    chosen_row = rows.get(final["chosen"])
    ind_row = rows.get(final["indistinguishable"])
    if chosen_row is None:
        kept.append("final")
    c = chosen_row["params"] if chosen_row else before
    grids = grid_sizes(models, c, samples, batch, warmup, n_boot_fd, progress) if grid_experiment else None
    names = {"rule": "rule", "tau": "tau", "k": "k_neighbours", "radius": "expansion_radius", "rows": "rows_per_step",
             "window": "parallel_window", "recheck": "recheck", "recheck_scope": "recheck_scope", "commit": "commit"}
    verdict = lambda r: None if r is None else {"label": r["label"], "speed_up": r["wall_ratio_vs_ar"],
                                                "beats_ar": (r["wall_ratio_vs_ar"] or 0) > 1.0,
                                                "settings": {names[k]: r["params"][k] for k in names}}
    return {"stages": stages, "grid_experiment": grids, "family": family, "self_drafting": self_drafting,
            "chosen": {names[k]: c[k] for k in names} | {"lantern_delta": delta},
            "tiers": {Q.AS_GOOD: verdict(chosen_row), Q.INDISTINGUISHABLE: verdict(ind_row)},
            "kept_preset_value_in": kept,
            "preset_before": {names[k]: before[k] for k in names} | {"lantern_delta": P.LANTERN_DELTA}}


def markdown(res: dict) -> str:
    f, ci = fmt_num, fmt_ci
    out = [f"# Sweep `{res['tag']}`", "", f"- command: `{res['command']}`", f"- date: {res['date']}",
           f"- hardware: {res['hardware']['device_name']} ({res['hardware']['device']}), {res['hardware']['cpu_count']} "
           f"CPUs, torch {res['hardware']['torch']}", f"- samples per setting: {res['samples']}",
           *([] if res["sweep"].get("baselines") else
             [f"- upsampler of every MuLo-SD setting: {res['settings'].get('upsampler', 'pixel')}"])]
    out += [f"- family: {res['settings'].get('family')}; final stage: {res['sweep'].get('stages', {}).get('final', {}).get('samples', '-')} "
            f"samples per candidate", f"- rule: {res['rule']}", ""]
    if not res["settings"]["quality_meaningful"]:
        out += ["**Random models and classifier: quality columns are meaningless.**", ""]
    for name, s in res["sweep"]["stages"].items():
        ar = s["ar"]
        final = name == "final"
        out += [f"## {name} (AR: {f(ar['wall_seconds_median'], '{:.3f}')} s/image; "
                f"{s.get('samples', res['samples'])} samples per setting; "
                + ("each finalist's tier" if final else "screened, not a tier") + ")", "",
                "| setting | speed-up vs AR [CI] | target calls | acceptance | C2ST vs AR (strongest) [CI] | "
                "C2ST vs real [CI] (AR: " + _c2st_cell((ar.get("measures") or {}).get("c2st_real")) + ") | "
                "SWD full / half / quarter (AR: " + _swd_cell(ar.get("measures")) + ") | "
                + ("tier" if final else "survives") + " | chosen |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in s["rows"]:
            q = r.get("measures") or {}
            verdict = (r["tier"]["tier"] if r.get("tier") else "-") if final else ("yes" if r["qualifies"] else "no")
            mark = "**yes**" if r["chosen"] else ("indistinguishable preset" if s.get("indistinguishable") == r["label"]
                                                   else "")
            out.append(f"| {r['label']} | {f(r['wall_ratio_vs_ar'], '{:.2f}')}x{ci(r['wall_ratio_ci'], '{:.2f}')} | "
                       f"{f(r['target_calls'], '{:.1f}')} | {f(r['acceptance_rate'], '{:.2f}')} | "
                       f"{_c2st_cell(q.get('c2st_ar'))} | {_c2st_cell(q.get('c2st_real'))} | {_swd_cell(q)} | "
                       f"{verdict} | {mark} |")
        out.append("")
    if res["sweep"]["grid_experiment"]:
        out += ["## Grid size (the models are trained at one grid; other grids run through 2D RoPE, quality unknown)", "",
                "| target grid | label | samples | AR s/image | MuLo-SD speed-up | MuLo-SD accuracy | AR accuracy | MuLo-SD target calls |",
                "|---|---|---|---|---|---|---|---|"]
        for g in res["sweep"]["grid_experiment"]:
            out.append(f"| {g['grid']} | {g['label']} | {g['samples']} | {f(g['ar']['wall_seconds_median'], '{:.3f}')} | "
                       f"{f(g['mulo_islands']['wall_ratio_vs_ar'], '{:.2f}')}x | {f(g['mulo_islands']['accuracy'], '{:.3f}')} | "
                       f"{f(g['ar']['accuracy'], '{:.3f}')} | {f(g['mulo_islands']['target_calls'], '{:.1f}')} |")
        out.append("")
    if res["sweep"].get("baselines"):
        out += ["## Fastest setting per baseline and tier (final stage)", "",
                f"| method | {Q.INDISTINGUISHABLE} | {Q.AS_GOOD} |", "|---|---|---|"]
        cell = lambda v: f"{v['speed_up']:.2f}x `{v['label']}`" if v else "none in this tier"
        for m, t in res["sweep"]["baselines"].items():
            out.append(f"| {m} | {cell(t[Q.INDISTINGUISHABLE])} | {cell(t[Q.AS_GOOD])} |")
        out.append("")
    ch = res["sweep"]["chosen"]
    if ch is None:          # --grid-only, --baselines-only: nothing was chosen
        return "\n".join(out) + "\n"
    out += ["## Tiers", "", "| tier | fastest MuLo-SD setting | speed-up vs AR | beats AR |", "|---|---|---|---|"]
    for t, v in (res["sweep"].get("tiers") or {}).items():
        out.append(f"| {t} | {v['label'] if v else 'none in this tier'} | "
                   f"{f(v['speed_up'], '{:.2f}') + 'x' if v else '-'} | {('yes' if v['beats_ar'] else 'no') if v else '-'} |")
    out.append("")
    out += ["## Chosen defaults", "", "| constant | before | chosen |", "|---|---|---|"]
    out += [f"| {k} | {res['sweep']['preset_before'][k]} | {v} |" for k, v in ch.items()]
    if res["sweep"]["kept_preset_value_in"]:
        out += ["", f"No setting qualified in: {', '.join(res['sweep']['kept_preset_value_in'])} (preset value kept)."]
    return "\n".join(out) + "\n"


def _c2st_cell(c: dict | None) -> str:
    return "-" if not c else f"{c['max']:.2f}{fmt_ci(c['ci'], '{:.2f}')} ({c['detector']})"


def _swd_cell(q: dict | None) -> str:
    swd = (q or {}).get("swd") or {}
    return " / ".join(fmt_num(swd.get(lvl), "{:.0f}") for lvl in Q.SWD_LEVELS)


def write_plots(res: dict, out: str, tag: str) -> list[str]:
    """Speed-up against the strongest C2ST against AR (0.5: indistinguishable) of every setting of each stage,
    AR of the stage at 1x: the frontier picture of tau/k, l, w, rows and LANTERN's delta. PNGs next to the JSON."""
    from .plots import scatter
    note = None if res["settings"]["quality_meaningful"] else "random models/classifier: quality meaningless"
    paths = []
    c2st = lambda r: ((r.get("measures") or {}).get("c2st_ar") or {}).get("max")
    for name, st in res["sweep"]["stages"].items():
        pts = [("AR", 1.0, 0.5)] + [(r["label"], r["wall_ratio_vs_ar"], c2st(r)) for r in st["rows"] if c2st(r) is not None]
        p = os.path.join(out, f"{tag}-pareto-{name.replace('_', '-')}-c2st.png")
        scatter(pts, "speed-up vs AR (x)", "C2ST vs AR, strongest detector (0.5: indistinguishable)",
                f"{tag} {name}: speed-up vs C2ST", p, note=note)
        paths.append(p)
    return paths


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=None, help=f"samples per setting of the screening stages (default {SCREEN_SAMPLES}, --quick 2)")
    ap.add_argument("--quick", action="store_true", help="two values per parameter, 2 samples")
    ap.add_argument("--models", default="embedded", choices=("embedded", "tiny"))
    ap.add_argument("--tiny-grid", type=int, default=4)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--grid-experiment", action="store_true", help="also run other target grids (untrained)")
    ap.add_argument("--grid-only", action="store_true",
                    help="only the grid-size experiment, at the preset defaults (tag grid-<models>)")
    ap.add_argument("--recheck-only", action="store_true",
                    help="only recheck rounds 0/1/4/16 at the preset defaults (tag recheck-<models>)")
    ap.add_argument("--baselines-only", action="store_true",
                    help="only the baselines, each over its own knobs (BASELINE_GRID; tag baselines-<models>)")
    ap.add_argument("--recheck", type=int, default=None,
                    help="recheck rounds of every MuLo-SD setting of the sweep (default: the preset's)")
    ap.add_argument("--recheck-scope", default=None, choices=RECHECK_SCOPES,
                    help="what a recheck round verifies again (VerifierConfig.recheck_scope; default: the preset's; "
                         "--recheck-only: drafts)")
    ap.add_argument("--final-samples", type=int, default=FINAL_SAMPLES,
                    help="samples per candidate in the final stage (the tier verdict; a pass needs "
                         f"{Q.TIER_MIN_SAMPLES})")
    ap.add_argument("--final-top", type=int, default=None,
                    help=f"candidates carried into the final stage (default {FINAL_TOP}; --baselines-only: "
                         f"{BASELINE_FINAL_TOP} per method)")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--family", default=DEFAULT_EMBEDDED_FAMILY, choices=sorted(EMBEDDED_FAMILIES),
                    help="embedded family (default scenes)")
    ap.add_argument("--drafter", default="", help="the low-resolution drafter as <family>:<member> (scenes128's "
                                                  "target: scenes:target for r = 2, scenes:drafter for r = 4); default "
                                                  "the family's own")
    ap.add_argument("--tag", default=None, help="default sweep-<models>[-<family>][-quick] (the default family adds nothing)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--no-resume", action="store_true",
                    help="ignore the journal <out>/<tag>.journal.json of an earlier, interrupted run of the same sweep")
    ap.add_argument("--self-drafting", action="store_true",
                    help="the family's self_target drafts for itself (drafter kind self; tag ...-self): chooses "
                         "presets.MULO_DEFAULTS['<family>/self']")
    ap.add_argument("--baselines", nargs="+", default=None, choices=sorted(BASELINE_GRID), metavar="METHOD",
                    help="with --baselines-only: sweep only these baselines (default all: "
                         + ", ".join(BASELINE_GRID) + ")")
    ap.add_argument("--grid", nargs="+", default=[], metavar="NAME=V1,V2",
                    help="replace swept values, e.g. taus=0.1,0.3 ks=8 windows= (empty: skip the stage); names: "
                         + ", ".join(GRID_TYPES))
    ap.add_argument("--upsampler", default="pixel", choices=KINDS,
                    help="upsampler kind of every MuLo-SD setting (the presets ship pixel)")
    args = ap.parse_args(argv)
    try:
        grid = parse_grid(args.grid)
    except ValueError as e:
        ap.error(str(e))
    if grid and (args.grid_only or args.recheck_only or args.baselines_only):
        ap.error("--grid narrows the MuLo-SD sweep; --grid-only, --recheck-only and --baselines-only do not read it")
    if args.baselines and not args.baselines_only:
        ap.error("--baselines names the methods of --baselines-only; add --baselines-only or leave it out")
    if args.threads:
        torch.set_num_threads(args.threads)
    kind = ("grid" if args.grid_only else "recheck" if args.recheck_only else "baselines" if args.baselines_only
            else "sweep")
    if sum((args.grid_only, args.recheck_only, args.baselines_only)) > 1:
        ap.error("--grid-only, --recheck-only and --baselines-only each run one thing: choose one")
    if args.self_drafting and kind != "sweep":
        ap.error("--self-drafting runs the sweep itself, not --grid-only, --recheck-only or --baselines-only")
    tag = args.tag or f"{kind}-{models_tag(args.models, args.family, args.quick)}" + ("-self" if args.self_drafting else "")
    samples = args.samples or (2 if args.quick else SCREEN_SAMPLES)
    journal = None if args.no_resume else os.path.join(args.out, f"{tag}.journal.json")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    models = load_models(args.models, args.device, DTYPES[args.dtype], tiny_grid=args.tiny_grid, family=args.family,
                         target="self_target" if args.self_drafting else "target", drafter=args.drafter)
    if args.grid_only:
        n_boot_fd = N_BOOT_FD_QUICK if args.quick else N_BOOT_FD
        res_sweep = {"stages": {}, "chosen": None, "kept_preset_value_in": [], "preset_before": None,
                     "grid_experiment": grid_sizes(models, _preset_settings(models.target.family, args.upsampler), samples, args.batch, args.warmup, n_boot_fd,
                                                   not args.no_progress)}
    elif args.recheck_only:
        n_boot_fd = N_BOOT_FD_QUICK if args.quick else N_BOOT_FD
        res_sweep = {"stages": {"recheck": recheck_stage(models, samples, args.batch, args.warmup, n_boot_fd,
                                                         not args.no_progress, args.upsampler,
                                                         args.recheck_scope or "drafts")},
                     "chosen": None, "kept_preset_value_in": [], "preset_before": None, "grid_experiment": None}
    elif args.baselines_only:
        res_sweep = baselines(models, samples, args.final_samples if not args.quick else max(samples, 2),
                              args.final_top or BASELINE_FINAL_TOP, args.batch, args.warmup, not args.no_progress,
                              args.quick, journal=journal,
                              methods=args.baselines)
    else:
        res_sweep = sweep(models, samples, args.quick, args.batch, args.warmup, args.grid_experiment,
                          not args.no_progress, args.upsampler, args.recheck, args.recheck_scope,
                          args.final_samples if not args.quick else max(samples, 2), args.final_top or FINAL_TOP,
                          args.self_drafting, journal=journal,
                          grid=grid)
    device = torch.device(args.device)
    res = {"command": "python -m bench.sweep " + " ".join(sys.argv[1:] if argv is None else argv),
           "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"), "tag": tag,
           "hardware": hardware(device), "samples": samples, "rule": RULE,
           "settings": {"models": args.models, "family": args.family, "model_info": model_info(models), "dtype": args.dtype,
                        "batch": args.batch, "warmup": args.warmup, "upsampler": args.upsampler, "self_drafting": args.self_drafting, "recheck": args.recheck, "recheck_scope": args.recheck_scope, "quick": args.quick, "sampling": models.sampling.to_dict(),
                        "grid": models.target.grid, "quality_meaningful": models.quality_meaningful,
                        "seconds": time.perf_counter() - t0},
           "sweep": res_sweep}
    res = jsonable(res)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{tag}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(args.out, f"{tag}.md"), "w") as f:
        f.write(markdown(res))
    write_plots(res, args.out, tag)
    print("rule: " + RULE)
    if res_sweep["chosen"] and "final" not in res_sweep["kept_preset_value_in"]:
        ch = {k: v for k, v in res_sweep["chosen"].items() if k != "lantern_delta"}
        key = P.defaults_key(res_sweep.get("family"), res_sweep.get("self_drafting", False))
        print(f"chosen defaults for {key!r} (presets.MULO_DEFAULTS): MuloDefaults("
              + ", ".join(f"{k}={v!r}" for k, v in ch.items()) + f", source={tag + '.md'!r})"
              + f"; LANTERN delta {res_sweep['chosen']['lantern_delta']}")
    for t, v in (res_sweep.get("tiers") or {}).items():
        print(f"{t}: " + (f"{v['label']} at {v['speed_up']:.2f}x AR" + ("" if v["beats_ar"] else " (does not beat AR)")
                          if v else "no MuLo-SD setting in this tier"))
    if res_sweep["kept_preset_value_in"]:
        print("no setting qualified in: " + ", ".join(res_sweep["kept_preset_value_in"]) + " (preset value kept)")
    print(f"wrote {path} (+ .md) in {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
