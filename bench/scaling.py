"""Resolution scaling: MuLo-SD's speed-up over AR and its target calls per image on the scenes pyramid
(docs/DESIGN.md section 3.8), 64 px at r = 2, 128 px at r = 2 and 128 px at r = 4, each MuLo-SD preset of
the family beside AR, and every baseline at 128 px.

    python -m bench.scaling [--samples 400] [--batch 1] [--threads 1] [--pairs 64-r2 128-r2 128-r4] [--work DIR]

Each pair is one `bench.compare` run (its own AR, methods rotated per batch, ratios inside that run) written
as <out>/scaling-<pair>.json; a pair whose file exists from the same settings is read back instead of run
again, and a pair's run keeps its records in <work>/scaling-<pair>.records.pt (`bench.compare --resume`;
by default under the pack's cache folder, devenv.cache_dir), so an interrupted run resumes pair by pair and
inside a pair (the 128 px pair with every baseline: about 100 min on one core, AR 2.1 s an image). The summary
(scaling-embedded-scenes.json, .md, .png) puts the pairs side by side. The MuLo-SD rows are the family's named
presets (presets.MULO_DEFAULTS), chosen by the sweep at 64 px; where a sweep on the pair itself exists (SWEEPS,
bench.sweep --family scenes128 --drafter ...), its fastest finalist per tier is added beside them, with the
ratio of that sweep's own final stage.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from mulosd_core import presets as P
from mulosd_core.devenv import cache_dir

from . import compare
from . import measures as Q
from .plots import stacked_bars

# The lossless mode is left out: at 64 px it runs at 0.13x AR (bench/results/cpu-embedded-lossless.md), about
# 50 s an image at 128 px on one core, and it is never the fastest setting of a tier.
MULO = tuple(P.method_name(t) for t in (P.INDISTINGUISHABLE, P.FASTEST))
# pair -> (family, drafter as <family>:<member>, methods)
PAIRS = {
    "64-r2": ("scenes", "", ("ar", *MULO)),
    "128-r2": ("scenes128", "scenes:target", ("ar", *MULO, *P.BASELINES)),
    "128-r4": ("scenes128", "scenes:drafter", ("ar", *MULO)),
}


# pair -> the sweep (bench.sweep) whose final stage names that pair's fastest setting per tier; read when present
SWEEPS = {
    "64-r2": "sweep-embedded-scenes.json",
    "128-r2": "sweep-embedded-scenes128-r2.json",   # python -m bench.sweep --family scenes128 --drafter scenes:target ...
    "128-r4": "sweep-embedded-scenes128-r4.json",   # ... --drafter scenes:drafter (the commands: docs/RESULTS.md)
}


def compare_argv(pair: str, samples: int, batch: int, threads: int, out: str) -> list[str]:
    family, drafter, methods = PAIRS[pair]
    argv = ["--family", family, "--samples", str(samples), "--batch", str(batch), "--threads", str(threads),
            "--methods", *methods, "--no-controls", "--no-plots", "--no-progress", "--tag", f"scaling-{pair}",
            "--out", out]
    return argv + (["--drafter", drafter] if drafter else [])


def _done(path: str, argv: list[str]) -> dict | None:
    """The pair's results when they exist from the same command."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        res = json.load(f)
    return res if res.get("command") == "python -m bench.compare " + " ".join(argv) else None


def _ratio(info: dict) -> int:
    """r of a run's pair, from bench.models.model_info."""
    return info["target"]["grid"] // info["drafter"]["grid"]


def summary_rows(pair: str, res: dict) -> list[dict]:
    info = res["settings"]["model_info"]
    out = []
    for name, row in res["methods"].items():
        if name == "ar":
            continue
        tier = (row.get("tier") or {}).get("tier") if res["samples"] >= Q.TIER_MIN_SAMPLES else None
        out.append({"pair": pair, "method": name, "image_size": res["settings"]["image_size"],
                    "r": _ratio(info) if name.startswith("mulo") else None,
                    "speedup": row["wall_ratio_vs_ar"], "speedup_ci": row.get("wall_ratio_ci"),
                    "target_calls": row["target_calls"], "ar_target_calls": res["methods"]["ar"]["target_calls"],
                    "acceptance": row.get("acceptance_rate"), "tier": tier,
                    "c2st_ar": ((row.get("measures") or {}).get("c2st_ar") or {}).get("max")})
    return out


def sweep_rows(pair: str, res: dict) -> list[dict]:
    """The fastest setting of each tier in a sweep's final stage on the pair (its ratios are to the final stage's
    own AR runs, at that stage's images), one row per tier; a tier no finalist reached gets no row."""
    final = res["sweep"]["stages"]["final"]
    rows = {r["label"]: r for r in final["rows"]}
    r_ = _ratio(res["settings"]["model_info"])
    out = []
    for tier, key in ((Q.INDISTINGUISHABLE, "indistinguishable"), (Q.AS_GOOD, "chosen")):
        row = rows.get(final.get(key))
        if row is None:
            continue
        out.append({"pair": pair, "method": f"sweep, fastest {tier}: {row['label']}", "image_size": None, "r": r_,
                    "speedup": row["wall_ratio_vs_ar"], "speedup_ci": row.get("wall_ratio_ci"),
                    "target_calls": row["target_calls"], "ar_target_calls": final["ar"]["target_calls"],
                    "acceptance": row.get("acceptance_rate"), "tier": (row.get("tier") or {}).get("tier"),
                    "c2st_ar": ((row.get("measures") or {}).get("c2st_ar") or {}).get("max"),
                    "source": res.get("tag"), "samples": final.get("samples")})
    return out


def pair_sweep(pair: str, out: str) -> dict | None:
    path = os.path.join(out, SWEEPS[pair])
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def markdown(rows: list[dict], samples: int, batch: int) -> str:
    lines = ["# Resolution scaling on the scenes pyramid", "",
             "`python -m bench.scaling` on one CPU thread; every ratio is to AR in the same pair's run "
             f"({samples} images per method, batch {batch}). Tiers need {Q.TIER_MIN_SAMPLES} images; below that "
             "none is given. The mulo_* rows are the scenes family's presets, chosen by the sweep at 64 px; a "
             "\"sweep, fastest <tier>\" row is the fastest finalist of that tier in a sweep on the pair itself "
             "(bench.sweep's final stage, its own AR runs and images, so its ratio was timed apart from the pair's "
             "run). A tier with no such row had no finalist in it.",
             "", "![scaling](scaling-embedded-scenes.png)", "",
             "| pair | method | r | speed-up | target calls / image (AR) | acceptance | C2ST vs AR | tier |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.3f}"
        c2 = "-" if r["c2st_ar"] is None else f"{r['c2st_ar']:.3f}"
        lines.append(f"| {r['pair']} | {r['method']} | {r['r'] or '-'} | {r['speedup']:.2f}x | {r['target_calls']:.0f} "
                     f"({r['ar_target_calls']:.0f}) | {acc} | {c2} | {r['tier'] or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=compare.SAMPLES)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pairs", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--work", default=str(cache_dir() / "scaling"),
                    help="where each pair's run keeps its records until it ends (resumable)")
    args = ap.parse_args(argv)
    rows, sweeps = [], {}
    for pair in args.pairs:
        cargv = compare_argv(pair, args.samples, args.batch, args.threads, args.out)
        path = os.path.join(args.out, f"scaling-{pair}.json")
        res = _done(path, cargv)
        if res is None:
            print(f"[scaling] {pair}: python -m bench.compare {' '.join(cargv)}", flush=True)
            records = os.path.join(os.path.expanduser(args.work), f"scaling-{pair}.records.pt")
            if compare.main(cargv + ["--resume", records]) != 0:
                print(f"[scaling] {pair}: the run's consistency checks failed (see above)", file=sys.stderr)
            res = _done(path, cargv)
        rows += summary_rows(pair, res)
        swept = pair_sweep(pair, args.out)
        if swept:
            rows += sweep_rows(pair, swept)
            sweeps[pair] = SWEEPS[pair]
        else:
            print(f"[scaling] {pair}: no sweep on this pair ({SWEEPS[pair]}): only the presets' rows", flush=True)
    base = os.path.join(args.out, "scaling-embedded-scenes")
    with open(base + ".json", "w", encoding="utf-8") as f:
        json.dump({"command": "python -m bench.scaling " + " ".join(sys.argv[1:] if argv is None else argv),
                   "pairs": {p: PAIRS[p][:2] for p in args.pairs},
                   "sweeps": sweeps, "rows": rows}, f, indent=1)
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(markdown(rows, args.samples, args.batch))
    stacked_bars([(f"{r['pair']} {r['method']}", {"speed-up over AR": r["speedup"]}) for r in rows],
                 ["speed-up over AR"], "Speed-up over AR per pair (same-run ratios)", base + ".png", unit="x")
    print(markdown(rows, args.samples, args.batch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
