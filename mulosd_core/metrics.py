"""Quality measures for the embedded family (docs/DESIGN.md section 10.4): classifier accuracy,
Frechet distance in the classifier's feature space, bootstrap confidence intervals.

The Frechet distance is computed with torch in float64 (the benchmark and the training
evaluation both call `frechet_distance`): torch obeys torch.set_num_threads, where numpy's
OpenBLAS may spin every core of a shared machine. The matrix square root comes from symmetric
eigen-decompositions, which is exact for the PSD matrices a covariance produces and needs no
complex cleanup. Inputs may be numpy arrays or tensors; the intervals are plain numpy.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch


def _np(x, dtype=np.float64) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _t64(x) -> torch.Tensor:
    return torch.as_tensor(_np(x))


def _psd_sqrt(a: torch.Tensor) -> torch.Tensor:
    """Square root of a symmetric PSD matrix (negative eigenvalues from rounding clipped)."""
    w, v = torch.linalg.eigh((a + a.T) / 2)
    return (v * w.clamp_min(0).sqrt()) @ v.T


def _fd(mu_a: torch.Tensor, cov_a: torch.Tensor, mu_b: torch.Tensor, cov_b: torch.Tensor) -> float:
    sa = _psd_sqrt(cov_a)
    m = sa @ cov_b @ sa
    tr_sqrt = torch.linalg.eigvalsh((m + m.T) / 2).clamp_min(0).sqrt().sum()
    d = mu_a - mu_b
    return max(float(d @ d + cov_a.trace() + cov_b.trace() - 2 * tr_sqrt), 0.0)


def frechet_distance_from_stats(mu_a, cov_a, mu_b, cov_b) -> float:
    """||mu_a - mu_b||^2 + tr(A) + tr(B) - 2 tr((A B)^(1/2)) for Gaussians N(mu, A), N(mu, B).

    tr((A B)^(1/2)) equals the sum of square roots of the eigenvalues of the
    symmetric PSD matrix sqrt(A) B sqrt(A), which eigh computes stably.
    """
    return _fd(_t64(mu_a).reshape(-1), torch.atleast_2d(_t64(cov_a)), _t64(mu_b).reshape(-1),
               torch.atleast_2d(_t64(cov_b)))


def _stats(feats) -> tuple[torch.Tensor, torch.Tensor]:
    f = _t64(feats)
    if f.ndim == 1:
        f = f[:, None]
    if f.ndim != 2 or f.shape[0] < 2:
        raise ValueError(f"need features [N>=2, F], got shape {tuple(f.shape)}")
    return f.mean(0), torch.atleast_2d(torch.cov(f.T))


def feature_stats(feats) -> tuple[np.ndarray, np.ndarray]:
    """(mean [F], unbiased covariance [F, F]) of features [N, F], N >= 2."""
    mu, cov = _stats(feats)
    return mu.numpy(), cov.numpy()


def frechet_distance(feats_a, feats_b) -> float:
    """Frechet distance between Gaussians fitted to features [N, F] and [M, F]."""
    mu_a, cov_a = _stats(feats_a)
    mu_b, cov_b = _stats(feats_b)
    if mu_a.shape != mu_b.shape:
        raise ValueError(f"feature sizes differ: {mu_a.shape[0]} vs {mu_b.shape[0]}")
    return _fd(mu_a, cov_a, mu_b, cov_b)


def accuracy(logits_or_preds, labels) -> float:
    """Fraction correct; logits [N, C] are reduced by argmax, predictions [N] used as is."""
    p = _np(logits_or_preds, dtype=np.float64)
    preds = p.argmax(axis=-1) if p.ndim == 2 else p
    y = _np(labels, dtype=np.int64).reshape(-1)
    preds = preds.astype(np.int64).reshape(-1)
    if preds.shape != y.shape:
        raise ValueError(f"{preds.shape[0]} predictions for {y.shape[0]} labels")
    return float((preds == y).mean()) if y.size else float("nan")


def _percentiles(stats: np.ndarray, alpha: float) -> tuple[float, float]:
    lo, hi = np.quantile(stats, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(lo), float(hi)


def bootstrap_ci(values, stat: Callable = np.mean, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of `stat(values)` (resampling with replacement).

    Deterministic for a seed. `stat` takes a 1-D array (or [N, ...] array) and returns a scalar.
    """
    v = _np(values)
    n = v.shape[0]
    if n == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    if stat in (np.mean, np.median) and v.ndim == 1:  # vectorised fast path
        stats = stat(v[idx], axis=1)
    else:
        stats = np.array([stat(v[i]) for i in idx], dtype=np.float64)
    return _percentiles(stats, alpha)


def bootstrap_ci_pair(a, b, stat_fn: Callable, n_boot: int = 200, alpha: float = 0.05, seed: int = 0,
                      paired: bool = False) -> tuple[float, float]:
    """Percentile bootstrap interval of `stat_fn(a, b)` for two samples (e.g. Frechet distance).

    Unpaired (default): a and b are resampled independently. Paired: a and b are
    aligned per seed (same length) and resampled with the same indices, which is
    what comparisons against AR samples drawn with the same seeds need.
    """
    a_, b_ = _np(a), _np(b)
    na, nb = a_.shape[0], b_.shape[0]
    if paired and na != nb:
        raise ValueError(f"paired bootstrap needs equal lengths, got {na} and {nb}")
    rng = np.random.default_rng(seed)
    stats = np.empty(n_boot, dtype=np.float64)
    for k in range(n_boot):
        ia = rng.integers(0, na, size=na)
        ib = ia if paired else rng.integers(0, nb, size=nb)
        stats[k] = stat_fn(a_[ia], b_[ib])
    return _percentiles(stats, alpha)
