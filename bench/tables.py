"""A benchmark's results as the reader sees them: markdown tables, the .md report, plots, plain JSON."""
from __future__ import annotations

import math
import os

import numpy as np
import torch

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
    head = ["method", "target calls", "drafter calls", "tokens/target call", "acceptance", "resampled",
            "s/image (median, IQR)", "speed-up vs AR [95% CI]", "share of oracle", "accuracy [CI]",
            "FD [CI]", "NLL [CI]", "weights", "peak memory"]
    if paper is not None:
        head.append("paper (different scale/hardware)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, m in result["methods"].items():
        row = [name, fmt_num(m["target_calls"], "{:.1f}"), fmt_num(m["drafter_calls"], "{:.1f}"),
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
            markdown_table(result), "", "## Time split (seconds per image)", "",
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
