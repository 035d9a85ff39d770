"""Speculative drafts on top of ZipAR's wavefront, by simulation: how many target calls they would save.

    python -m bench.wavefront [--grid 16] [--window 4] [--acceptance 0.34] [--drafts 0 1 2 3 4] [--runs 400]
                              [--costs bench/results/costs-embedded.json] [--out bench/results]

No model runs. ZipAR (docs/DESIGN.md section 5.4) samples one token per active row per call; row r+1 may
sample column c once row r holds c + window tokens (and, as upstream, row 1 waits for all of row 0). Give
every active row `d` drafts a call, each passing the exact test with probability `acceptance` (the measured
rate of the exact test on the scenes pair: mulo_near_lossless in bench/results/cpu-embedded-lossless.md),
so the row gains 1 + (accepted prefix) tokens, never past what the row above allows. The ZipAR rule keeps the
images ZipAR's (each position sees what ZipAR lets it see), which is why this was worth estimating before
building: the question is only how many calls the drafts save and what the longer calls cost.

The answer is bounded by the chain of rows: a row can never move faster than the one above lets it, so below
the first rows every row advances about one token a call, drafts or not. With `--costs` the calls are priced
by the measured cost of a call of n tokens (bench.costs' target_call_<n>), to compare with plain ZipAR.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys


def calls(grid: int, window: int, drafts: int, acceptance: float, rng: random.Random) -> tuple[int, list[int]]:
    """One simulated image: (target calls, tokens fed per call). Row 1 waits for the whole of row 0, as
    schedules.zipar_schedule does."""
    count = [0] * grid
    fed: list[int] = []
    while count[-1] < grid:
        before, n = count[:], 0
        for r in range(grid):
            if r > 0 and before[r - 1] < (grid if r == 1 else min(window, grid)):
                break                                   # this row and those below have not started
            limit = grid if r == 0 or before[r - 1] == grid else min(grid, before[r - 1] - window + 1)
            room = limit - before[r]
            if room <= 0:
                continue
            d = min(drafts, room - 1)
            n += 1 + d
            gained = 1
            while gained <= d and rng.random() < acceptance:
                gained += 1
            count[r] = before[r] + gained
        fed.append(n)
    return len(fed), fed


def simulate(grid: int, window: int, drafts: int, acceptance: float, runs: int, seed: int = 0) -> tuple[dict, list[int]]:
    """(summary row, tokens fed by every simulated call of every run)."""
    rng = random.Random(seed)
    res = [calls(grid, window, drafts, acceptance, rng) for _ in range(runs)]
    fed = [n for _, f in res for n in f]
    return {"drafts": drafts, "runs": runs, "calls": statistics.mean(c for c, _ in res),
            "tokens_per_call": statistics.mean(fed)}, fed


def pricer(costs: dict):
    """n tokens -> the measured cost of a target call of n tokens in single-token calls (the nearest measured
    size at or above n, the largest measured one beyond them)."""
    ratios = costs["ratio_to_target_token"]
    sizes = sorted([(1, ratios["target_token"])] + [(int(k.rsplit("_", 1)[1]), v) for k, v in ratios.items()
                                                    if k.startswith(("target_call_", "target_verify_"))])
    return lambda n: next((v for m, v in sizes if m >= n), sizes[-1][1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", type=int, default=16)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--acceptance", type=float, default=0.34)
    ap.add_argument("--drafts", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--costs", default="", help="bench.costs results: price each call by its tokens")
    ap.add_argument("--out", default="")
    args = ap.parse_args(argv)
    if not (0.0 <= args.acceptance <= 1.0):
        ap.error(f"--acceptance must be in [0, 1], got {args.acceptance}")
    if args.grid < 2 or not (1 <= args.window < args.grid):
        ap.error(f"--grid must be >= 2 and --window in [1, grid), got grid {args.grid}, window {args.window}")
    if min(args.drafts) < 0 or args.runs < 1:
        ap.error("--drafts must be >= 0 and --runs >= 1")
    price = None
    if args.costs:
        with open(args.costs, encoding="utf-8") as f:
            price = pricer(json.load(f))
    rows = []
    for d in args.drafts:
        row, fed = simulate(args.grid, args.window, d, args.acceptance, args.runs)
        if price:
            row["cost_in_token_calls"] = sum(price(n) for n in fed) / args.runs
        rows.append(row)
    base = rows[0] if args.drafts[0] == 0 else None
    print(f"ZipAR window {args.window} on {args.grid} x {args.grid}, exact-test acceptance {args.acceptance}")
    print(f"{'drafts/row':>10} {'calls':>8} {'tokens/call':>12}" + (f" {'cost (token calls)':>19}" if args.costs else ""))
    for r in rows:
        print(f"{r['drafts']:>10} {r['calls']:8.1f} {r['tokens_per_call']:12.2f}"
              + (f" {r['cost_in_token_calls']:19.1f}" if args.costs else ""))
    if base:
        key = "cost_in_token_calls" if price else "calls"
        best = min(rows, key=lambda r: r[key])
        print(f"best: {best['drafts']} drafts a row, {base[key] / best[key]:.2f}x ZipAR's {key.replace('_', ' ')}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, f"wavefront-w{args.window}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"command": "python -m bench.wavefront " + " ".join(sys.argv[1:] if argv is None else argv),
                       "grid": args.grid, "window": args.window, "acceptance": args.acceptance, "rows": rows}, f, indent=1)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
