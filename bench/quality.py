"""What the benchmark measures besides time: the target's NLL of a grid, classifier features of real
images, the Frechet distance with its interval (mulosd_core.metrics), speed-up ratios and their
paired bootstrap intervals.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from mulosd_core.metrics import bootstrap_ci, bootstrap_ci_pair, frechet_distance
from mulosd_core.sampling import SamplingConfig
from mulosd_core.train.evaluate import token_nll

from .measures import SampleSet, to_uint8
from .models import Models

REAL_SEED = 20_240_601             # real reference samples for the Frechet distance
N_BOOT = 1000
N_BOOT_FD = 200
N_BOOT_FD_QUICK = 50
WALL_RATIO_CI = "paired bootstrap of the ratio of medians"


@torch.inference_mode()
def target_nll(target, tokens: torch.Tensor, cond: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """Mean per-token -log p(token) [B] of a finished grid under the target, teacher-forced in one forward.

    p is the distribution the sampler draws from (`token_stats.sampling_probs`: CFG, temperature, top-k,
    top-p), floored at 1e-12 so tokens outside a top-k/top-p support give a finite (large) NLL.
    """
    return token_nll(target, tokens.long(), torch.as_tensor(cond), sampling).float().cpu()


def _real_images(models: Models, samples: int, seed: int) -> tuple[torch.Tensor, list[int]]:
    fam = models.family
    classes = [i % fam.num_classes for i in range(samples)]
    imgs = [fam.batch(classes[s:s + 256], seed + s, size=models.target.image_size, variation=fam.gpt_variation)
            for s in range(0, samples, 256)]
    return torch.cat(imgs), classes


def _features(models: Models, images: torch.Tensor) -> np.ndarray:
    dev = next(models.classifier.parameters()).device
    with torch.inference_mode():
        return np.concatenate([models.classifier.features(images[s:s + 256].to(dev)).float().cpu().numpy()
                               for s in range(0, len(images), 256)])


def real_features(models: Models, samples: int) -> np.ndarray:
    """Classifier features of `samples` real images (sample i: class i % classes, key REAL_SEED + i)."""
    return _features(models, _real_images(models, samples, REAL_SEED)[0])


def real_sets(models: Models, samples: int) -> tuple[SampleSet, SampleSet]:
    """The real reference of the quality measures (bench.measures.Context): the real images of
    `real_features`, and the same images encoded and decoded by the target's VQ."""
    images, classes = _real_images(models, samples, REAL_SEED)
    t = models.target
    with torch.inference_mode():
        tokens = torch.cat([t.encode(images[s:s + 64].to(t.device)).cpu() for s in range(0, samples, 64)])
        vq = torch.cat([t.decode(tokens[s:s + 64].to(t.device)).float().cpu() for s in range(0, samples, 64)])
    cls = np.asarray(classes)
    return (SampleSet(to_uint8(images), tokens, _features(models, images), cls),
            SampleSet(to_uint8(vq), tokens, _features(models, vq), cls))


def ratio_of_medians(ref: Any, other: Any) -> float:
    """median(ref) / median(other): the speed-up of `other` over `ref` for seconds per image."""
    r, o = np.median(np.asarray(ref, float)), np.median(np.asarray(other, float))
    return float(r / o) if o > 0 else float("nan")


def ratio_ci(ref: Any, other: Any, n_boot: int = N_BOOT, seed: int = 0) -> list[float] | None:
    """Paired bootstrap 95% interval of median(ref) / median(other) over runs (same seeds in both):
    the interval of the very statistic `ratio_of_medians` reports."""
    a, b = np.asarray(ref, float), np.asarray(other, float)
    if len(a) != len(b) or len(a) == 0:
        return None
    lo, hi = bootstrap_ci_pair(a, b, lambda x, y: np.median(x) / np.median(y), n_boot=n_boot, seed=seed, paired=True)
    return [lo, hi]


def share_of_oracle(ratio: float | None, oracle_ratio: float | None) -> float | None:
    """A method's speed-up as a share of the oracle's (1.0 = as fast as accepting every draft)."""
    if ratio is None or oracle_ratio is None or not (oracle_ratio > 0) or not math.isfinite(ratio):
        return None
    return float(ratio / oracle_ratio)


def iqr(values: Any) -> tuple[float, float, float]:
    q25, q75 = np.quantile(np.asarray(values, float), [0.25, 0.75])
    return float(q75 - q25), float(q25), float(q75)


# What the FD column's bracket is (fd_with_ci), said wherever the column is shown.
FD_INTERVAL_NOTE = ("FD's bracket is a percentile bootstrap over images drawn with replacement: duplicated images "
                    "raise FD, so the bracket sits above the point estimate and shows the spread, not an interval "
                    "around it; compare FDs by their point estimates at equal sample counts.")


def fd_with_ci(gen: np.ndarray, real: np.ndarray, n_boot: int = N_BOOT_FD) -> tuple[float | None, list[float] | None]:
    if len(gen) < 2 or len(real) < 2:
        return None, None
    fd = frechet_distance(gen, real)
    lo, hi = bootstrap_ci_pair(gen, real, frechet_distance, n_boot=n_boot, seed=0)
    return fd, [lo, hi]


def mean_ci(values: np.ndarray) -> tuple[float | None, list[float] | None]:
    if len(values) == 0:
        return None, None
    lo, hi = bootstrap_ci(values, n_boot=N_BOOT, seed=0)
    return float(np.mean(values)), [lo, hi]


def paired_delta(a: np.ndarray, b: np.ndarray) -> tuple[float | None, list[float] | None]:
    """mean(a - b) with a paired bootstrap interval (a, b aligned by sample)."""
    if len(a) == 0 or len(a) != len(b):
        return None, None
    return mean_ci(np.asarray(a, float) - np.asarray(b, float))
