"""Evaluate an embedded family and write its metrics.json (and the model cards' metrics).

    python -m mulosd_core.train.evaluate [--samples 600] [--models models/embedded]

The family's card (family.json beside the weights) names its data family and its sampling.
Reports VQ reconstruction PSNR, classifier accuracy on fresh real samples (and on the same
images resized to half size and back), and for AR samples of the target (64 px) and of the
low-res drafter (decoded at its own 32 px): accuracy against the requested class, Frechet
distance in classifier features to real samples, and the mean per-token NLL under the model
that sampled them. The `statistics` section says how much the target's next-token
distributions look like a real AR image model's (train/token_stats.py).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

import numpy as np
import torch

from ..decode import generate_ar, model_sampling
from ..data.families import data_family
from ..metrics import accuracy, bootstrap_ci, frechet_distance
from ..models.llamagen import self_drafter
from ..models.registry import family_card, load_model
from ..sampling import SamplingConfig
from .classifier import load_classifier
from .common import base_folder
from .family import vq_psnr
from .token_stats import (distribution_figures, half_size, prefix_acceptance, raw_next_token_probs, sampling_probs,
                          swap_tokens)

log = logging.getLogger("mulosd.evaluate")
REAL_SEED = 424242


@torch.no_grad()
def token_probs(model, tokens: torch.Tensor, labels: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """p [B, N]: the model's sampling distribution (CFG etc. applied) at each token of the grids, given
    the tokens before it (one teacher-forced pass)."""
    return sampling_probs(model, tokens, labels, sampling).gather(-1, tokens.to(model.device)[..., None].long())[..., 0]


def token_nll(model, tokens: torch.Tensor, labels: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Mean per-token NLL [B] of token grids under the model's sampling distribution."""
    return -(token_probs(model, tokens, labels, sampling).clamp_min(1e-12).log()).mean(1)


@torch.no_grad()
def sample_quality(model, classifier, labels: torch.Tensor, sampling: SamplingConfig, real_feats: np.ndarray,
                   batch: int = 50) -> tuple[dict, torch.Tensor]:
    """Quality figures of the model's AR samples for `labels` (sample i uses seed i of its batch), and their tokens."""
    preds, feats, nll, tokens = [], [], [], []
    for i in range(0, len(labels), batch):
        lab = labels[i:i + batch]
        res = generate_ar(model, lab, sampling, seed=i)
        logits = classifier(res.images)
        preds.append(logits.argmax(1))
        feats.append(classifier.features(res.images))
        nll.append(token_nll(model, res.tokens, lab, sampling))
        tokens.append(res.tokens.cpu())
    correct = (torch.cat(preds) == labels).float().numpy()
    f = torch.cat(feats).numpy()
    n = torch.cat(nll).numpy()
    return ({"accuracy": float(correct.mean()), "accuracy_ci": list(bootstrap_ci(correct)),
             "fd": frechet_distance(f, real_feats), "nll": float(n.mean()), "nll_ci": list(bootstrap_ci(n))},
            torch.cat(tokens))


@torch.no_grad()
def token_statistics(target, drafter, classifier, tokens: torch.Tensor, labels: torch.Tensor, sampling: SamplingConfig,
                     batch: int = 50, seed: int = 0) -> dict:
    """The `statistics` section: the target's raw next-token distributions on its own samples, the
    accuracy change when half of each sample's tokens are swapped for top-16 draws, and the
    acceptance of perfect low-resolution drafts given the true prefix (reported, not tuned to)."""
    gen = torch.Generator().manual_seed(seed)
    top1, ppl, correct, swapped_correct, accept = [], [], [], [], []
    for i in range(0, len(labels), batch):
        tok, lab = tokens[i:i + batch], labels[i:i + batch]
        probs = raw_next_token_probs(target, tok, lab)
        fig = distribution_figures(probs)
        top1.append(fig["top1"].flatten().cpu())
        ppl.append(fig["perplexity"].flatten().cpu())
        swapped = swap_tokens(probs, tok, 0.5, 16, gen)
        correct.append(classifier(target.decode(tok)).argmax(1).cpu() == lab)
        swapped_correct.append(classifier(target.decode(swapped)).argmax(1).cpu() == lab)
        accept.append((len(lab), prefix_acceptance(target, drafter, tok, lab, sampling)))
    top1, ppl = torch.cat(top1), torch.cat(ppl)
    acc, acc_swapped = float(torch.cat(correct).float().mean()), float(torch.cat(swapped_correct).float().mean())
    n = sum(w for w, _ in accept)
    return {
        "samples": len(labels),
        "top1_mean": float(top1.mean()),
        "top1_below_0_2": float((top1 < 0.2).float().mean()),
        "top1_above_0_9": float((top1 > 0.9).float().mean()),
        "perplexity_mean": float(ppl.mean()),
        "redundancy_accuracy": acc,
        "redundancy_swapped_accuracy": acc_swapped,
        "redundancy_accuracy_drop": acc - acc_swapped,
        "prefix_acceptance": {k: sum(w * a[k] for w, a in accept) / n for k in accept[0][1]},
        "how": "teacher-forced on the target's AR samples: raw softmax of the conditional logits (temperature 1, no "
               "CFG, no top-k); redundancy swaps a random 50% of tokens for draws from the top-16 there; prefix "
               "acceptance judges the samples downsampled by r and lifted by the pixel route at the family's sampling",
    }


def low_drafter_path(models: str, card: dict) -> str:
    """The family's drafter at half the target's grid: its own, or (a member built on a base family, such as
    the 128 px scenes member) the base family's target, which drafts for it at r = 2."""
    own = os.path.join(models, "drafter.safetensors")
    if os.path.exists(own) or not card.get("base"):
        return own
    return str(base_folder(card["base"]) / "target.safetensors")


def evaluate(models: str, samples: int, device: str = "cpu", command: str = "") -> dict:
    """Metrics of the family in folder `models`. Its card (registry.family_card) names the data family and the
    sampling, which the target loads with (ar.model_sampling), as in the loaders and the benchmark."""
    card, where = family_card(models)
    missing = [k for k in ("data_family", "sampling") if k not in card]
    if missing:
        raise ValueError(f"--models: expected a family card {where} naming {' and '.join(missing)} "
                         "(python -m mulosd_core.train.family writes it)")
    fam = data_family(card["data_family"])
    t0 = time.perf_counter()
    target = load_model(os.path.join(models, "target.safetensors"), os.path.join(models, "vq.safetensors"), device=device)
    drafter = load_model(low_drafter_path(models, card), "", device=device, vq=target.vq)
    sd = load_model(os.path.join(models, "sd_drafter.safetensors"), "", device=device, vq=target.vq)
    classifier = load_classifier(os.path.join(models, "classifier.safetensors"), device=device).eval()
    load_seconds = time.perf_counter() - t0
    sampling = model_sampling(target)
    labels = torch.arange(samples) % fam.num_classes
    with torch.no_grad():
        real = fam.batch(labels, REAL_SEED, target.image_size, fam.gpt_variation).to(device)
        real_logits = torch.cat([classifier(real[i:i + 100]) for i in range(0, samples, 100)])
        half_logits = torch.cat([classifier(half_size(real[i:i + 100])) for i in range(0, samples, 100)])
        real_feats = torch.cat([classifier.features(real[i:i + 100]) for i in range(0, samples, 100)]).numpy()
    out = {
        "samples": samples,
        "data_family": fam.name,
        "sampling": sampling.to_dict(),
        "real_accuracy": accuracy(real_logits, labels),
        "half_size_accuracy": accuracy(half_logits, labels),
        "vq_psnr_db": vq_psnr(target.vq, min(samples, 240), target.image_size, device, family=fam.name),
        "load_seconds": load_seconds,
    }
    log.info("real accuracy %.4f, VQ PSNR %.2f dB, load %.2fs", out["real_accuracy"], out["vq_psnr_db"], load_seconds)
    for name, model in (("target", target), ("drafter", drafter), ("sd_drafter", sd)):
        q, tokens = sample_quality(model, classifier, labels, sampling, real_feats)
        if name == "target":
            out["statistics"] = token_statistics(target, drafter, classifier, tokens, labels, sampling)
            out["statistics"]["half_size_accuracy"] = out["half_size_accuracy"]
            log.info("statistics: %s", {k: v for k, v in out["statistics"].items() if k != "how"})
        log.info("%s AR samples: accuracy %.4f, FD %.3f, NLL %.3f", name, q["accuracy"], q["fd"], q["nll"])
        out[f"{name}_ar_accuracy"] = q["accuracy"]
        out[f"{name}_ar"] = q
    out.update(self_target_quality(models, target, drafter, classifier, labels, sampling, real_feats))
    out["command"] = command
    out["total_seconds"] = time.perf_counter() - t0
    return out


def self_target_quality(models: str, target, drafter, classifier, labels, sampling, real_feats) -> dict:
    """AR quality of the family's self_target (trained at its grid and at the drafter's), at both grids;
    {} when the family has none. Its low-grid samples are what it drafts for itself."""
    path = os.path.join(models, "self_target.safetensors")
    if not os.path.exists(path):
        return {}
    model = load_model(path, "", device=target.device, vq=target.vq)
    out = {}
    low = self_drafter(model, model.grid // drafter.grid)   # at the early exit it was trained for, if any
    for name, m in (("self_target", model), ("self_target_low", low)):
        q, _ = sample_quality(m, classifier, labels, sampling, real_feats)
        log.info("%s AR samples (grid %d): accuracy %.4f, FD %.3f", name, m.grid, q["accuracy"], q["fd"])
        out[f"{name}_ar_accuracy"] = q["accuracy"]
        out[f"{name}_ar"] = {**q, "grid": m.grid, "layers": m.exit_layers or m.gpt.config.n_layer}
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="models/embedded")
    ap.add_argument("--samples", type=int, default=600)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    argv = sys.argv[1:] if argv is None else argv
    metrics = evaluate(args.models, args.samples, args.device, " ".join(["python -m mulosd_core.train.evaluate", *argv]))
    with open(os.path.join(args.models, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2, sort_keys=True)
    for name in ("target", "drafter", "sd_drafter", "self_target", "vq"):
        card_path = os.path.join(args.models, f"{name}.json")
        if os.path.exists(card_path):
            card = json.load(open(card_path))
            card.setdefault("metrics", {})
            if name == "vq":
                card["metrics"]["psnr_db"] = metrics["vq_psnr_db"]
            else:
                card["metrics"].update({k: v for k, v in metrics[f"{name}_ar"].items()})
                if name == "self_target":
                    card["metrics"]["low_grid"] = metrics["self_target_low_ar"]
            card["metrics"]["evaluated_by"] = metrics["command"]
            json.dump(card, open(card_path, "w"), indent=2, sort_keys=True)
    print(json.dumps({k: v for k, v in metrics.items() if not isinstance(v, dict)}, indent=2))


if __name__ == "__main__":
    main()
