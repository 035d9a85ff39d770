"""Every method on the same classes and seeds, in one process (docs/DESIGN.md sections 5 and 10).

    python -m bench.compare [--samples N] [--device cpu] [--dtype float32] [--batch 1]
                            [--methods ar mulo_islands ...] [--quick] [--models embedded|tiny]
                            [--out bench/results] [--warmup 1] [--tag NAME] [--threads T]

Sample i is class i % NUM_CLASSES with seed i (a batch starting at sample i uses seed i, and
the engine gives its element j the stream of seed i + j, so batch size does not change the
samples). For every batch, every method runs once before the next batch starts, in an order
rotated by one method per batch, so machine noise (other jobs, thermal drift) hits all
methods alike. `--warmup` runs per method (class 0, seeds 10000+) happen first and are not
timed. Wall time covers `engine.generate` including VQ decoding, per image (run time / batch);
quality metrics (classifier, NLL) are computed after the timed region.

Speed: `wall_ratio_vs_ar` = median AR seconds per image / median method seconds per image
(a speed-up: > 1 is faster than AR), always against the AR runs of this same invocation;
`wall_ratio_ci` is a paired bootstrap 95% interval over runs of the same median(AR) / median(method);
`share_of_oracle` = wall_ratio_vs_ar / wall_ratio_vs_ar of mulo_oracle (the pipeline's ceiling:
every draft accepted). Counters are per `generate` call (per batch; equal to per image at
batch 1): target_calls, drafter_calls; tokens_per_target_call = tokens per image / target calls.

Quality: classifier accuracy against the requested class (bootstrap CI), Frechet distance in
classifier features against real procedural samples (`make_batch(classes, REAL_SEED)`,
bootstrap CI via bootstrap_ci_pair), target NLL of the final grid (mean per-token -log p under
the target with the sampling's CFG/temperature/top-k/top-p, floor 1e-12), and the same
against AR with paired intervals (`vs_ar`). With `--models tiny` models and classifier are
random: the quality numbers are meaningless and labelled so.

Peak memory: on CUDA the max allocated bytes over the method's runs; on CPU the growth of the
process's max RSS (`resource.getrusage`) during the method's runs -- max RSS never goes down,
so only runs that reach a new process high show a growth; labelled `cpu_max_rss_growth`.

Outputs in --out, tag `<device>-<models>[-quick]` unless --tag: `<tag>.json` (schema below),
`<tag>.md`, and PIL-drawn PNGs `<tag>-pareto.png`, `<tag>-time-split.png`, `<tag>-grid.png`
(rows: AR, MuLo-SD islands, its acceptance map).

JSON: {"command", "date", "invocation", "hardware": {processor, machine, platform, cpu_count,
torch, device, device_name}, "samples", "settings": {models, device, dtype, batch, warmup,
sampling, grid, tokens_per_image, classes, seeds, real_seed, quality_meaningful, ...},
"methods": {name: {"target_calls", "drafter_calls", "tokens_per_target_call", "acceptance_rate",
"resampled_fraction", "wall_seconds_median", "wall_seconds_iqr", "wall_seconds_q25_q75",
"wall_ratio_vs_ar", "wall_ratio_ci", "share_of_oracle", "time_split", "peak_memory", "accuracy",
"accuracy_ci", "fd", "fd_ci", "nll", "nll_ci", "vs_ar", "kind", "drafter", "config",
"ratio_reference", "runs": {per-run lists}}}, "checks": {"passed", "failures"}}

`--quick` runs 4 samples of ar, sd, lantern, zipar, sjd, gsd, mulo_serial, mulo_islands, mulo_oracle
and exits non-zero when a consistency check fails (every run also records the checks): token
count equals the grid size, accepted + resampled == tokens for local-rejection methods, ratios
come from this invocation's AR runs, ZipAR's target calls equal `schedules.zipar_nfe`, the oracle
has the fewest target calls among speculative methods.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import math
import os
import platform
import resource
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mulosd_core.data.families import DataFamily, data_family
from mulosd_core.models.registry import DEFAULT_EMBEDDED_FAMILY, DTYPES, EMBEDDED_FAMILIES
from mulosd_core.engine import MethodConfig, generate
from mulosd_core.metrics import bootstrap_ci, bootstrap_ci_pair, frechet_distance
from mulosd_core.ar import model_sampling
from mulosd_core.presets import EMBEDDED_SAMPLING, method_presets
from mulosd_core.sampling import SamplingConfig, cfg_combine, process_logits
from mulosd_core.schedules import zipar_nfe

log = logging.getLogger("bench.compare")

# mulo_no_pooling (k = 1) is left out while the default itself has k = 1 (presets.MULO_K): it would repeat mulo_islands.
ALL_METHODS = ("ar", "sd", "lantern", "zipar", "sjd", "gsd", "mulo_serial", "mulo_islands", "mulo_paper", "mulo_raster",
               "mulo_sequential_draft", "mulo_nearest", "mulo_embedding", "mulo_learned", "mulo_oracle")
QUICK_METHODS = ("ar", "sd", "lantern", "zipar", "sjd", "gsd", "mulo_serial", "mulo_islands", "mulo_oracle")
QUICK_SAMPLES = 4
ORACLE = "mulo_oracle"
GRID_METHOD = "mulo_islands"       # the image grid shows AR vs this
TINY_SAMPLING = EMBEDDED_SAMPLING   # random tiny models keep the patterns family's sampling
REAL_SEED = 20_240_601             # real reference samples for the Frechet distance
WARMUP_SEED = 10_000
NLL_FLOOR = 1e-12
N_BOOT = 1000
N_BOOT_FD = 200
N_BOOT_FD_QUICK = 50
TIME_PARTS = ("draft", "upsample", "verify", "resample", "context", "decode", "other")


# ----------------------------------------------------------------------------- models
@dataclass
class Models:
    target: Any
    drafter: Any                      # low resolution (r > 1)
    sd_drafter: Any                   # same resolution (r = 1)
    classifier: torch.nn.Module
    kind: str                         # "embedded" or "tiny"
    quality_meaningful: bool
    family: DataFamily                # classes and real images of the run
    info: dict = field(default_factory=dict)

    @property
    def sampling(self) -> SamplingConfig:
        """The sampling every method runs with: the one the target was trained for (its family card)."""
        return model_sampling(self.target)

    def drafter_for(self, kind: str | None):
        """"low": the low-resolution drafter, "same": the same-resolution one, "self": the target itself at
        the low drafter's grid (self-drafting: the same weights, no second model)."""
        if kind == "self":
            return self.target.at_grid(self.drafter.grid, name=f"{self.target.name}@self")
        return {"low": self.drafter, "same": self.sd_drafter, None: None}[kind]


def load_models(kind: str, device: str = "cpu", dtype: torch.dtype = torch.float32, tiny_grid: int = 4,
                family: str = DEFAULT_EMBEDDED_FAMILY) -> Models:
    """An embedded family (+ its classifier), or tiny random models with a random classifier."""
    from mulosd_core.train.classifier import PatternClassifier
    fam = data_family(family)
    if kind == "tiny":
        from mulosd_core.testing import tiny_model, tiny_vq
        vq = tiny_vq(1000, 64).to(device)
        mk = lambda grid, seed: tiny_model(grid, seed, vq=vq, dtype=dtype, num_classes=fam.num_classes)
        target, drafter, sd = mk(tiny_grid, 0), mk(max(tiny_grid // 2, 1), 1), mk(tiny_grid, 2)
        for m in (target, drafter, sd):
            m.gpt.to(device)
            m.default_sampling = TINY_SAMPLING
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            clf = PatternClassifier().to(device).eval()
        return Models(target, drafter, sd, clf, "tiny", False, fam,
                      {"note": "tiny random models and a randomly initialised classifier: quality numbers are meaningless"})
    if kind != "embedded":
        raise ValueError(f"--models must be 'embedded' or 'tiny', got {kind!r}")
    from mulosd_core.models.registry import embedded_path, load_embedded
    from mulosd_core.train.classifier import load_classifier
    target = load_embedded("target", dtype=dtype, device=device, family=family)
    drafter = load_embedded("drafter", dtype=dtype, device=device, vq=target.vq, family=family)
    sd = load_embedded("sd_drafter", dtype=dtype, device=device, vq=target.vq, family=family)
    clf = load_classifier(embedded_path("classifier", family), device=device)
    info = {"family": family,
            "files": {m: _file_info(embedded_path(m, family)) for m in ("target", "drafter", "sd_drafter", "vq",
                                                                         "classifier")}}
    return Models(target, drafter, sd, clf, "embedded", True, fam, info)


def _file_info(path: str) -> dict:
    st = os.stat(path)
    return {"bytes": st.st_size, "mtime": _dt.datetime.fromtimestamp(st.st_mtime).isoformat(timespec="seconds")}


def _params(model) -> int:
    return sum(p.numel() for p in model.gpt.parameters())


def model_info(models: Models) -> dict:
    out = {"kind": models.kind, "quality_meaningful": models.quality_meaningful, **models.info}
    for name in ("target", "drafter", "sd_drafter"):
        m = getattr(models, name)
        out[name] = {"name": m.name, "grid": m.grid, "image_size": m.image_size, "vocab": m.vocab_size,
                     "params": _params(m), "dim": m.gpt.config.dim, "layers": m.gpt.config.n_layer}
    return out


# ---------------------------------------------------------------------------- metrics
@torch.inference_mode()
def target_nll(target, tokens: torch.Tensor, cond: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Mean per-token -log p(token) [B] of a finished grid under the target, teacher-forced in one forward.

    p is the distribution the sampler draws from: raw logits of the cond rows, CFG-combined with the
    null-condition rows when CFG is on, then temperature / top-k / top-p (`process_logits`); p is
    floored at 1e-12 so tokens outside a top-k/top-p support give a finite (large) NLL.
    """
    tokens = tokens.to(target.device).long()
    cond = torch.as_tensor(cond, device=target.device)
    logits = target.gpt(tokens, cond, target.grid)                      # [B, N, V]
    if sampling.uses_cfg:
        null = target.gpt(tokens, target.gpt.null_condition(tokens.shape[0], target.device), target.grid)
        logits = cfg_combine(torch.cat([logits, null]), sampling.cfg_scale)
    probs = process_logits(logits, sampling)
    p = probs.gather(-1, tokens[..., None])[..., 0].clamp_min(NLL_FLOOR)
    return -p.log().mean(-1).float().cpu()


def ratio_of_medians(ref: Any, other: Any) -> float:
    """median(ref) / median(other): the speed-up of `other` over `ref` for seconds per image."""
    r, o = np.median(np.asarray(ref, float)), np.median(np.asarray(other, float))
    return float(r / o) if o > 0 else float("nan")


WALL_RATIO_CI = "paired bootstrap of the ratio of medians"


def ratio_ci(ref: Any, other: Any, n_boot: int = N_BOOT, seed: int = 0) -> list[float] | None:
    """Paired bootstrap 95% interval of median(ref) / median(other) over runs (same seeds in both):
    the interval of the very statistic `ratio_of_medians` reports."""
    a, b = np.asarray(ref, float), np.asarray(other, float)
    if len(a) != len(b) or len(a) == 0:
        return None
    lo, hi = bootstrap_ci_pair(a, b, lambda x, y: np.median(x) / np.median(y), n_boot=n_boot, seed=seed, paired=True)
    return [lo, hi]


def ci_statistic(result: dict) -> str:
    """What the speed-up interval of a results JSON bootstraps (runs before this field bootstrapped means)."""
    return result.get("settings", {}).get("wall_ratio_ci", "paired bootstrap of the ratio of means")


def share_of_oracle(ratio: float | None, oracle_ratio: float | None) -> float | None:
    """A method's speed-up as a share of the oracle's (1.0 = as fast as accepting every draft)."""
    if ratio is None or oracle_ratio is None or not (oracle_ratio > 0) or not math.isfinite(ratio):
        return None
    return float(ratio / oracle_ratio)


def iqr(values: Any) -> tuple[float, float, float]:
    q25, q75 = np.quantile(np.asarray(values, float), [0.25, 0.75])
    return float(q75 - q25), float(q25), float(q75)


def _fd(gen: np.ndarray, real: np.ndarray, n_boot: int = N_BOOT_FD) -> tuple[float | None, list[float] | None]:
    if len(gen) < 2 or len(real) < 2:
        return None, None
    fd = frechet_distance(gen, real)
    lo, hi = bootstrap_ci_pair(gen, real, frechet_distance, n_boot=n_boot, seed=0)
    return fd, [lo, hi]


def _mean_ci(values: np.ndarray) -> tuple[float | None, list[float] | None]:
    if len(values) == 0:
        return None, None
    lo, hi = bootstrap_ci(values, n_boot=N_BOOT, seed=0)
    return float(np.mean(values)), [lo, hi]


def _paired_delta(a: np.ndarray, b: np.ndarray) -> tuple[float | None, list[float] | None]:
    """mean(a - b) with a paired bootstrap interval (a, b aligned by sample)."""
    if len(a) == 0 or len(a) != len(b):
        return None, None
    return _mean_ci(np.asarray(a, float) - np.asarray(b, float))


# ------------------------------------------------------------------------------ running
class _Progress:
    """One stderr line: `[bench] 12/104 mulo_islands sample 3 0.41s eta 40s`."""

    def __init__(self, total: int, enabled: bool = True, label: str = "bench") -> None:
        self.total, self.done, self.enabled, self.label = total, 0, enabled, label
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self.every = max(1, total // 20)

    def step(self, what: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        el = time.perf_counter() - self.t0
        eta = el / self.done * (self.total - self.done)
        line = f"[{self.label}] {self.done}/{self.total} {what} elapsed {el:.0f}s eta {eta:.0f}s"
        if self.tty:
            sys.stderr.write("\r" + line.ljust(100))
            if self.done == self.total:
                sys.stderr.write("\n")
        elif self.done % self.every == 0 or self.done == self.total:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _maxrss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * (1 if sys.platform == "darwin" else 1024)


def _time_split(seconds: dict, total: float) -> dict:
    """Engine timers -> TIME_PARTS; AR's `forward` counts as verify (target calls), its loop overhead as other."""
    s = dict(seconds)
    s.pop("total", None)
    if "forward" in s:
        s["verify"] = s.get("verify", 0.0) + s.pop("forward")
    s.pop("loop_overhead", None)
    out = {p: float(s.get(p, 0.0)) for p in TIME_PARTS if p != "other"}
    out["other"] = max(total - sum(out.values()), 0.0)
    return out


def run_methods(models: Models, methods: dict[str, tuple[MethodConfig, str | None]], samples: int,
                batch: int = 1, warmup: int = 1, sampling: SamplingConfig | None = None, keep_images: int = 0,
                progress: bool = True, label: str = "bench") -> dict[str, dict]:
    """Run every method on the same batches, interleaved; returns raw per-run records per method
    (with the target's own sampling unless `sampling` says otherwise)."""
    target, dev = models.target, models.target.device
    sampling = sampling or models.sampling
    names = list(methods)
    batches = [(i, min(batch, samples - i)) for i in range(0, samples, batch)]
    bar = _Progress(warmup * len(names) + len(batches) * len(names), progress, label)
    raw = {n: {"wall": [], "target_calls": [], "drafter_calls": [], "tokens_per_image": [], "batch": [],
               "accepted": 0, "resampled": 0, "drafted": 0, "tokens_total": 0, "split": [], "mem": 0,
               "correct": [], "features": [], "nll": [], "images": [], "maps": [], "tokens_in_range": True}
           for n in names}
    for n in names:                                   # warm-up (allocator, kernels, rope tables, kNN tables)
        cfg, kind = methods[n]
        for k in range(warmup):
            generate(target, torch.tensor([0] * batch), sampling, cfg, models.drafter_for(kind), seed=WARMUP_SEED + k)
            bar.step(f"warm-up {n}")
    for bi, (i0, b) in enumerate(batches):
        cond = torch.tensor([(i0 + j) % models.family.num_classes for j in range(b)])
        order = names[bi % len(names):] + names[:bi % len(names)]
        for n in order:
            cfg, kind = methods[n]
            rec = raw[n]
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            rss0 = _maxrss_bytes()
            _sync(dev)
            t0 = time.perf_counter()
            res = generate(target, cond, sampling, cfg, models.drafter_for(kind), seed=i0)
            _sync(dev)
            wall = time.perf_counter() - t0
            rec["mem"] = max(rec["mem"], int(torch.cuda.max_memory_allocated(dev)) if dev.type == "cuda"
                             else _maxrss_bytes() - rss0)
            st = res.stats
            rec["wall"].append(wall / b)
            rec["batch"].append(b)
            rec["target_calls"].append(st.target_calls)
            rec["drafter_calls"].append(st.drafter_calls)
            rec["tokens_per_image"].append(int(res.tokens.shape[1]))
            rec["tokens_in_range"] &= bool(((res.tokens >= 0) & (res.tokens < target.vocab_size)).all())
            rec["accepted"] += st.accepted
            rec["resampled"] += st.resampled
            rec["drafted"] += st.drafted
            rec["tokens_total"] += int(res.tokens.numel())
            rec["split"].append({k: v / b for k, v in _time_split(st.seconds, wall).items()})
            with torch.inference_mode():                 # quality, outside the timed region
                imgs = res.images.float().to(next(models.classifier.parameters()).device)
                feats = models.classifier.features(imgs)
                logits = models.classifier.head(feats)
            rec["correct"].extend((logits.argmax(-1).cpu() == cond).tolist())
            rec["features"].append(feats.float().cpu().numpy())
            rec["nll"].extend(target_nll(target, res.tokens, cond, sampling).tolist())
            if len(rec["images"]) < keep_images:
                rec["images"].append(res.images.float().cpu())
                rec["maps"].append(res.maps.float().cpu())
            bar.step(f"{n} sample {i0}")
    return raw


def real_features(models: Models, samples: int) -> np.ndarray:
    fam = models.family
    classes = [i % fam.num_classes for i in range(samples)]
    feats = []
    with torch.inference_mode():
        dev = next(models.classifier.parameters()).device
        for s in range(0, samples, 256):
            imgs = fam.batch(classes[s:s + 256], REAL_SEED + s, size=models.target.image_size, variation=fam.gpt_variation)
            feats.append(models.classifier.features(imgs.to(dev)).float().cpu().numpy())
    return np.concatenate(feats)


def _is_speculative(cfg: MethodConfig) -> bool:
    return cfg.method == "speculative"


def _local(cfg: MethodConfig) -> bool:
    return _is_speculative(cfg) and cfg.verifier.rejection == "local"


def summarise(raw: dict[str, dict], methods: dict[str, tuple[MethodConfig, str | None]], real: np.ndarray,
              invocation: str, device: torch.device, reference: str = "ar", oracle: str = ORACLE,
              n_boot_fd: int = N_BOOT_FD) -> dict[str, dict]:
    """Per-method summary (the JSON's "methods"); ratios against `reference` of the same raw runs."""
    out: dict[str, dict] = {}
    ref = raw.get(reference)
    ref_correct = np.asarray(ref["correct"], float) if ref else None
    ref_nll = np.asarray(ref["nll"], float) if ref else None
    ref_feats = np.concatenate(ref["features"]) if ref else None
    for n, rec in raw.items():
        cfg, kind = methods[n]
        wall = np.asarray(rec["wall"], float)
        spread, q25, q75 = iqr(wall)
        ratio = ratio_of_medians(ref["wall"], wall) if ref else None
        correct = np.asarray(rec["correct"], float)
        nll = np.asarray(rec["nll"], float)
        feats = np.concatenate(rec["features"])
        acc, acc_ci = _mean_ci(correct)
        nll_m, nll_ci = _mean_ci(nll)
        fd, fd_ci = _fd(feats, real, n_boot_fd)
        tokens_img = float(np.mean(rec["tokens_per_image"]))
        tc = float(np.mean(rec["target_calls"]))
        vs_ar = None
        if ref:
            da, da_ci = _paired_delta(correct, ref_correct)
            dn, dn_ci = _paired_delta(nll, ref_nll)
            vs_ar = {"accuracy_delta": da, "accuracy_delta_ci": da_ci, "nll_delta": dn, "nll_delta_ci": dn_ci,
                     "fd_to_ar": frechet_distance(feats, ref_feats) if len(feats) >= 2 else None}
        out[n] = {
            "kind": cfg.method, "drafter": kind, "config": cfg.to_dict(),
            "target_calls": tc,
            "drafter_calls": float(np.mean(rec["drafter_calls"])),
            "tokens_per_target_call": tokens_img / max(tc, 1e-12),
            "acceptance_rate": (rec["accepted"] / rec["drafted"]) if rec["drafted"] else None,
            "resampled_fraction": rec["resampled"] / max(rec["tokens_total"], 1),
            "wall_seconds_median": float(np.median(wall)),
            "wall_seconds_iqr": spread,
            "wall_seconds_q25_q75": [q25, q75],
            "wall_ratio_vs_ar": ratio,
            "wall_ratio_ci": ratio_ci(ref["wall"], wall) if ref else None,
            "share_of_oracle": None,
            "time_split": {p: float(np.mean([s[p] for s in rec["split"]])) for p in TIME_PARTS},
            "peak_memory": {"kind": "cuda_max_allocated" if device.type == "cuda" else "cpu_max_rss_growth",
                            "bytes": int(rec["mem"])},
            "accuracy": acc, "accuracy_ci": acc_ci,
            "fd": fd, "fd_ci": fd_ci,
            "nll": nll_m, "nll_ci": nll_ci,
            "vs_ar": vs_ar,
            "ratio_reference": {"invocation": invocation, "method": reference} if ref else None,
            "runs": {"wall_seconds": wall.tolist(), "target_calls": rec["target_calls"],
                     "drafter_calls": rec["drafter_calls"], "tokens_per_image": rec["tokens_per_image"],
                     "batch": rec["batch"], "accepted": rec["accepted"], "resampled": rec["resampled"],
                     "drafted": rec["drafted"], "tokens_total": rec["tokens_total"],
                     "tokens_in_range": rec["tokens_in_range"]},
        }
    if oracle in out:
        o = out[oracle]["wall_ratio_vs_ar"]
        for n in out:
            out[n]["share_of_oracle"] = share_of_oracle(out[n]["wall_ratio_vs_ar"], o)
    return out


# -------------------------------------------------------------------------- consistency
def check_consistency(result: dict, rel: float = 1e-9) -> list[str]:
    """Failures (empty when consistent) of a compare result dict; see the module docstring."""
    fails: list[str] = []
    st = result.get("settings", {})
    grid = st.get("grid")
    n_tok = st.get("tokens_per_image")
    methods = result.get("methods", {})
    inv = result.get("invocation")
    if "ar" not in methods:
        fails.append("no AR run in this invocation: ratios have no reference")
    ar_wall = methods.get("ar", {}).get("runs", {}).get("wall_seconds")
    spec_calls = {}
    for name, m in methods.items():
        runs = m.get("runs", {})
        cfg = m.get("config", {})
        toks = runs.get("tokens_per_image", [])
        if not toks or any(t != n_tok for t in toks):
            fails.append(f"{name}: token count per image {sorted(set(toks))} != grid size {n_tok}")
        if not runs.get("tokens_in_range", True):
            fails.append(f"{name}: tokens outside the vocabulary")
        local = cfg.get("method") == "speculative" and cfg.get("verifier", {}).get("rejection") == "local"
        if local and runs.get("accepted", 0) + runs.get("resampled", 0) != runs.get("tokens_total"):
            fails.append(f"{name}: accepted {runs.get('accepted')} + resampled {runs.get('resampled')} "
                         f"!= tokens {runs.get('tokens_total')}")
        ref = m.get("ratio_reference") or {}
        if ref.get("invocation") != inv or ref.get("method") != "ar":
            fails.append(f"{name}: wall ratio is not against this invocation's AR run ({ref})")
        elif ar_wall:
            want = ratio_of_medians(ar_wall, runs.get("wall_seconds", []))
            got = m.get("wall_ratio_vs_ar")
            if got is None or not math.isclose(got, want, rel_tol=rel, abs_tol=1e-12):
                fails.append(f"{name}: wall_ratio_vs_ar {got} != median(AR)/median({name}) = {want}")
        if cfg.get("method") == "zipar" and grid:
            want = zipar_nfe(grid, cfg.get("zipar_window", 8))
            bad = sorted({c for c in runs.get("target_calls", []) if c != want})
            if bad:
                fails.append(f"{name}: target calls {bad} != zipar_nfe({grid}, {cfg.get('zipar_window')}) = {want}")
        if cfg.get("method") == "speculative":
            spec_calls[name] = m.get("target_calls")
    if ORACLE in spec_calls:
        o = spec_calls[ORACLE]
        worse = {n: c for n, c in spec_calls.items() if n != ORACLE and c is not None and c < o}
        if worse:
            fails.append(f"{ORACLE} ({o} target calls) is not the fewest among speculative methods: {worse}")
    if "ar" in methods and methods["ar"].get("wall_ratio_vs_ar") is not None \
            and not math.isclose(methods["ar"]["wall_ratio_vs_ar"], 1.0, rel_tol=1e-12):
        fails.append(f"ar: wall ratio against itself is {methods['ar']['wall_ratio_vs_ar']}, not 1")
    return fails


# ------------------------------------------------------------------------------- output
def hardware(device: torch.device) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine())
    return {"processor": platform.processor(), "machine": platform.machine(), "platform": platform.platform(),
            "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "device": str(device), "device_name": name}


def _f(v, fmt: str = "{:.3g}") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return fmt.format(v)


def _ci(ci, fmt: str = "{:.3g}") -> str:
    return "" if not ci else f" [{_f(ci[0], fmt)}, {_f(ci[1], fmt)}]"


def _mem(m: dict) -> str:
    b = m.get("bytes", 0)
    return f"{b / 2**20:.1f} MiB" + (" (RSS growth)" if m.get("kind") == "cpu_max_rss_growth" else "")


def markdown_table(result: dict, paper: dict | None = None) -> str:
    """The results table (one row per method); `paper` adds a column of published figures."""
    head = ["method", "target calls", "drafter calls", "tokens/target call", "acceptance", "resampled",
            "s/image (median, IQR)", "speed-up vs AR [95% CI]", "share of oracle", "accuracy [CI]",
            "FD [CI]", "NLL [CI]", "peak memory"]
    if paper is not None:
        head.append("paper (different scale/hardware)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in result["methods"].items():
        row = [name, _f(m["target_calls"], "{:.1f}"), _f(m["drafter_calls"], "{:.1f}"),
               _f(m["tokens_per_target_call"], "{:.2f}"), _f(m["acceptance_rate"], "{:.2f}"),
               _f(m["resampled_fraction"], "{:.2f}"),
               f"{_f(m['wall_seconds_median'], '{:.3f}')} ({_f(m['wall_seconds_iqr'], '{:.3f}')})",
               f"{_f(m['wall_ratio_vs_ar'], '{:.2f}')}x{_ci(m['wall_ratio_ci'], '{:.2f}')}",
               _f(m["share_of_oracle"], "{:.0%}"),
               f"{_f(m['accuracy'], '{:.3f}')}{_ci(m['accuracy_ci'], '{:.3f}')}",
               f"{_f(m['fd'], '{:.3g}')}{_ci(m['fd_ci'], '{:.3g}')}",
               f"{_f(m['nll'], '{:.3f}')}{_ci(m['nll_ci'], '{:.3f}')}",
               _mem(m["peak_memory"])]
        if paper is not None:
            row.append(paper.get(name, ""))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def time_split_table(result: dict) -> str:
    lines = ["| method | " + " | ".join(TIME_PARTS) + " |", "|" + "---|" * (len(TIME_PARTS) + 1)]
    for name, m in result["methods"].items():
        lines.append(f"| {name} | " + " | ".join(_f(m["time_split"][p], "{:.4f}") for p in TIME_PARTS) + " |")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    st = result["settings"]
    hw = result["hardware"]
    out = [f"# Benchmark `{result['tag']}`", "",
           f"- command: `{result['command']}`", f"- date: {result['date']}",
           f"- hardware: {hw['device_name']} ({hw['device']}), {hw['cpu_count']} CPUs, torch {hw['torch']}, "
           f"{hw['torch_threads']} threads, {hw['platform']}",
           f"- models: {st['models']} (target grid {st['grid']}, {st['tokens_per_image']} tokens/image), "
           f"dtype {st['dtype']}, batch {st['batch']}, {result['samples']} samples, warm-up {st['warmup']}",
           f"- sampling: {st['sampling']}", ""]
    if not st.get("quality_meaningful", True):
        out += ["**Quality columns are meaningless here: random models and a randomly initialised classifier.**", ""]
    out += ["Speed-up = median AR s/image / median method s/image (same process, same seeds); CI: "
            f"{ci_statistic(result)}. Share of oracle = speed-up / mulo_oracle's speed-up. Counters are per "
            "generate call (per image at batch 1). FD in classifier features against real samples; NLL = mean "
            "per-token -log p under the target with the sampling's CFG/temperature.", "",
            markdown_table(result), "", "## Time split (seconds per image)", "",
            "ZipAR, SJD and GSD have no part timers in the engine: their time is under other.", "",
            time_split_table(result), ""]
    chk = result.get("checks", {})
    out += [f"Consistency checks: {'passed' if chk.get('passed') else 'FAILED'}"]
    out += [f"- {f}" for f in chk.get("failures", [])]
    return "\n".join(out) + "\n"


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def write_plots(result: dict, raw: dict, out: str, tag: str, image_size: int) -> list[str]:
    from PIL import Image

    from mulosd_core.demo import to_grid

    from .plots import scatter, stacked_bars
    paths = []
    ms = result["methods"]
    note = None if result["settings"].get("quality_meaningful", True) else "random models/classifier: quality meaningless"
    for metric, label in (("accuracy", "classifier accuracy"), ("fd", "Frechet distance (lower is better)")):
        p = os.path.join(out, f"{tag}-pareto-{metric}.png")
        scatter([(n, m["wall_ratio_vs_ar"], m[metric]) for n, m in ms.items()], "speed-up vs AR (x)", label,
                f"{tag}: speed-up vs {label}", p, note=note)
        paths.append(p)
    p = os.path.join(out, f"{tag}-time-split.png")
    stacked_bars([(n, m["time_split"]) for n, m in ms.items()], TIME_PARTS, f"{tag}: seconds per image", p)
    paths.append(p)
    if raw.get("ar", {}).get("images") and raw.get(GRID_METHOD, {}).get("images"):
        size = max(image_size * 2, 64)
        rows = [to_grid(torch.cat(raw["ar"]["images"]), size), to_grid(torch.cat(raw[GRID_METHOD]["images"]), size),
                to_grid(torch.cat(raw[GRID_METHOD]["maps"]), size)]
        p = os.path.join(out, f"{tag}-grid.png")
        Image.fromarray(np.concatenate(rows, 0)).save(p)
        paths.append(p)
    return paths


# --------------------------------------------------------------------------------- main
def run_compare(args: argparse.Namespace, argv: list[str] | None = None) -> tuple[dict, dict]:
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    models = load_models(args.models, args.device, dtype, tiny_grid=args.tiny_grid, family=args.family)
    presets = method_presets(models.target.family)
    names = list(args.methods or (QUICK_METHODS if args.quick else ALL_METHODS))
    unknown = [n for n in names if n not in presets]
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; choose from {list(presets)}")
    if "ar" not in names:
        names.insert(0, "ar")                       # ratios need this invocation's AR
    methods = {n: presets[n] for n in names}
    samples = args.samples or (QUICK_SAMPLES if args.quick else 200)
    invocation = uuid.uuid4().hex
    t0 = time.perf_counter()
    raw = run_methods(models, methods, samples, args.batch, args.warmup,
                      keep_images=models.family.num_classes, progress=not args.no_progress)
    bench_seconds = time.perf_counter() - t0
    real = real_features(models, samples)
    summary = summarise(raw, methods, real, invocation, device,
                        n_boot_fd=N_BOOT_FD_QUICK if args.quick else N_BOOT_FD)
    t = models.target
    result = {
        "command": "python -m bench.compare " + " ".join(sys.argv[1:] if argv is None else argv),
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "tag": args.tag,
        "invocation": invocation,
        "hardware": hardware(device),
        "samples": samples,
        "settings": {"models": args.models, "family": args.family, "model_info": model_info(models), "device": str(device),
                     "dtype": args.dtype, "batch": args.batch, "warmup": args.warmup, "quick": args.quick,
                     "sampling": models.sampling.to_dict(), "grid": t.grid, "tokens_per_image": t.num_tokens,
                     "image_size": t.image_size, "classes": "sample i: class i % NUM_CLASSES, seed i",
                     "class_names": list(models.family.class_names), "real_seed": REAL_SEED, "real_samples": len(real),
                     "quality_meaningful": models.quality_meaningful, "method_order": "rotated by one per batch",
                     "wall_time": "engine.generate incl. VQ decode, per image; warm-up excluded",
                     "time_split_note": "AR: forward counted as verify, loop overhead in other; zipar/sjd/gsd have no part "
                                        "timers (all under other)",
                     "fd_bootstrap": N_BOOT_FD_QUICK if args.quick else N_BOOT_FD, "wall_ratio_ci": WALL_RATIO_CI,
                     "bench_seconds": bench_seconds},
        "methods": summary,
    }
    fails = check_consistency(result)
    result["checks"] = {"passed": not fails, "failures": fails}
    return _jsonable(result), raw


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=None, help="images per method (default 200, --quick 4)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--batch", type=int, default=1, help="batch size (1 is the paper's setting)")
    ap.add_argument("--methods", nargs="+", default=None, help=f"default: all ({', '.join(ALL_METHODS)})")
    ap.add_argument("--quick", action="store_true", help="4 samples, fewer methods; exit 1 on failed checks")
    ap.add_argument("--models", default="embedded", choices=("embedded", "tiny"))
    ap.add_argument("--family", default=DEFAULT_EMBEDDED_FAMILY, choices=sorted(EMBEDDED_FAMILIES),
                    help="embedded family (scenes: the default, patterns: the near-deterministic hard case)")
    ap.add_argument("--tiny-grid", type=int, default=4, help="target grid of --models tiny (drafter: half)")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--tag", default=None, help="output name (default <device>-<models>[-<family>][-quick]; the "
                                                 "default family adds nothing)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    if args.batch < 1 or (args.samples is not None and args.samples < 1) or args.warmup < 0:
        ap.error("--batch and --samples must be >= 1, --warmup >= 0")
    if args.tag is None:
        args.tag = default_tag(args.device, args.models, args.family, args.quick)
    return args


def models_tag(models: str, family: str, quick: bool) -> str:
    """embedded (the default family), embedded-patterns, tiny, ... with -quick for --quick runs."""
    fam = f"-{family}" if models == "embedded" and family != DEFAULT_EMBEDDED_FAMILY else ""
    return f"{models}{fam}" + ("-quick" if quick else "")


def default_tag(device: str, models: str, family: str, quick: bool) -> str:
    """cpu-embedded (scenes), cpu-embedded-patterns, cuda-tiny-quick, ..."""
    return f"{torch.device(device).type}-{models_tag(models, family, quick)}"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    result, raw = run_compare(args, argv)
    os.makedirs(args.out, exist_ok=True)
    jpath = os.path.join(args.out, f"{args.tag}.json")
    with open(jpath, "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, f"{args.tag}.md"), "w") as f:
        f.write(markdown(result))
    if not args.no_plots:
        write_plots(result, raw, args.out, args.tag, result["settings"]["image_size"])
    print(markdown_table(result))
    print(f"wrote {jpath} (+ .md, plots) in {time.perf_counter() - t0:.1f}s")
    if not result["checks"]["passed"]:
        print("consistency checks FAILED:\n  " + "\n  ".join(result["checks"]["failures"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
