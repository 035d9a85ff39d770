"""The exact test's acceptance ceiling for a learned upsampler, teacher-forced on the target's own samples.

    python -m bench.ceiling [--family scenes] [--drafter <family>:<member>] [--samples 200]
                            [--upsampler PATH ...] [--threads 1] [--out bench/results/ceiling.json]

A draft drawn from the upsampler's q passes the exact test min(1, p/q) with probability 1 - TV(p, q)
(docs/DESIGN.md section 3.7), so this number caps the lossless mode's acceptance per position. For AR
samples of the target (class i % classes, AR seed i of its batch: not the seeds `pairs="target"` trains on),
p is the target's sampling distribution at each position given the true prefix and q the upsampler's softmax
given the image's low-resolution encoding (train.token_stats.exact_ceiling). Also reported: the mean p of
the upsampler's argmax (the deterministic draft's chance of being what the target draws). Default
upsamplers: every shipped one for this pair's ratio and codebook whose file exists (upsampler,
upsampler_own, upsampler_r4 ...).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

from mulosd_core.decode import generate_ar
from mulosd_core.metrics import bootstrap_ci
from mulosd_core.models.latent_upsampler import load_latent_upsampler
from mulosd_core.models.registry import DEFAULT_EMBEDDED_FAMILY, EMBEDDED_FAMILIES
from mulosd_core.train.token_stats import exact_ceiling
from mulosd_core.upsample import embedded_upsampler, upsampler_header

from .models import load_models


def candidates(target, r: int) -> list[str]:
    """The shipped upsampler for the pair and every sibling file in its folder that upsamples by `r`."""
    shipped = embedded_upsampler(target, r)
    folder = os.path.dirname(shipped)
    out = [shipped]
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.startswith("upsampler") and name.endswith(".safetensors") and path != shipped:
            if upsampler_header(path)[1] == r:
                out.append(path)
    return out


def measure(models, paths: list[str], samples: int, batch: int = 50) -> dict[str, dict]:
    target, drafter, sampling = models.target, models.drafter, models.sampling
    nets = {p: load_latent_upsampler(p, target.device) for p in paths}
    per = {p: {"one_minus_tv": [], "p_of_argmax": []} for p in paths}
    classes = models.family.num_classes
    for i in range(0, samples, batch):
        labels = torch.arange(i, min(i + batch, samples)) % classes
        tokens = generate_ar(target, labels, sampling, seed=i).tokens
        for p, net in nets.items():
            for k, v in exact_ceiling(target, drafter, net, tokens, labels, sampling).items():
                per[p][k].append(v)
    out = {}
    for p, figs in per.items():
        out[p] = {}
        for k, v in figs.items():
            v = torch.cat(v).numpy()
            out[p][k] = {"mean": float(v.mean()), "ci": list(bootstrap_ci(v))}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default=DEFAULT_EMBEDDED_FAMILY, choices=sorted(EMBEDDED_FAMILIES))
    ap.add_argument("--drafter", default="", help="the low-resolution drafter as <family>:<member> (default the family's)")
    ap.add_argument("--samples", type=int, default=200, help="AR samples of the target measured on")
    ap.add_argument("--upsampler", nargs="+", default=None, help="learned upsampler files (default: the shipped ones)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", default="", help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    if args.samples < 1:
        ap.error(f"--samples must be at least 1, got {args.samples}")
    if args.threads:
        torch.set_num_threads(args.threads)
    models = load_models("embedded", family=args.family, drafter=args.drafter)
    r = models.target.grid // models.drafter.grid
    paths = args.upsampler or candidates(models.target, r)
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        ap.error(f"--upsampler: no file at {', '.join(missing)}")
    res = measure(models, paths, args.samples)
    print(f"{args.family}, r = {r}, {args.samples} AR samples of the target, teacher-forced")
    print(f"{'upsampler':<48} {'1 - TV(p, q) [95% CI]':<26} p(argmax q)")
    for p, f in res.items():
        tv, am = f["one_minus_tv"], f["p_of_argmax"]
        print(f"{p:<48} {tv['mean']:.3f} [{tv['ci'][0]:.3f}, {tv['ci'][1]:.3f}]     {am['mean']:.3f}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"command": "python -m bench.ceiling " + " ".join(sys.argv[1:] if argv is None else argv),
                       "family": args.family, "r": r, "samples": args.samples, "upsamplers": res}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
