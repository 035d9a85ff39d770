"""knn_table / cached_knn_table against a brute-force definition (docs/DESIGN.md sections 2.4 and 5.3)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mulosd_core import neighbours as nbm
from mulosd_core.neighbours import cached_knn_table, clear_knn_cache, knn_table


def _dist(codebook: torch.Tensor, normalize: bool) -> list[list[float]]:
    e = codebook.to(torch.float64)
    if normalize:
        e = torch.nn.functional.normalize(e, dim=1)
    pts = e.tolist()
    return [[math.sqrt(sum((a - b) ** 2 for a, b in zip(p, q))) for q in pts] for p in pts]


def brute_knn(codebook: torch.Tensor, k: int, include_self: bool, normalize: bool) -> torch.Tensor:
    d = _dist(codebook, normalize)
    rows = []
    V = len(d)
    for i in range(V):
        others = sorted((d[i][j], j) for j in range(V) if j != i)
        order = ([i] if include_self else []) + [j for _, j in others]
        rows.append(order[:k])
    return torch.tensor(rows, dtype=torch.long)


def assert_same_knn(got, cb, k, include_self, normalize):
    want = brute_knn(cb, k, include_self, normalize)
    if not normalize:  # integer data: distances are exact, so the order must match exactly
        assert torch.equal(got, want)
        return
    # Normalised integer vectors can be equal mathematically yet differ by an ulp, so compare
    # the distance sequences (ties may legitimately resolve either way).
    d = _dist(cb, normalize)
    for i, (g, w) in enumerate(zip(got.tolist(), want.tolist())):
        assert len(set(g)) == k and (i in g) == include_self
        if include_self:
            assert g[0] == i
        gd = [d[i][j] for j in g]
        wd = [d[i][j] for j in w]
        assert all(abs(a - b) < 1e-12 for a, b in zip(gd, wd))


@st.composite
def codebooks(draw):
    V = draw(st.integers(2, 24))
    D = draw(st.integers(1, 4))
    # small integer coordinates: many exact ties and duplicates, exact float arithmetic
    vals = draw(st.lists(st.integers(-2, 2), min_size=V * D, max_size=V * D))
    cb = torch.tensor(vals, dtype=torch.float32).view(V, D)
    include_self = draw(st.booleans())
    normalize = draw(st.booleans())
    limit = V if include_self else V - 1
    k = draw(st.integers(1, limit))
    return cb, k, include_self, normalize


@settings(max_examples=80, deadline=None)
@given(codebooks())
def test_knn_matches_brute_force(case):
    cb, k, include_self, normalize = case
    got = knn_table(cb, k, include_self=include_self, normalize=normalize)
    assert got.dtype == torch.long and got.shape == (cb.shape[0], k)
    assert_same_knn(got, cb, k, include_self, normalize)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 6), st.booleans())
def test_topk_path_with_blocks_and_ties(seed, k, include_self):
    """Large enough V for the topk path (4k < V), tiny blocks, integer data with ties."""
    g = torch.Generator().manual_seed(seed)
    cb = torch.randint(-1, 2, (40, 2), generator=g).float()
    old = nbm._BLOCK_ELEMS
    nbm._BLOCK_ELEMS = 7 * 40  # 7-row blocks, last one partial
    try:
        got = knn_table(cb, k, include_self=include_self)
    finally:
        nbm._BLOCK_ELEMS = old
    assert torch.equal(got, brute_knn(cb, k, include_self, False))


def test_self_first_with_duplicates():
    cb = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    t = knn_table(cb, 3)
    assert t[:, 0].tolist() == [0, 1, 2, 3]
    assert t[2].tolist() == [2, 0, 1]
    t = knn_table(cb, 2, include_self=False)
    assert t[2].tolist() == [0, 1]


def test_normalize_changes_neighbourhood():
    cb = torch.tensor([[1.0, 0.0], [10.0, 0.0], [0.0, 1.2]])
    assert knn_table(cb, 2)[0].tolist() == [0, 2]  # raw: (0, 1.2) is closer than (10, 0)
    assert knn_table(cb, 2, normalize=True)[0].tolist() == [0, 1]  # same direction


def test_bad_k():
    cb = torch.zeros(4, 2)
    with pytest.raises(ValueError):
        knn_table(cb, 4, include_self=False)
    with pytest.raises(ValueError):
        knn_table(cb, 0)


def test_cache_returns_same_tensor_and_tracks_content():
    clear_knn_cache()
    cb = torch.randn(32, 3, generator=torch.Generator().manual_seed(0))
    a = cached_knn_table(cb, 4, True, True)
    assert cached_knn_table(cb, 4, True, True) is a
    # keyed by content: the same codebook recomputed each run (a new tensor) reuses the table
    assert cached_knn_table(cb.clone(), 4, True, True) is a
    with torch.inference_mode():  # inference tensors (how the engine sees codebooks) work too
        assert cached_knn_table(cb.clone(), 4, True, True) is a
    b = cached_knn_table(cb, 3, False, False)
    assert b is not a and b.shape == (32, 3)
    cb[5] = cb[0] + 1e-3  # in-place edit: must not reuse the stale table
    c = cached_knn_table(cb, 4, True, True)
    assert c is not a
    assert torch.equal(c, knn_table(cb, 4, include_self=True, normalize=True))


def test_cache_is_bounded_lru():
    clear_knn_cache()
    cb = torch.randn(16, 2, generator=torch.Generator().manual_seed(1))
    first = cached_knn_table(cb, 1)
    for k in range(2, 2 + nbm._CACHE_SIZE):
        cached_knn_table(cb, k)
    assert len(nbm._cache) == nbm._CACHE_SIZE
    assert cached_knn_table(cb, 1) is not first  # evicted
    clear_knn_cache()
