"""Raw runs -> the results' per-method summary, and the consistency checks every results dict must pass."""
from __future__ import annotations

import math

import numpy as np
import torch

from mulosd_core.decode import MethodConfig
from mulosd_core.metrics import frechet_distance
from mulosd_core.schedules import zipar_nfe

from . import measures as Q
from .methods import DRAFTER_ALONE, NULL, ORACLE, TIME_PARTS, call_costs, is_control
from .quality import (N_BOOT_FD, fd_with_ci, iqr, mean_ci, paired_delta, ratio_ci, ratio_of_medians,
                      share_of_oracle)

BLINDNESS_ROW = f"{DRAFTER_ALONE}_pixel"     # the unverified drafter, pixel-lifted: what every measure must see


def sample_set(rec: dict) -> Q.SampleSet:
    """A method's images, tokens and classifier features over all its runs, in sample order."""
    return Q.SampleSet(torch.cat(rec["all_images"]), torch.cat(rec["all_tokens"]).long(),
                       np.concatenate(rec["features"]), np.asarray(rec["classes"]))


def quality_measures(raw: dict[str, dict], reals: tuple[Q.SampleSet, Q.SampleSet], vocab: int, grid: int,
                     reference: str = "ar") -> dict[str, dict]:
    """bench.measures.measure of every row against `reference`'s set and the real sets (raw, VQ)."""
    ref = raw[reference]
    ctx = Q.Context(sample_set(ref), reals[0], reals[1], vocab, grid, np.asarray(ref["nll"], float))
    return {n: Q.measure(sample_set(rec), ctx, np.asarray(rec["nll"], float), against_ar=n != reference)
            for n, rec in raw.items()}


def tier_summary(methods: dict[str, dict], reference: str = "ar") -> dict:
    """Each row's tier (written into its "tier"), the measures the drafter-alone row shows blind, each
    measure's test per row, and the null row's failures; None without the measures."""
    ar = methods.get(reference)
    if not ar or not ar.get("measures"):
        return {}
    flat = {n: {**m["measures"], "accuracy": m["accuracy"], "fd": m["fd"]} for n, m in methods.items()}
    for n, m in methods.items():
        m["tier"] = None if n == reference else Q.tier(flat[n], flat[reference])
    out = {"rule": Q.TIER_RULE, "tests": {n: Q.measure_tests(flat[n], flat[reference]) for n in methods if n != reference}}
    if BLINDNESS_ROW in flat:
        out["blind"] = Q.blind_measures(flat[BLINDNESS_ROW], flat[reference])
        out["blindness_row"] = BLINDNESS_ROW
    if NULL in flat:
        out["null_failures"] = Q.null_check(flat[NULL])
    return out


def summarise(raw: dict[str, dict], methods: dict[str, tuple[MethodConfig, str | None]], real: np.ndarray,
              invocation: str, device: torch.device, reference: str = "ar", oracle: str = ORACLE,
              n_boot_fd: int = N_BOOT_FD, reals: tuple[Q.SampleSet, Q.SampleSet] | None = None,
              vocab: int = 0, grid: int = 0) -> dict[str, dict]:
    """Per-method summary (the JSON's "methods"); ratios against `reference` of the same raw runs. With
    `reals` (bench.quality.real_sets) every row also carries bench.measures' columns ("measures") and its
    tier ("tier", from tier_summary)."""
    out: dict[str, dict] = {}
    quality = quality_measures(raw, reals, vocab, grid, reference) if reals is not None and reference in raw else {}
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
        acc, acc_ci = mean_ci(correct)
        nll_m, nll_ci = mean_ci(nll)
        fd, fd_ci = fd_with_ci(feats, real, n_boot_fd)
        tokens_img = float(np.mean(rec["tokens_per_image"]))
        tc = float(np.mean(rec["target_calls"]))
        vs_ar = None
        if ref:
            da, da_ci = paired_delta(correct, ref_correct)
            dn, dn_ci = paired_delta(nll, ref_nll)
            vs_ar = {"accuracy_delta": da, "accuracy_delta_ci": da_ci, "nll_delta": dn, "nll_delta_ci": dn_ci,
                     "fd_to_ar": frechet_distance(feats, ref_feats) if len(feats) >= 2 else None}
        out[n] = {
            "kind": cfg.method, "drafter": kind, "config": cfg.to_dict(), "control": is_control(cfg),
            "measures": quality.get(n), "tier": None,
            "target_calls": tc,
            "drafter_calls": float(np.mean(rec["drafter_calls"])),
            "tokens_per_target_call": tokens_img / tc if tc else None,
            "acceptance_rate": (rec["accepted"] / rec["drafted"]) if rec["drafted"] else None,
            "resampled_fraction": rec["resampled"] / max(rec["tokens_total"], 1),
            "wall_seconds_median": float(np.median(wall)),
            "wall_seconds_iqr": spread,
            "wall_seconds_q25_q75": [q25, q75],
            "wall_ratio_vs_ar": ratio,
            "wall_ratio_ci": ratio_ci(ref["wall"], wall) if ref else None,
            "share_of_oracle": None,
            "time_split": {p: float(np.mean([s[p] for s in rec["split"]])) for p in TIME_PARTS},
            "call_costs_ms": call_costs(rec),
            "weights_bytes": int(rec["weights"]),   # GPT weights of target and drafter, shared storage once
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
    tier_summary(out, reference)
    return out


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


def check_quality(result: dict) -> list[str]:
    """Failures (empty when sound) of a results dict's quality columns: every row carries them; with trained
    models (settings.quality_meaningful) the drafter-alone row falls outside the tiers on a failed test, not
    only for want of samples, and no C2ST detector is blind to it. A detector that goes blind fails the run."""
    methods = result.get("methods", {})
    fails = [f"{n}: no quality measures" for n, m in methods.items() if not m.get("measures")]
    if fails or not result.get("settings", {}).get("quality_meaningful"):
        return fails
    for n, m in methods.items():
        q = m["measures"]
        if q["samples"] >= Q.MIN_SAMPLES and n != "ar":
            missing = [d for d in Q.DETECTORS if d not in (q.get("c2st_ar") or {})]
            fails += [f"{n}: no C2ST against AR for {missing}"] if missing else []
        fails += [f"{n}: no patch SWD at {lvl}" for lvl in Q.SWD_LEVELS if (q.get("swd") or {}).get(lvl) is None]
    row = methods.get(BLINDNESS_ROW)
    if row is None:
        return fails + [f"no {BLINDNESS_ROW} row: the blindness test did not run"]
    t = row.get("tier") or {}
    failed = [w for w in t.get("why", []) if not w.startswith("only ")]
    if t.get("tier") != Q.OUTSIDE or not failed:
        fails.append(f"{BLINDNESS_ROW} is not outside the tiers on a failed test: {t}")
    blind = [d for d in Q.DETECTORS if f"C2ST vs AR ({d})" in (result.get("quality") or {}).get("blind", [])]
    if blind:
        fails.append(f"C2ST detectors blind to the unverified drafter ({BLINDNESS_ROW}): {blind}")
    return fails
