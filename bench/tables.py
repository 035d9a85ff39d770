"""A benchmark's results as the reader sees them: markdown tables, the .md report, plots, plain JSON."""
from __future__ import annotations

import math
import os

import numpy as np
import torch

from . import measures as Q
from .methods import GRID_METHOD, TIME_PARTS
from .quality import FD_INTERVAL_NOTE


def ci_statistic(result: dict) -> str:
    """What the speed-up interval of a results JSON bootstraps (runs before this field bootstrapped means)."""
    return result.get("settings", {}).get("wall_ratio_ci", "paired bootstrap of the ratio of means")


def fmt_num(v, fmt: str = "{:.3g}") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return fmt.format(v)


def fmt_ci(ci, fmt: str = "{:.3g}") -> str:
    return "" if not ci else f" [{fmt_num(ci[0], fmt)}, {fmt_num(ci[1], fmt)}]"


def _mem(m: dict) -> str:
    b = m.get("bytes", 0)
    return f"{b / 2**20:.1f} MiB" + (" (RSS growth)" if m.get("kind") == "cpu_max_rss_growth" else "")


def markdown_table(result: dict, paper: dict | None = None) -> str:
    """The results table (one row per method); `paper` adds a column of published figures."""
    head = ["method", "tier", "target calls", "drafter calls", "tokens/target call", "acceptance", "resampled",
            "s/image (median, IQR)", "speed-up vs AR [95% CI]", "share of oracle", "accuracy [CI]",
            "FD [CI]", "NLL [CI]", "weights", "peak memory"]
    if paper is not None:
        head.append("paper (different scale/hardware)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in result["methods"].items():
        row = [name, tier_label(name, m), fmt_num(m["target_calls"], "{:.1f}"), fmt_num(m["drafter_calls"], "{:.1f}"),
               fmt_num(m["tokens_per_target_call"], "{:.2f}"), fmt_num(m["acceptance_rate"], "{:.2f}"),
               fmt_num(m["resampled_fraction"], "{:.2f}"),
               f"{fmt_num(m['wall_seconds_median'], '{:.3f}')} ({fmt_num(m['wall_seconds_iqr'], '{:.3f}')})",
               f"{fmt_num(m['wall_ratio_vs_ar'], '{:.2f}')}x{fmt_ci(m['wall_ratio_ci'], '{:.2f}')}",
               fmt_num(m["share_of_oracle"], "{:.0%}"),
               f"{fmt_num(m['accuracy'], '{:.3f}')}{fmt_ci(m['accuracy_ci'], '{:.3f}')}",
               f"{fmt_num(m['fd'], '{:.3g}')}{fmt_ci(m['fd_ci'], '{:.3g}')}",
               f"{fmt_num(m['nll'], '{:.3f}')}{fmt_ci(m['nll_ci'], '{:.3f}')}",
               f"{m['weights_bytes'] / 2**20:.1f} MiB" if m.get("weights_bytes") is not None else "-",
               _mem(m["peak_memory"])]
        if paper is not None:
            row.append(paper.get(name, ""))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def tier_label(name: str, m: dict) -> str:
    """A row's tier as the tables show it: "reference" for AR, "control" rows marked, "-" without measures."""
    t = m.get("tier")
    if name == "ar":
        return "reference"
    label = "-" if not t else t["tier"] + ("" if t["powered"] or t["tier"] == Q.OUTSIDE else " (underpowered)")
    return f"control: {label}" if m.get("control") else label


def _c2st(c: dict | None, d: str) -> str:
    if not c or d not in c:
        return "-"
    return f"{c[d]['accuracy']:.2f}{fmt_ci(c[d]['ci'], '{:.2f}')}"


def quality_table(result: dict) -> str:
    """bench.measures' columns, one row per method: C2ST against AR per detector, the strongest C2ST against
    real data through the VQ, patch SWD x 1e3 per level, precision / recall per feature space, diversity as
    ratios to AR, the NLL gap to AR; the header marks a measure the drafter-alone row shows blind."""
    blind = set((result.get("quality") or {}).get("blind", []))
    mark = lambda label, test: label + (" (blind)" if test in blind else "")
    head = (["method", "tier"] + [mark(f"C2ST vs AR {d}", f"C2ST vs AR ({d})") for d in Q.DETECTORS]
            + ["C2ST vs real (max)"] + [mark(f"SWD {lvl}", f"SWD {lvl}") for lvl in Q.SWD_LEVELS]
            + [mark(f"{m[0].upper()} {sp}", f"{m} ({sp})") for sp in Q.PR_SPACES for m in ("precision", "recall")]
            + [mark(f"{d} / AR", f"diversity {d}") for d in Q.DIVERSITY] + [mark("NLL gap", "NLL gap")])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in result["methods"].items():
        q = m.get("measures")
        if not q:
            continue
        real = q.get("c2st_real") or {}
        row = [name, tier_label(name, m)] + [_c2st(q.get("c2st_ar"), d) for d in Q.DETECTORS]
        row.append(f"{real['max']:.2f} ({real['max_detector']})" if real else "-")
        row += [fmt_num((q.get("swd") or {}).get(lvl), "{:.0f}") for lvl in Q.SWD_LEVELS]
        row += [fmt_num((q.get(pm) or {}).get(sp), "{:.2f}") for sp in Q.PR_SPACES for pm in ("precision", "recall")]
        row += [fmt_num((q.get("diversity_ratio") or {}).get(d), "{:.2f}") for d in Q.DIVERSITY]
        row.append(fmt_num(q.get("nll_gap"), "{:+.3f}"))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def quality_notes(result: dict) -> list[str]:
    """The tier rule, the blind measures and the null control's verdict, as lines of text."""
    q = result.get("quality") or {}
    if not q:
        return []
    out = [f"Tiers: {q['rule']}", ""]
    if "blind" in q:
        out.append(f"Blind (the unverified drafter's image, `{q['blindness_row']}`, passes their test against AR): "
                   + (", ".join(q["blind"]) if q["blind"] else "none") + ".")
    if "null_failures" in q:
        out.append("Null control (AR against AR with other seeds): " + ("every detector within 0.5 +- "
                   f"{Q.NULL_BAND}." if not q["null_failures"] else "; ".join(q["null_failures"]) + "."))
    return out + [""]


def time_split_table(result: dict) -> str:
    lines = ["| method | " + " | ".join(TIME_PARTS) + " |", "|" + "---|" * (len(TIME_PARTS) + 1)]
    for name, m in result["methods"].items():
        lines.append(f"| {name} | " + " | ".join(fmt_num(m["time_split"][p], "{:.4f}") for p in TIME_PARTS) + " |")
    return "\n".join(lines)


COST_KINDS = ("target_token", "verify_call", "resample_wave", "drafter_call", "upsample_step", "waves_per_step")


def call_cost_table(result: dict) -> str:
    """Milliseconds per call kind (bench.methods.call_costs) and resampling waves per step; '-' where a method
    makes no such call (or the run predates the measure)."""
    lines = ["| method | " + " | ".join(k.replace("_", " ") + ("" if k == "waves_per_step" else " (ms)")
                                      for k in COST_KINDS) + " |", "|" + "---|" * (len(COST_KINDS) + 1)]
    for name, m in result["methods"].items():
        c = m.get("call_costs_ms") or {}
        lines.append(f"| {name} | " + " | ".join(fmt_num(c.get(k), "{:.2f}") for k in COST_KINDS) + " |")
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
            f"per-token -log p under the target with the sampling's CFG/temperature. {FD_INTERVAL_NOTE}", "",
            markdown_table(result), "", "## Quality measures (bench.measures)", "",
            "C2ST: held-out accuracy of a detector telling the row's images from AR's (vs AR) or from real images "
            "through the VQ (vs real), 0.5 = indistinguishable, [95% interval over pairs]; SWD: patch sliced "
            "Wasserstein distance x 1e3 against real images at full, half and quarter resolution; P / R: k-NN "
            "precision and recall (k = 3) against real images through the VQ, in the classifier's and in "
            "spectral features; diversity: unique codes per image, within-class pixel distance and "
            "high-frequency energy as ratios to AR's; NLL gap: nats per token against AR's own samples (lower "
            "is not better).", "", quality_table(result), "", *quality_notes(result),
            "## Time split (seconds per image)", "",
            "ZipAR, SJD and GSD have no part timers in the engine: their time is under other.", "",
            time_split_table(result), "", "## Cost per call", "", call_cost_table(result), ""]
    chk = result.get("checks", {})
    out += [f"Consistency checks: {'passed' if chk.get('passed') else 'FAILED'}"]
    out += [f"- {f}" for f in chk.get("failures", [])]
    return "\n".join(out) + "\n"


def jsonable(x):
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
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
    c2st = {n: ((m.get("measures") or {}).get("c2st_ar") or {}).get("max") for n, m in ms.items()}
    if any(v is not None for v in c2st.values()):
        p = os.path.join(out, f"{tag}-pareto-c2st.png")
        scatter([(n, m["wall_ratio_vs_ar"], c2st[n]) for n, m in ms.items()], "speed-up vs AR (x)",
                f"C2ST vs AR, strongest detector (0.5 = indistinguishable; {Q.C2ST_MAX} = the tier's edge)",
                f"{tag}: speed-up vs C2ST against AR", p, note=note)
        paths.append(p)
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
