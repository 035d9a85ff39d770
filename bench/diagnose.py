"""Where MuLo-SD's tokens stand under the target once the image is finished.

    python -m bench.diagnose [--samples 24] [--methods mulo_islands mulo_learned] [--recheck 0 16]

For every image, the final tokens are scored by one teacher-forced target pass (the target's
processed distribution at each position given all final tokens before it, as AR would have
sampled it). Per kind of token in the acceptance map (accepted draft, rejected, expanded
neighbour) it reports the mean NLL and the share the target gives probability below the
verifier's tau ("stale": accepted in the drafts' context, not in the final one) or exactly 0
(outside top-k/top-p: a token AR sampling could never produce). AR's own tokens are the
reference. Under "recheck" it reports, per image, the recheck rounds that found a failure and the
steps that spent every round (stale tokens may remain there). Same classes and seeds as the
benchmark (sample i: class i mod 12, seed i).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

import torch

from mulosd_core.decode import generate_ar
from mulosd_core.decode import ACCEPTED, NEIGHBOUR, RECHECK_SCOPES, REJECTED, generate, map_codes
from mulosd_core.models.registry import DEFAULT_EMBEDDED_FAMILY, EMBEDDED_FAMILIES
from mulosd_core.presets import method_presets
from mulosd_core.train.evaluate import token_probs

from .models import Models, load_models

KINDS = {"accepted": ACCEPTED, "rejected": REJECTED, "neighbour": NEIGHBOUR}


def diagnose(models: Models, name: str, recheck: int, samples: int, scope: str = "drafts") -> tuple[dict, dict]:
    """Per token kind: count, mean NLL (nats, p clamped at 1e-12), share below tau, share at p = 0;
    and the recheck counters per image."""
    cfg, kind = method_presets(models.target.family)[name]
    cfg = replace(cfg, verifier=replace(cfg.verifier, recheck=recheck, recheck_scope=scope))
    tau = cfg.verifier.tau
    acc: dict[str, list[torch.Tensor]] = {k: [] for k in KINDS}
    rounds = exhausted = 0
    for i in range(samples):
        lab = torch.tensor([i % models.family.num_classes])
        res = generate(models.target, lab, models.sampling, cfg, drafter=models.drafter_for(kind), seed=i, decode=False)
        p, codes = token_probs(models.target, res.tokens, lab, models.sampling)[0], map_codes(res.maps)[0]  # batch 1
        for k, code in KINDS.items():
            acc[k].append(p[codes == code])
        rounds, exhausted = rounds + res.stats.recheck_rounds, exhausted + res.stats.recheck_exhausted
    return ({k: summary(torch.cat(v), tau) for k, v in acc.items()},
            {"rounds_per_image": rounds / samples, "exhausted_steps_per_image": exhausted / samples})


def summary(p: torch.Tensor, tau: float) -> dict:
    n = p.numel()
    return {"tokens": n, "nll": float(-p.clamp_min(1e-12).log().mean()) if n else None,
            "below_tau": float((p < tau).float().mean()) if n else None,
            "zero": float((p == 0).float().mean()) if n else None}


def ar_reference(models: Models, samples: int) -> dict:
    ps = []
    for i in range(samples):
        lab = torch.tensor([i % models.family.num_classes])
        res = generate_ar(models.target, lab, models.sampling, seed=i, decode=False)
        ps.append(token_probs(models.target, res.tokens, lab, models.sampling)[0])
    return summary(torch.cat(ps), tau=0.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=24)
    ap.add_argument("--methods", nargs="+", default=["mulo_islands", "mulo_learned"])
    ap.add_argument("--recheck", nargs="+", type=int, default=[0, 16], help="recheck rounds to run each method with")
    ap.add_argument("--recheck-scope", nargs="+", default=["drafts"], choices=RECHECK_SCOPES,
                    help="what a recheck round verifies again (VerifierConfig.recheck_scope)")
    ap.add_argument("--models", default="embedded", choices=("embedded", "tiny"))
    ap.add_argument("--family", default=DEFAULT_EMBEDDED_FAMILY, choices=sorted(EMBEDDED_FAMILIES))
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    models = load_models(args.models, family=args.family)
    out = {"command": "python -m bench.diagnose " + " ".join(sys.argv[1:] if argv is None else argv),
           "ar": ar_reference(models, args.samples), "methods": {}, "recheck": {}}
    for name in args.methods:
        for n in args.recheck:
            for scope in args.recheck_scope if n else ["drafts"]:
                key = f"{name} recheck={n}" + (f" scope={scope}" if scope != "drafts" else "")
                out["methods"][key], out["recheck"][key] = diagnose(models, name, n, args.samples, scope)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
