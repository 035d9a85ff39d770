"""k-nearest codebook neighbour tables (MuLo-SD: docs/DESIGN.md section 2.4; LANTERN: section 5.3).

MuLo-SD pools the target mass over B_k(x), the k nearest codebook entries of the draft token x
(self included, vectors as the tokenizer uses them, i.e. l2-normalised for LlamaGen's VQ).
LANTERN uses A_k(x): the raw stored vectors, self excluded. Both are rows of one table built by
`knn_table`; `cached_knn_table` keeps recent tables so the engine can ask for one every call.

Distances are Euclidean in float64 computed from coordinate differences (no |a|^2+|b|^2-2ab
shortcut), so equal vectors get bit-identical distances and ties are broken by index exactly.
"""

from __future__ import annotations

import hashlib

import threading
from collections import OrderedDict

import torch
from torch import Tensor

__all__ = ["cached_knn_table", "clear_knn_cache", "knn_table"]

# Elements of the float64 distance block computed at once (8M -> 64 MiB).
_BLOCK_ELEMS = 1 << 23


def _order_by_value_then_index(d: Tensor, cols: Tensor) -> Tensor:
    """Reorder the column sets `cols` of each row of d by (d value, column index)."""
    cols = torch.sort(cols, dim=1).values
    order = torch.sort(d.gather(1, cols), dim=1, stable=True).indices
    return cols.gather(1, order)


def _select_k_smallest(d: Tensor, k: int) -> Tensor:
    """Column indices of the k smallest entries of each row of d, ordered by (value, index).

    torch.topk is neither stable nor index-ordered among ties, so it only proposes a set; rows
    where the k-th and (k+1)-th smallest values tie (the set itself is ambiguous) are redone
    exactly: everything below the k-th value, then the tied entries in index order.
    """
    n = d.shape[1]
    if k == n or (4 * k >= n and n <= 4096):  # a full stable sort is cheap and trivially exact
        return torch.sort(d, dim=1, stable=True).indices[:, :k]
    vals, cols = torch.topk(d, k + 1, dim=1, largest=False, sorted=True)
    out = _order_by_value_then_index(d, cols[:, :k])
    amb = (vals[:, k - 1] == vals[:, k]).nonzero().flatten()
    if amb.numel():
        da = d[amb]
        t = vals[amb, k - 1 : k]
        lt = da < t
        eq = da == t
        need = k - lt.sum(dim=1, keepdim=True)
        keep = lt | (eq & (torch.cumsum(eq, dim=1) <= need))
        sel = keep.nonzero()[:, 1].view(-1, k)  # row-major -> ascending index within a row
        out[amb] = _order_by_value_then_index(da, sel)
    return out


def knn_table(codebook: Tensor, k: int, *, include_self: bool = True, normalize: bool = False) -> Tensor:
    """LongTensor [V, k]: row v lists the k codebook entries nearest to entry v by L2 distance.

    Ties are broken by lower index. include_self=True puts v itself first (even when other
    entries duplicate its vector: MuLo's B_k(x) always contains x); include_self=False leaves v
    out (LANTERN's A_k(x)). normalize=True l2-normalises the rows first (how LlamaGen's VQ uses
    them). Work is done in row blocks so V = 16384 never needs a V x V matrix.
    """
    if codebook.dim() != 2:
        raise ValueError(f"codebook must be [V, D], got shape {tuple(codebook.shape)}")
    V = codebook.shape[0]
    limit = V if include_self else V - 1
    if not 1 <= k <= limit:
        raise ValueError(f"k must be in [1, {limit}] for V={V}, include_self={include_self}; got {k}")
    e = codebook.detach().to(torch.float64)
    if normalize:
        e = torch.nn.functional.normalize(e, p=2.0, dim=1)
    out = torch.empty(V, k, dtype=torch.long, device=codebook.device)
    step = max(1, min(V, _BLOCK_ELEMS // max(V, 1)))
    for start in range(0, V, step):
        stop = min(V, start + step)
        d = torch.cdist(e[start:stop], e, p=2.0, compute_mode="donot_use_mm_for_euclid_dist")
        rows = torch.arange(stop - start, device=d.device)
        # Self is forced to the very front (or out of reach) whatever its duplicates do.
        d[rows, rows + start] = -1.0 if include_self else float("inf")
        out[start:stop] = _select_k_smallest(d, k)
    return out


def _fingerprint(codebook: Tensor) -> str:
    """Hash of the exact contents (a 16384 x 8 codebook hashes in about a millisecond)."""
    return hashlib.sha1(codebook.detach().contiguous().cpu().numpy().tobytes()).hexdigest()


_CACHE_SIZE = 4
_cache: OrderedDict[tuple, Tensor] = OrderedDict()
_lock = threading.Lock()


def cached_knn_table(codebook: Tensor, k: int, include_self: bool = True, normalize: bool = False) -> Tensor:
    """`knn_table` through a small LRU cache (at most 4 tables).

    Keyed by the codebook's shape, dtype, device and a content fingerprint plus (k, include_self,
    normalize), so an edited or replaced codebook never gets a stale table, while the same codebook
    recomputed each run (normalised at use time, or an inference tensor) hits the cache. Repeated calls return the same tensor object: callers must not modify it.
    """
    key = (
        tuple(codebook.shape),
        codebook.dtype,
        str(codebook.device),
        _fingerprint(codebook),
        int(k),
        bool(include_self),
        bool(normalize),
    )
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    table = knn_table(codebook, k, include_self=include_self, normalize=normalize)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:  # another thread built it meanwhile: keep one object
            _cache.move_to_end(key)
            return hit
        _cache[key] = table
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return table


def clear_knn_cache() -> None:
    """Drop every cached table (tests, or to free memory after switching models)."""
    with _lock:
        _cache.clear()
