"""Quality measures for the embedded family (SPEC section 5): classifier accuracy,
Frechet distance in the classifier's feature space, bootstrap confidence intervals.

Plain numpy, no scipy: the matrix square root comes from symmetric eigen-decompositions,
which is exact for the PSD matrices a covariance produces and needs no complex cleanup.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

try:  # torch is optional here so the metrics work on saved arrays alone
    import torch
except ImportError:  # pragma: no cover
    torch = None

def _np(x, dtype=np.float64) -> np.ndarray:
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _psd_sqrt(a: np.ndarray) -> np.ndarray:
    """Square root of a symmetric PSD matrix (negative eigenvalues from rounding clipped)."""
    w, v = np.linalg.eigh((a + a.T) / 2.0)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def frechet_distance_from_stats(mu_a: np.ndarray, cov_a: np.ndarray, mu_b: np.ndarray, cov_b: np.ndarray) -> float:
    """||mu_a - mu_b||^2 + tr(A) + tr(B) - 2 tr((A B)^(1/2)) for Gaussians N(mu, A), N(mu, B).

    tr((A B)^(1/2)) equals the sum of square roots of the eigenvalues of the
    symmetric PSD matrix sqrt(A) B sqrt(A), which eigh computes stably.
    """
    mu_a, mu_b = _np(mu_a).reshape(-1), _np(mu_b).reshape(-1)
    cov_a, cov_b = np.atleast_2d(_np(cov_a)), np.atleast_2d(_np(cov_b))
    sa = _psd_sqrt(cov_a)
    m = sa @ cov_b @ sa
    w = np.linalg.eigvalsh((m + m.T) / 2.0)
    tr_sqrt = float(np.sqrt(np.clip(w, 0.0, None)).sum())
    diff = mu_a - mu_b
    fd = float(diff @ diff + np.trace(cov_a) + np.trace(cov_b) - 2.0 * tr_sqrt)
    return max(fd, 0.0)


def feature_stats(feats) -> tuple[np.ndarray, np.ndarray]:
    """(mean [F], unbiased covariance [F, F]) of features [N, F], N >= 2."""
    f = _np(feats)
    if f.ndim == 1:
        f = f[:, None]
    if f.ndim != 2 or f.shape[0] < 2:
        raise ValueError(f"need features [N>=2, F], got shape {f.shape}")
    return f.mean(axis=0), np.atleast_2d(np.cov(f, rowvar=False))


def frechet_distance(feats_a, feats_b) -> float:
    """Frechet distance between Gaussians fitted to features [N, F] and [M, F]."""
    mu_a, cov_a = feature_stats(feats_a)
    mu_b, cov_b = feature_stats(feats_b)
    if mu_a.shape != mu_b.shape:
        raise ValueError(f"feature sizes differ: {mu_a.shape[0]} vs {mu_b.shape[0]}")
    return frechet_distance_from_stats(mu_a, cov_a, mu_b, cov_b)


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
