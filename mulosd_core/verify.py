"""Acceptance rules, rejection expansion and island grouping (docs/DESIGN.md sections 2.4-2.6).

Pure functions on tensors, no model. Shapes follow docs/ARCHITECTURE.md: probabilities are
float [..., V] already processed (CFG, temperature, top-k, top-p), draft tokens are Long [...].
Baseline rules live here too: exact SD (min(1, p/q); docs/DESIGN.md section 5.2), LANTERN's
pooled rule (section 5.3), GSD's grouped rule (section 5.6) and greedy, so every method in the
engine is the same loop with a different rule.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "exact_accept",
    "expand_local",
    "greedy_accept",
    "grouped_accept",
    "gsd_accept",
    "gsd_group",
    "island_waves",
    "island_waves_batched",
    "label_islands",
    "lantern_accept",
    "lantern_pool",
    "lantern_reject_update",
    "lantern_test",
    "mulo_accept",
    "mulo_pooled",
    "raster_cut",
    "residual",
]


# --------------------------------------------------------------------------- acceptance rules


def mulo_pooled(probs: Tensor, draft: Tensor, neighbours: Tensor) -> Tensor:
    """Float [...]: target mass pooled over the draft's neighbour row (step 3), for stats."""
    nb = neighbours.long()[draft]  # [..., k]
    return probs.gather(-1, nb).sum(-1)


def mulo_accept(probs: Tensor, draft: Tensor, neighbours: Tensor, tau: float) -> Tensor:
    """Bool [B, n]: MuLo-SD step 3, accept iff sum_{v in B_k(x)} p(v) >= tau.

    `neighbours` is a [V, k] table with the token itself in column 0, so a width-1 table is the
    "pooling off" ablation (accept iff p(x) >= tau). Deterministic: no randomness involved.
    """
    return mulo_pooled(probs, draft, neighbours) >= tau


LANTERN_K_UPSTREAM = 1000       # LANTERN's neighbourhood size for LlamaGen ...
LANTERN_CODEBOOK_UPSTREAM = 16384   # ... whose VQ has 16384 codes (docs/DESIGN.md section 5.3)


def lantern_neighbours(codebook_size: int, k: int = 0) -> int:
    """LANTERN's k for a codebook: `k` when given (> 0), else upstream's 1000 of 16384 codes scaled to
    the same share of this codebook (62 of 1024). Unscaled, 1000 neighbours of a 1024-code book cover
    nearly every code, and the rejection update (which zeroes A_{k+1}(x)) wipes out the whole target
    distribution, so every rejection would resample from the uniform fallback."""
    if k > 0:
        return k
    return max(1, round(LANTERN_K_UPSTREAM * codebook_size / LANTERN_CODEBOOK_UPSTREAM))


def lantern_pool(
    probs: Tensor, draft: Tensor, sorted_neighbours: Tensor, k: int, delta: float
) -> tuple[Tensor, Tensor]:
    """(pooled_p, used) per LANTERN's rule (docs/DESIGN.md section 5.3).

    c_j = cumulative target mass of A_k(x) nearest first (self excluded); J = largest j with
    c_j <= delta (delta <= 1, a TVD budget) or c_j <= (delta - 1) * p(x) (delta > 1, LANTERN++
    lambda mode). pooled = p(x) + c_J, or p(x) when no J exists; used says whether J exists
    (it decides how much `lantern_reject_update` zeroes).
    """
    p_x = probs.gather(-1, draft.unsqueeze(-1)).squeeze(-1)
    if k <= 0:
        return p_x, torch.zeros_like(p_x, dtype=torch.bool)
    nb = sorted_neighbours[:, :k].long()[draft]  # [..., k]
    c = torch.cumsum(probs.gather(-1, nb), dim=-1)
    budget = torch.full_like(p_x, float(delta)) if delta <= 1 else (delta - 1.0) * p_x
    ok = c <= budget.unsqueeze(-1)
    # c is non-decreasing, so the largest qualifying j carries the largest qualifying c_j.
    c_j = torch.where(ok, c, torch.zeros_like(c)).amax(dim=-1)
    return p_x + c_j, ok.any(dim=-1)


def lantern_accept(
    probs: Tensor,
    draft: Tensor,
    q_draft: Tensor,
    sorted_neighbours: Tensor,
    k: int,
    delta: float,
    uniform: Tensor,
) -> tuple[Tensor, Tensor]:
    """(accepted [B, n], pooled_p [B, n]): LANTERN's relaxed rule, accept iff u <= p~(x) / q(x).

    Upstream compares with <=; we additionally require p~ > 0 so a draw of exactly 0 can never
    accept a token the target gives no pooled mass (float32 uniforms hit 0 with prob 2^-24).
    q = 0 gives an infinite ratio, i.e. accept iff p~ > 0.
    """
    pooled, _ = lantern_pool(probs, draft, sorted_neighbours, k, delta)
    return lantern_test(pooled, q_draft, uniform), pooled


def lantern_test(pooled: Tensor, q_draft: Tensor, uniform: Tensor) -> Tensor:
    """Bool: LANTERN's test on an already pooled p~ (see lantern_accept), for callers that also need
    `lantern_pool`'s second output and so pool once."""
    q = q_draft.to(pooled.dtype)
    ratio = torch.where(q > 0, pooled / q.clamp_min(torch.finfo(pooled.dtype).tiny), torch.full_like(pooled, float("inf")))
    return (uniform.to(pooled.dtype) <= ratio) & (pooled > 0)


def _normalise_or_uniform(p: Tensor) -> Tensor:
    s = p.sum(-1, keepdim=True)
    uni = torch.full_like(p, 1.0 / p.shape[-1])
    return torch.where(s > 0, p / torch.where(s > 0, s, torch.ones_like(s)), uni)


def lantern_reject_update(
    p: Tensor, draft: Tensor, sorted_neighbours: Tensor, k: int, used_neighbourhood: Tensor
) -> Tensor:
    """Target distribution after LANTERN rejects `draft` (docs/DESIGN.md section 5.3, sampling path).

    p(x) := 0 and, where a neighbourhood was used (J exists), p := 0 on the first k + 1
    neighbours A_{k+1}(x) (k + 1, not J + 1, as upstream does); then renormalise, uniform if
    nothing is left. The engine samples the replacement token from this.
    """
    out = p.clone()
    out.scatter_(-1, draft.unsqueeze(-1), 0.0)
    width = min(k + 1, sorted_neighbours.shape[1])
    if width > 0:
        nb = sorted_neighbours[:, :width].long()[draft]  # [..., k+1]
        keep = (~used_neighbourhood.bool()).unsqueeze(-1).to(out.dtype)
        out.scatter_(-1, nb, out.gather(-1, nb) * keep)
    return _normalise_or_uniform(out)


def exact_accept(p_draft: Tensor, q_draft: Tensor, uniform: Tensor) -> Tensor:
    """Bool: standard speculative sampling, accept iff u < min(1, p(x) / q(x)).

    q(x) > 0 whenever x was sampled from q; if q(x) = 0 anyway, the ratio is taken as +inf when
    p(x) > 0 (accept) and 0 when p(x) = 0 (reject), so a token the target forbids never passes.
    """
    p = p_draft.to(torch.float64)
    q = q_draft.to(torch.float64)
    ratio = torch.where(q > 0, p / torch.where(q > 0, q, torch.ones_like(q)), torch.where(p > 0, torch.inf, 0.0))
    return uniform.to(torch.float64) < ratio.clamp(max=1.0)


def residual(p: Tensor, q: Tensor) -> Tensor:
    """[..., V]: normalise(max(p - q, 0)), the distribution to resample from after an exact-SD
    rejection (keeps the output distribution equal to p).

    Where the residual is all zero (p <= q everywhere, i.e. p == q up to rounding, so a
    rejection only happens through rounding), we fall back to p itself: it is the right
    conditional in that limit and keeps the target's top-k/top-p support, which a uniform
    fallback would break. Only if p has no mass either do we return uniform.
    """
    r = (p - q).clamp_min(0)
    s = r.sum(-1, keepdim=True)
    fallback = _normalise_or_uniform(p)
    return torch.where(s > 0, r / torch.where(s > 0, s, torch.ones_like(s)), fallback)


# GSD (So et al., ICCV 2025; docs/DESIGN.md section 5.6), upstream's constants.
GSD_RANK_WINDOW = 7     # candidates: tokens ranked within this many places of the draft
GSD_P_THR = 0.15        # ... whose target probability is within this of p(x)
GSD_D_THR = 0.5         # ... and whose squared distance to x is below this (see gsd_group)


def gsd_group(
    probs: Tensor,
    draft: Tensor,
    codebook: Tensor,
    rank_window: int = GSD_RANK_WINDOW,
    p_thr: float = GSD_P_THR,
    d_thr: float = GSD_D_THR,
) -> tuple[Tensor, Tensor]:
    """(candidates Long [..., 2w], member Bool [..., 2w]): GSD's dynamic group of draft x.

    Rank the vocabulary by the target's p, least probable first (ties by index). With x at place
    k, the candidates are places k-w .. k+w-1: the w tokens just less probable than x, x, and the
    w-1 just more probable (clipped at the most probable token). A candidate is a member when
    |p(v) - p(x)| < p_thr and ||c_v - c_x||^2 < d_thr; x always is. Upstream slices its sorted
    logits the same way; when x is among the w least probable tokens (k < w) the slice start goes
    negative, counts from the end, the slice comes out empty and upstream falls back to x alone
    (plain p/q); so do we, and for w = 0.

    Distances. Upstream measures them on Lumina-mGPT's input embedding table (the LM's own learned
    token vectors, 4096-d, scale unknown to us). We measure them between the VQ codebook vectors
    l2-normalised (as LlamaGen's and Janus' tokenizers use them, and as MuLo-SD's B_k does,
    docs/DESIGN.md section 2.4): that is the space the decoder turns into pixels, so it is what
    "visually similar" means here, and on unit vectors a squared distance is 2 - 2 cos, the same
    scale for every codebook whatever its size or dimension. We keep upstream's number on that
    scale: d_thr = 0.5 means cosine similarity above 0.75, a quarter of the squared distance between
    orthogonal codes (4 = no gate). On the embedded codebook (1024 codes, 8-d) that admits 12% of
    code pairs, about 120 codes per code; the rank and probability tests do most of the choosing, as
    upstream.
    Pass `codebook` already normalised; any [V, D] table works.
    """
    V = probs.shape[-1]
    w = int(rank_window)
    x = draft.long()
    if w <= 0:  # upstream's slice is empty: x alone
        return x.unsqueeze(-1), torch.ones_like(x, dtype=torch.bool).unsqueeze(-1)
    order = torch.sort(probs, dim=-1, stable=True).indices                 # ascending p, ties by index
    place = torch.empty_like(order).scatter_(-1, order, torch.arange(V, device=order.device).expand_as(order))
    k = place.gather(-1, x.unsqueeze(-1))                                   # [..., 1]
    at = k + torch.arange(-w, w, device=order.device)                       # [..., 2w]
    valid = (at >= 0) & (at < V) & (k >= w)
    cand = torch.where(valid, order.gather(-1, at.clamp(0, V - 1)), x.unsqueeze(-1))
    is_x = cand == x.unsqueeze(-1)
    p_near = (probs.gather(-1, cand) - probs.gather(-1, x.unsqueeze(-1))).abs() < p_thr
    cb = codebook.to(probs.device)
    d_near = (cb[cand] - cb[x].unsqueeze(-2)).pow(2).sum(-1) < d_thr
    # x joins once: at its own place (slot w) when the window is valid, else at slot 0 (the fallback);
    # the slots outside the vocabulary hold copies of x and stay out.
    x_slot = torch.zeros_like(is_x)
    x_slot[..., 0] = k[..., 0] < w
    x_slot[..., w] = k[..., 0] >= w
    member = (valid & p_near & d_near & ~is_x) | x_slot
    return cand, member


def gsd_accept(
    probs: Tensor,
    q: Tensor,
    draft: Tensor,
    codebook: Tensor,
    uniform: Tensor,
    rank_window: int = GSD_RANK_WINDOW,
    p_thr: float = GSD_P_THR,
    d_thr: float = GSD_D_THR,
) -> Tensor:
    """Bool: GSD's grouped test, accept iff u < min(1, sum_G p / sum_G q) over the group G of
    `gsd_group` (probs and q [..., V], the target's and the draft's distributions at each draft
    position). A group of x alone is `exact_accept` bit for bit; after a rejection the engine
    resamples from `residual(p, q)`, SJD's rule, as upstream does."""
    cand, member = gsd_group(probs, draft, codebook, rank_window, p_thr, d_thr)
    m = member.to(torch.float64)
    p_g = (probs.gather(-1, cand).to(torch.float64) * m).sum(-1)
    q_g = (q.gather(-1, cand).to(torch.float64) * m).sum(-1)
    return exact_accept(p_g, q_g, uniform)


def grouped_accept(
    probs: Tensor,
    draft: Tensor,
    codebook: Tensor,
    tau: float,
    rank_window: int = GSD_RANK_WINDOW,
    p_thr: float = GSD_P_THR,
    d_thr: float = GSD_D_THR,
) -> Tensor:
    """Bool: MuLo-SD's deterministic test over GSD's group instead of the k nearest codes, accept iff
    sum_G p >= tau with G from `gsd_group` (x always in it). Our combination, for drafts that have no
    drafter probability (upsampled, r > 1), so GSD's p/q test cannot apply."""
    cand, member = gsd_group(probs, draft, codebook, rank_window, p_thr, d_thr)
    return (probs.gather(-1, cand) * member.to(probs.dtype)).sum(-1) >= tau


def greedy_accept(probs: Tensor, draft: Tensor) -> Tensor:
    """Bool: draft == argmax p (torch.argmax's first index on ties), the greedy exactness anchor."""
    return draft == probs.argmax(dim=-1)


# --------------------------------------------------------------------------- rejection geometry


def expand_local(rejected: Tensor, radius: int) -> Tensor:
    """Bool [B, R, W] (or [R, W]): step 4, Chebyshev dilation by `radius`, clipped to the chunk.

    Each rejected position grows into a (2l+1) x (2l+1) square; radius 0 is the identity.
    """
    if radius < 0:
        raise ValueError(f"radius must be >= 0, got {radius}")
    m = rejected.bool()
    if radius == 0 or m.numel() == 0:
        return m.clone()
    squeeze = m.dim() == 2
    x = m.unsqueeze(0) if squeeze else m
    # max_pool2d pads with -inf, so the window is clipped at the chunk border.
    y = F.max_pool2d(x.unsqueeze(1).float(), kernel_size=2 * radius + 1, stride=1, padding=radius)
    y = y.squeeze(1) > 0.5
    return y.squeeze(0) if squeeze else y


def raster_cut(rejected: Tensor) -> Tensor:
    """Long [B]: index of the first rejection per row, n if none (classic raster rejection)."""
    n = rejected.shape[-1]
    idx = torch.arange(n, device=rejected.device).expand_as(rejected)
    fill = torch.full_like(idx, n)
    return torch.where(rejected.bool(), idx, fill).amin(dim=-1) if n > 0 else fill.sum(-1)


def _islands_host(mask: list[list[bool]], W: int) -> list[list[int]]:
    """8-connected components of a host bool grid as lists of flat positions in raster order,
    islands ordered by their first pixel.

    Union-find over horizontal runs (two runs in adjacent rows touch, 8-connected, when their
    column spans overlap after widening by one). Chunks are a few hundred pixels, so plain
    Python ints beat kernel launches and need no device sync per iteration.
    """
    runs: list[tuple[int, int, int]] = []  # (row, start col, end col exclusive), raster order
    parent: list[int] = []

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    prev: list[int] = []
    for r, row in enumerate(mask):
        cur: list[int] = []
        c = 0
        while c < W:
            if row[c]:
                s = c
                while c < W and row[c]:
                    c += 1
                cur.append(len(runs))
                parent.append(len(runs))
                runs.append((r, s, c))
            c += 1
        i = 0
        for rid in cur:  # two-pointer sweep over the previous row's runs
            _, s, e = runs[rid]
            while i < len(prev) and runs[prev[i]][2] < s:  # ends left of s-1
                i += 1
            j = i
            while j < len(prev) and runs[prev[j]][1] <= e:  # starts at or before e (= end+1-1)
                a, b = find(rid), find(prev[j])
                if a != b:  # the smaller root wins: it is the island's raster-first run
                    parent[max(a, b)] = min(a, b)
                j += 1
        prev = cur
    groups: dict[int, list[int]] = {}
    for rid, (r, s, e) in enumerate(runs):
        groups.setdefault(find(rid), []).extend(range(r * W + s, r * W + e))
    return [groups[root] for root in sorted(groups)]


def _check_2d(mask: Tensor) -> None:
    if mask.dim() != 2:
        raise ValueError(f"mask must be [R, W], got shape {tuple(mask.shape)}")


def label_islands(mask: Tensor) -> Tensor:
    """Long [R, W]: step 5 (v2), 8-connected component ids; 0 = background, islands numbered
    1..K in raster order of their first pixel."""
    _check_2d(mask)
    R, W = mask.shape
    labels = [0] * (R * W)
    for i, isl in enumerate(_islands_host(mask.bool().tolist(), W), start=1):
        for n in isl:
            labels[n] = i
    return torch.tensor(labels, dtype=torch.long, device=mask.device).view(R, W)


def _deal(island: list[int], waves: list[list], item: Callable[[int], object]) -> None:
    """Append the island's w-th position to wave w (islands visited in id order)."""
    while len(waves) < len(island):
        waves.append([])
    for w, n in enumerate(island):
        waves[w].append(item(n))


def island_waves(mask: Tensor) -> list[Tensor]:
    """Step 5 (v2) schedule: wave w = the w-th position (raster order, flat r*W+c) of every island
    with more than w positions, islands in id order. len = largest island; the waves partition
    the mask, so one batched target call per wave resamples every island in parallel."""
    _check_2d(mask)
    W = mask.shape[1]
    waves: list[list[int]] = []
    for isl in _islands_host(mask.bool().tolist(), W):
        _deal(isl, waves, lambda n: n)
    return [torch.tensor(w, dtype=torch.long, device=mask.device) for w in waves]


def island_waves_batched(mask: Tensor) -> list[Tensor]:
    """Waves across a batch: mask [B, R, W] -> list of Long [m_w, 2] rows (batch index, flat
    position); wave w joins wave w of every batch element (one target call per wave)."""
    if mask.dim() != 3:
        raise ValueError(f"mask must be [B, R, W], got shape {tuple(mask.shape)}")
    W = mask.shape[2]
    waves: list[list[tuple[int, int]]] = []
    for b, m in enumerate(mask.bool().tolist()):
        for isl in _islands_host(m, W):
            _deal(isl, waves, lambda n, b=b: (b, n))
    return [torch.tensor(w, dtype=torch.long, device=mask.device).view(-1, 2) for w in waves]
