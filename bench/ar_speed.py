"""Plain AR speed on a tiny-but-not-trivial random LlamaGen config: tokens per second and where the
wall time goes (inside the model forward vs Python/sampling overhead around it).

    python -m bench.ar_speed            # full check (exit 1 if overhead >= 15% of the AR loop)
    python -m bench.ar_speed --quick    # a reduced run (used by the test suite)

The overhead is everything in the decoding loop that is not a model call: CFG combine, temperature /
top-k / top-p, the multinomial draws, bookkeeping. It is measured by `generate_ar` itself
(stats.seconds: verify, the target calls, vs the whole loop), on CPU where every op is synchronous.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from mulosd_core.decode import generate_ar
from mulosd_core.models.llamagen import LlamaGenModel
from mulosd_core.models.llamagen_gpt import GPTConfig, LlamaGenGPT
from mulosd_core.sampling import SamplingConfig
from mulosd_core.testing import randomize_, tiny_vq

FULL = dict(dim=128, n_layer=4, n_head=4, vocab=512, grid=16, batch=2, runs=3)
QUICK = dict(dim=64, n_layer=2, n_head=2, vocab=256, grid=8, batch=1, runs=2)


def build(dim: int, n_layer: int, n_head: int, vocab: int, grid: int, device: str = "cpu",
          dtype: torch.dtype = torch.float32) -> LlamaGenModel:
    cfg = GPTConfig(dim=dim, n_layer=n_layer, n_head=n_head, vocab_size=vocab, num_classes=10,
                    model_type="c2i", multiple_of=32, name="bench")
    gpt = randomize_(LlamaGenGPT(cfg), seed=0, std=0.05).eval().to(device=device, dtype=dtype)
    vq = tiny_vq(seed=1, codebook_size=vocab).to(device)
    return LlamaGenModel(gpt, vq, grid * vq.downsample, name="bench")


# upstream sample_c2i defaults (cfg 4.0, top-k 2000 of 16384 codes, top-p 1.0), top-k scaled to the vocabulary
DEFAULT_SAMPLING = dict(cfg_scale=4.0, temperature=1.0, top_k_fraction=2000 / 16384, top_p=1.0)


def run(quick: bool = False, runs: int | None = None, device: str = "cpu", threads: int | None = 1,
        sampling: SamplingConfig | None = None) -> dict:
    p = dict(QUICK if quick else FULL)
    if runs is not None:
        p["runs"] = runs
    saved_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _measure(p, device, sampling)
    finally:
        torch.set_num_threads(saved_threads)  # a library call must not change the caller's thread count


def _measure(p: dict, device: str, sampling: SamplingConfig | None) -> dict:
    model = build(p["dim"], p["n_layer"], p["n_head"], p["vocab"], p["grid"], device)
    if sampling is None:
        d = DEFAULT_SAMPLING
        sampling = SamplingConfig(cfg_scale=d["cfg_scale"], temperature=d["temperature"],
                                  top_k=max(1, round(d["top_k_fraction"] * p["vocab"])), top_p=d["top_p"])
    labels = torch.arange(p["batch"]) % 10
    generate_ar(model, labels, sampling, seed=0, decode=False)  # warm-up (allocator, kernels, rope table)
    loop = fwd = 0.0
    tokens = 0
    for r in range(p["runs"]):
        res = generate_ar(model, labels, sampling, seed=r + 1, decode=False)
        fwd += res.stats.seconds["verify"]
        loop += res.stats.seconds["total"]
        tokens += res.tokens.numel()
    share = fwd / loop
    return {
        "config": {k: p[k] for k in ("dim", "n_layer", "n_head", "vocab", "grid", "batch")},
        "cfg_scale": sampling.cfg_scale, "top_k": sampling.top_k, "top_p": sampling.top_p,
        "runs": p["runs"], "threads": torch.get_num_threads(), "device": device,
        "tokens_per_second": tokens / loop,
        "forward_share": share,
        "overhead_share": 1.0 - share,
        "seconds_per_run": loop / p["runs"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="reduced config (2 layers, 8x8 grid)")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1: a tiny model gains nothing from more, and on a shared "
                         "machine OpenMP waits would swamp the measurement; 0 = torch's default)")
    ap.add_argument("--top-k", type=int, default=None, help="override the scaled upstream default")
    ap.add_argument("--top-p", type=float, default=None, help="override upstream's default 1.0")
    ap.add_argument("--cfg-scale", type=float, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-overhead", type=float, default=0.15, help="fail when the overhead share reaches this")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    sampling = None
    if args.top_k is not None or args.top_p is not None or args.cfg_scale is not None:
        vocab = (QUICK if args.quick else FULL)["vocab"]
        d = DEFAULT_SAMPLING
        sampling = SamplingConfig(cfg_scale=d["cfg_scale"] if args.cfg_scale is None else args.cfg_scale,
                                  top_k=max(1, round(d["top_k_fraction"] * vocab)) if args.top_k is None else args.top_k,
                                  top_p=d["top_p"] if args.top_p is None else args.top_p)
    r = run(args.quick, args.runs, args.device, args.threads or None, sampling)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        c = r["config"]
        print(f"AR speed: dim {c['dim']}, {c['n_layer']} layers, {c['n_head']} heads, vocab {c['vocab']}, "
              f"{c['grid']}x{c['grid']} grid, batch {c['batch']} (CFG {r['cfg_scale']}, {2 * c['batch']} rows), "
              f"top-k {r['top_k']}, top-p {r['top_p']}, "
              f"{r['device']}, {r['threads']} threads, {r['runs']} runs")
        print(f"  tokens/s          {r['tokens_per_second']:.1f}")
        print(f"  seconds per image {r['seconds_per_run'] / c['batch']:.3f}")
        print(f"  in model forward  {100 * r['forward_share']:.1f}% of the AR loop")
        print(f"  Python overhead   {100 * r['overhead_share']:.1f}% (limit {100 * args.max_overhead:.0f}%)")
        print(f"  bench wall time   {time.perf_counter() - t0:.1f}s")
    if r["overhead_share"] >= args.max_overhead:
        print(f"FAIL: overhead {100 * r['overhead_share']:.1f}% >= {100 * args.max_overhead:.0f}%", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
