"""What each kind of model call costs on this machine: the cost structure MuLo-SD trades on.

    python -m bench.costs [--family scenes] [--reps 50] [--threads 1] [--out bench/results]

Batch 1, no CFG, on a cache filled to the middle of the image (what a call meets halfway
through decoding). Times are medians over `--reps` calls, each after one untimed call:
- target_token: one target call for one token (what plain AR pays per token);
- target_call_<n>: one target call over n = 4, 8, 12, 16 new tokens (CALL_SIZES: a ZipAR wavefront, with
  drafts on top);
- target_verify_<n>: one target call over n new tokens (a verify block: 2 and 8 target rows);
- drafter_token: one drafter call for one token at the drafter's grid;
- upsample_pixel: the training-free pixel route for one low-res row under the rows above it
  (VQ decode at the drafter's resolution, resize by r, VQ encode at the target's);
- vq_decode: decoding a whole target image.
Ratios are against target_token. Writes `<out>/costs-<models>.json` (bench.models.models_tag
names it) and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from mulosd_core.upsample import UpsamplerConfig, upsample_rows

from mulosd_core.models.registry import DEFAULT_EMBEDDED_FAMILY, EMBEDDED_FAMILIES

from .models import Models, gpt_params, hardware, load_models, models_tag


# small target calls: a ZipAR wavefront of 4 active rows (window 4 on 16 columns) feeding 1 to 4 tokens a row,
# what speculative drafts on top of ZipAR would add to its calls
CALL_SIZES = (4, 8, 12, 16)


def _median_seconds(fn, reps: int) -> float:
    fn()   # untimed: allocator, kernels, rope tables
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _half_filled(model, cond: torch.Tensor, tokens: torch.Tensor):
    """A batch-1 cache holding the condition and the first half of `tokens`; returns (cache, fill)."""
    cache = model.new_cache(1)
    model.prefill(model.condition_rows(cond, False), cache)
    fill = model.num_tokens // 2
    if fill:
        model.forward_tokens(tokens[:, :fill], torch.arange(fill, device=model.device), cache)
    return cache, fill


@torch.inference_mode()
def measure(models: Models, reps: int) -> dict:
    target, drafter = models.target, models.drafter
    cond = torch.tensor([0])
    gen = torch.Generator().manual_seed(0)
    t_tokens = torch.randint(0, target.vocab_size, (1, target.num_tokens), generator=gen).to(target.device)
    d_tokens = torch.randint(0, drafter.vocab_size, (1, drafter.num_tokens), generator=gen).to(drafter.device)
    t_cache, t_fill = _half_filled(target, cond, t_tokens)
    d_cache, d_fill = _half_filled(drafter, cond, d_tokens)
    g, r = target.grid, target.grid // drafter.grid

    def target_call(n: int):
        pos = torch.arange(t_fill, t_fill + n, device=target.device)
        return lambda: target.forward_tokens(t_tokens[:, t_fill:t_fill + n], pos, t_cache)

    seconds = {"target_token": _median_seconds(target_call(1), reps)}
    for n in sorted({min(n, target.num_tokens - t_fill) for n in CALL_SIZES}):   # a tiny grid holds fewer
        seconds[f"target_call_{n}"] = _median_seconds(target_call(n), reps)
    for rows in (2, 8):
        n = min(rows * g, target.num_tokens - t_fill)
        seconds[f"target_verify_{n}"] = _median_seconds(target_call(n), reps)
    d_pos = torch.tensor([d_fill], device=drafter.device)
    seconds["drafter_token"] = _median_seconds(
        lambda: drafter.forward_tokens(d_tokens[:, d_fill:d_fill + 1], d_pos, d_cache), reps)
    low_rows = d_fill // drafter.grid
    context, row = d_tokens[:, :low_rows * drafter.grid], d_tokens[:, low_rows * drafter.grid:(low_rows + 1) * drafter.grid]
    seconds["upsample_pixel"] = _median_seconds(
        lambda: upsample_rows(UpsamplerConfig(kind="pixel"), drafter, target, row, 1, context), reps)
    seconds["vq_decode"] = _median_seconds(lambda: target.decode(t_tokens), reps)
    base = seconds["target_token"]
    return {"seconds": seconds, "ratio_to_target_token": {k: v / base for k, v in seconds.items()},
            "target": {"name": target.name, "grid": g, "params": gpt_params(target)},
            "drafter": {"name": drafter.name, "grid": drafter.grid, "params": gpt_params(drafter), "r": r}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="embedded", choices=("embedded", "tiny"))
    ap.add_argument("--family", default=DEFAULT_EMBEDDED_FAMILY, choices=sorted(EMBEDDED_FAMILIES))
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: the benchmarks' setting)")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    torch.set_num_threads(args.threads)
    models = load_models(args.models, family=args.family)
    res = measure(models, args.reps)
    res.update(command="python -m bench.costs " + " ".join(sys.argv[1:] if argv is None else argv),
               family=args.family, threads=args.threads, reps=args.reps, hardware=hardware(torch.device("cpu")))
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"costs-{models_tag(args.models, args.family, False)}.json")
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    print(f"{'call':<22} {'ms':>8} {'x target token':>15}")
    for k, v in res["seconds"].items():
        print(f"{k:<22} {v * 1e3:8.3f} {res['ratio_to_target_token'][k]:15.2f}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
