"""Frechet distance, bootstrap intervals and accuracy against hand-computed values."""
import numpy as np
import pytest
import torch

from mulosd_core.metrics import (
    accuracy,
    bootstrap_ci,
    bootstrap_ci_pair,
    feature_stats,
    frechet_distance,
    frechet_distance_from_stats,
)


def _exact_1d(mean, std, n=1000):
    """n points with exactly the given mean and unbiased standard deviation."""
    z = np.random.default_rng(0).standard_normal(n)
    z = (z - z.mean()) / z.std(ddof=1)
    return (mean + std * z)[:, None]


def test_fd_1d_closed_form():
    a, b = _exact_1d(1.0, 2.0), _exact_1d(-0.5, 0.5)
    assert frechet_distance(a, b) == pytest.approx((1.0 + 0.5) ** 2 + (2.0 - 0.5) ** 2, rel=1e-9)


def test_fd_identical_sets_is_zero_and_symmetric():
    x = np.random.default_rng(1).standard_normal((500, 16))
    y = np.random.default_rng(2).standard_normal((400, 16)) * 1.3 + 0.2
    assert frechet_distance(x, x) == pytest.approx(0.0, abs=1e-8)
    assert frechet_distance(x, y) == pytest.approx(frechet_distance(y, x), rel=1e-8)
    assert frechet_distance(torch.from_numpy(x).float(), torch.from_numpy(y).float()) == pytest.approx(
        frechet_distance(x, y), rel=1e-4)


def _numpy_fd(a, b):
    """The textbook formula in plain numpy (scipy-free): an independent check of the torch computation."""
    ca, cb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    w, v = np.linalg.eigh(ca)
    sa = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    tr = np.sqrt(np.clip(np.linalg.eigvalsh(sa @ cb @ sa), 0, None)).sum()
    d = a.mean(0) - b.mean(0)
    return d @ d + np.trace(ca) + np.trace(cb) - 2 * tr


def test_fd_matches_a_numpy_computation():
    a = np.random.default_rng(3).standard_normal((80, 12))
    b = np.random.default_rng(4).standard_normal((70, 12)) * 0.7 + 0.3
    assert frechet_distance(a, b) == pytest.approx(_numpy_fd(a, b), rel=1e-9)
    mu, cov = feature_stats(a)
    assert frechet_distance_from_stats(mu, cov, *feature_stats(b)) == frechet_distance(a, b)


def _whitened(n, d, seed):
    """n points in d dims with sample mean exactly 0 and sample covariance exactly I."""
    m = np.random.default_rng(seed).standard_normal((n, d))
    m -= m.mean(0)
    return m @ np.linalg.inv(np.linalg.cholesky(np.cov(m, rowvar=False))).T


def test_fd_2d_diagonal():
    """Diagonal covariances: FD = sum over coordinates of (mu_a - mu_b)^2 + (s_a - s_b)^2."""
    a = _whitened(800, 2, 5) * [1.0, 3.0] + [0.0, 2.0]
    b = _whitened(600, 2, 6) * [2.0, 1.0] + [1.0, 0.0]
    expected = (0 - 1) ** 2 + (1 - 2) ** 2 + (2 - 0) ** 2 + (3 - 1) ** 2
    assert frechet_distance(a, b) == pytest.approx(expected, rel=1e-9)


def test_fd_2d_rotated_equals_diagonal():
    """FD is invariant to a common rotation of both sets."""
    a = _whitened(800, 2, 5) * [1.0, 3.0] + [0.0, 2.0]
    b = _whitened(600, 2, 6) * [2.0, 1.0] + [1.0, 0.0]
    t = 0.7
    r = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
    assert frechet_distance(a @ r.T, b @ r.T) == pytest.approx(frechet_distance(a, b), rel=1e-9)


def test_fd_rejects_bad_shapes():
    with pytest.raises(ValueError):
        frechet_distance(np.zeros((1, 3)), np.zeros((5, 3)))
    with pytest.raises(ValueError):
        frechet_distance(np.zeros((5, 3)), np.zeros((5, 4)))


def test_bootstrap_ci_contains_mean_and_is_deterministic():
    v = np.random.default_rng(3).normal(5.0, 1.0, 200)
    lo, hi = bootstrap_ci(v, seed=11)
    assert lo < v.mean() < hi
    assert hi - lo == pytest.approx(2 * 1.96 / np.sqrt(200), rel=0.25)
    assert (lo, hi) == bootstrap_ci(v, seed=11)
    assert (lo, hi) != bootstrap_ci(v, seed=12)
    lo2, hi2 = bootstrap_ci(v, stat=lambda x: float(np.mean(x)), seed=11)  # generic path
    assert lo2 == pytest.approx(lo) and hi2 == pytest.approx(hi)


def test_bootstrap_ci_pair():
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((300, 2)), rng.standard_normal((300, 2)) + 1.0
    fd = frechet_distance(a, b)
    lo, hi = bootstrap_ci_pair(a, b, frechet_distance, n_boot=100, seed=0)
    assert lo < fd < hi
    assert (lo, hi) == bootstrap_ci_pair(a, b, frechet_distance, n_boot=100, seed=0)
    # paired: difference of per-seed values
    x = rng.random(100)
    y = x + 0.1 + 0.01 * rng.standard_normal(100)
    lo, hi = bootstrap_ci_pair(y, x, lambda p, q: float(np.mean(p - q)), n_boot=200, paired=True)
    assert 0.09 < lo < 0.1 < hi < 0.11
    with pytest.raises(ValueError):
        bootstrap_ci_pair(x, x[:50], lambda p, q: 0.0, paired=True)


def test_accuracy():
    logits = torch.tensor([[2.0, 1.0], [0.0, 3.0], [1.0, 0.0], [0.0, 1.0]])
    assert accuracy(logits, torch.tensor([0, 1, 1, 1])) == 0.75
    assert accuracy(np.array([1, 1, 0]), [1, 0, 0]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        accuracy([1, 2], [1])
