"""Raw runs -> the results' per-method summary, and the consistency checks every results dict must pass."""
from __future__ import annotations

import math

import numpy as np
import torch

from mulosd_core.engine import MethodConfig
from mulosd_core.metrics import frechet_distance
from mulosd_core.schedules import zipar_nfe

from .methods import ORACLE, TIME_PARTS, call_costs
from .quality import (N_BOOT_FD, fd_with_ci, iqr, mean_ci, paired_delta, ratio_ci, ratio_of_medians,
                      share_of_oracle)


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
