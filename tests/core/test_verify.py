"""verify.py against brute-force definitions (docs/DESIGN.md sections 2.4-2.6, 5.3 and 5.6)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mulosd_core.verify import (
    exact_accept,
    expand_local,
    greedy_accept,
    gsd_accept,
    gsd_group,
    island_waves,
    island_waves_batched,
    label_islands,
    lantern_accept,
    lantern_neighbours,
    lantern_pool,
    lantern_reject_update,
    mulo_accept,
    mulo_pooled,
    raster_cut,
    residual,
)

SETTINGS = settings(max_examples=60, deadline=None)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rand_probs(g, B, n, V, sparse=True):
    x = torch.rand(B, n, V, generator=g)
    if sparse:  # zero some entries, like top-k would
        x = x * (torch.rand(B, n, V, generator=g) < 0.6)
    x[..., 0] += 1e-3
    return x / x.sum(-1, keepdim=True)


def rand_table(g, V, k, include_self):
    rows = []
    for v in range(V):
        perm = [j for j in torch.randperm(V, generator=g).tolist() if j != v]
        rows.append(([v] if include_self else []) + perm[: k - (1 if include_self else 0)])
    return torch.tensor(rows)


# ------------------------------------------------------------------ acceptance rules


@SETTINGS
@given(st.integers(0, 10**6), st.integers(1, 3), st.integers(1, 5), st.integers(2, 12), st.data())
def test_mulo_accept_brute_force(seed, B, n, V, data):
    g = gen(seed)
    k = data.draw(st.integers(1, V))
    tau = data.draw(st.floats(0.0, 1.0))
    probs = rand_probs(g, B, n, V)
    draft = torch.randint(0, V, (B, n), generator=g)
    table = rand_table(g, V, k, True)
    acc = mulo_accept(probs, draft, table, tau)
    pooled = mulo_pooled(probs, draft, table)
    for b in range(B):
        for i in range(n):
            x = int(draft[b, i])
            mass = sum(float(probs[b, i, v]) for v in range(V) if v in table[x].tolist())
            assert abs(mass - float(pooled[b, i])) < 1e-5
            if abs(mass - tau) > 1e-5:
                assert bool(acc[b, i]) == (mass >= tau)


def test_mulo_k1_is_pooling_off():
    probs = torch.tensor([[[0.5, 0.3, 0.2]]])
    table = torch.tensor([[0], [1], [2]])
    assert mulo_accept(probs, torch.tensor([[1]]), table, 0.3).item()
    assert not mulo_accept(probs, torch.tensor([[2]]), table, 0.3).item()
    wide = torch.tensor([[0, 1], [1, 2], [2, 0]])
    assert mulo_accept(probs, torch.tensor([[2]]), wide, 0.7).item()  # 0.2 + 0.5
    assert not mulo_accept(probs, torch.tensor([[0]]), table, 1.01).item()  # tau > 1 rejects all


def brute_lantern(p, x, row, k, delta):
    """Straight transcription of LANTERN's rule (docs/DESIGN.md section 5.3) for one position."""
    px = p[x]
    budget = delta if delta <= 1 else (delta - 1) * px
    c, J_c, used = 0.0, None, False
    for j in range(k):
        c += p[row[j]]
        if c <= budget + 1e-12:
            J_c, used = c, True
    return (px + J_c if used else px), used


@SETTINGS
@given(st.integers(0, 10**6), st.integers(2, 10), st.data())
def test_lantern_accept_brute_force(seed, V, data):
    g = gen(seed)
    B, n = 2, 3
    K = V - 1
    k = data.draw(st.integers(0, K))
    delta = data.draw(st.sampled_from([0.0, 0.05, 0.1, 0.5, 1.0, 2.0, 5.0, 20.0]))
    probs = rand_probs(g, B, n, V).double()
    draft = torch.randint(0, V, (B, n), generator=g)
    q = torch.rand(B, n, generator=g, dtype=torch.float64)
    q[0, 0] = 0.0
    u = torch.rand(B, n, generator=g, dtype=torch.float64)
    table = rand_table(g, V, K, False)
    acc, pooled = lantern_accept(probs, draft, q, table, k, delta, u)
    _, used = lantern_pool(probs, draft, table, k, delta)
    for b in range(B):
        for i in range(n):
            p = probs[b, i].tolist()
            x = int(draft[b, i])
            want, want_used = brute_lantern(p, x, table[x].tolist(), k, delta)
            assert abs(want - float(pooled[b, i])) < 1e-9
            assert bool(used[b, i]) == want_used
            qq, uu = float(q[b, i]), float(u[b, i])
            expect = want > 0 and (qq == 0 or uu <= want / qq)
            assert bool(acc[b, i]) == expect


def test_lantern_small_example():
    # V = 4, x = 0 with p = [0.1, 0.05, 0.04, 0.81]; neighbours of 0 nearest first: 1, 2, 3
    p = torch.tensor([[[0.1, 0.05, 0.04, 0.81]]])
    table = torch.tensor([[1, 2, 3], [0, 2, 3], [1, 0, 3], [2, 1, 0]])
    x = torch.tensor([[0]])
    _, pooled = lantern_accept(p, x, torch.ones(1, 1), table, 3, 0.1, torch.zeros(1, 1))
    assert abs(pooled.item() - 0.19) < 1e-6  # c = .05, .09, .90 -> J = 1
    _, pooled = lantern_accept(p, x, torch.ones(1, 1), table, 3, 1.5, torch.zeros(1, 1))
    assert abs(pooled.item() - 0.15) < 1e-6  # lambda mode: c_J <= 0.5 * 0.1
    _, pooled = lantern_accept(p, x, torch.ones(1, 1), table, 3, 0.01, torch.zeros(1, 1))
    assert abs(pooled.item() - 0.1) < 1e-6  # no J


@SETTINGS
@given(st.integers(0, 10**6), st.integers(2, 10), st.data())
def test_lantern_reject_update_brute_force(seed, V, data):
    g = gen(seed)
    K = V - 1
    k = data.draw(st.integers(0, K))
    p = rand_probs(g, 1, 4, V).double()[0]
    draft = torch.randint(0, V, (4,), generator=g)
    used = torch.rand(4, generator=g) < 0.5
    table = rand_table(g, V, K, False)
    out = lantern_reject_update(p, draft, table, k, used)
    for i in range(4):
        x = int(draft[i])
        want = p[i].tolist()
        want[x] = 0.0
        if used[i]:
            for j in table[x].tolist()[: k + 1]:
                want[j] = 0.0
        s = sum(want)
        want = [w / s for w in want] if s > 0 else [1.0 / V] * V
        assert torch.allclose(out[i], torch.tensor(want, dtype=out.dtype), atol=1e-9)


def test_lantern_reject_update_uniform_fallback():
    p = torch.tensor([[0.0, 1.0, 0.0]])
    out = lantern_reject_update(p, torch.tensor([1]), torch.tensor([[1, 2], [0, 2], [0, 1]]), 1, torch.tensor([False]))
    assert torch.allclose(out, torch.full((1, 3), 1 / 3))


def test_lantern_neighbourhood_scales_with_the_codebook():
    """Upstream's k = 1000 is for LlamaGen's 16384 codes; other codebooks keep the same share."""
    assert lantern_neighbours(16384) == 1000
    assert lantern_neighbours(1024) == 62          # the embedded family
    assert lantern_neighbours(16) == 1 and lantern_neighbours(1) == 1
    assert lantern_neighbours(1024, 5) == 5        # an explicit k is used as given


def test_exact_accept_rule():
    p = torch.tensor([0.2, 0.2, 0.0, 0.3, 0.3, 0.0])
    q = torch.tensor([0.4, 0.4, 0.5, 0.1, 0.0, 0.0])
    u = torch.tensor([0.49, 0.5, 0.0, 0.99, 0.99, 0.0])
    assert exact_accept(p, q, u).tolist() == [True, False, False, True, True, False]


def test_exact_sd_preserves_distribution():
    """Accept with min(1, p/q), else draw from residual: the result is distributed as p."""
    g = gen(0)
    V, N = 5, 200_000
    p = torch.tensor([0.4, 0.3, 0.2, 0.1, 0.0])
    q = torch.tensor([0.1, 0.1, 0.3, 0.3, 0.2])
    x = torch.multinomial(q, N, replacement=True, generator=g)
    acc = exact_accept(p[x], q[x], torch.rand(N, generator=g))
    r = residual(p, q)
    y = torch.where(acc, x, torch.multinomial(r, N, replacement=True, generator=g))
    freq = torch.bincount(y, minlength=V).double() / N
    assert torch.allclose(freq, p.double(), atol=5e-3)


def test_residual_and_fallbacks():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.0, 0.0, 0.0]])
    q = torch.tensor([[0.25, 0.25, 0.5], [0.2, 0.3, 0.5], [0.1, 0.2, 0.7]])
    r = residual(p, q)
    assert torch.allclose(r[0], torch.tensor([0.5, 0.5, 0.0]))
    assert torch.allclose(r[1], p[1])  # p == q: falls back to p
    assert torch.allclose(r[2], torch.full((3,), 1 / 3))  # nothing anywhere: uniform


def test_greedy_accept_ties_first_index():
    probs = torch.tensor([[[0.4, 0.4, 0.2], [0.1, 0.2, 0.7]]])
    assert greedy_accept(probs, torch.tensor([[0, 2]])).tolist() == [[True, True]]
    assert greedy_accept(probs, torch.tensor([[1, 1]])).tolist() == [[False, False]]


# ------------------------------------------------------------------ GSD (docs/DESIGN.md section 5.6)


def brute_gsd_group(p: list[float], x: int, cb: list[list[float]], w: int, p_thr: float, d_thr: float) -> set[int]:
    """GSD's group by its definition: rank least probable first (ties by index); places k-w .. k+w-1
    around x's place k, clipped at the top; empty when k < w (upstream's negative slice), then x alone."""
    order = sorted(range(len(p)), key=lambda v: (p[v], v))
    k = order.index(x)
    group = {x}
    if w == 0 or k < w:
        return group
    for v in order[k - w:k + w]:
        dist = sum((a - b) ** 2 for a, b in zip(cb[v], cb[x]))
        if abs(p[v] - p[x]) < p_thr and dist < d_thr:
            group.add(v)
    return group


def rand_unit_codebook(g, V, D=3):
    return torch.nn.functional.normalize(torch.randn(V, D, generator=g), dim=-1)


@SETTINGS
@given(st.integers(0, 10**6), st.integers(1, 3), st.integers(1, 4), st.integers(2, 12), st.data())
def test_gsd_group_brute_force(seed, B, n, V, data):
    g = gen(seed)
    w = data.draw(st.integers(0, 5))
    p_thr = data.draw(st.floats(0.0, 1.0))
    d_thr = data.draw(st.floats(0.0, 4.5))
    probs = rand_probs(g, B, n, V, sparse=data.draw(st.booleans()))
    draft = torch.randint(0, V, (B, n), generator=g)
    cb = rand_unit_codebook(g, V)
    cand, member = gsd_group(probs, draft, cb, w, p_thr, d_thr)
    for b in range(B):
        for i in range(n):
            got = cand[b, i][member[b, i]].tolist()
            assert len(got) == len(set(got))                    # nobody twice
            want = brute_gsd_group(probs[b, i].tolist(), int(draft[b, i]), cb.tolist(), w, p_thr, d_thr)
            assert set(got) == want


@SETTINGS
@given(st.integers(0, 10**6), st.integers(2, 12), st.data())
def test_gsd_accept_brute_force(seed, V, data):
    g = gen(seed)
    w = data.draw(st.integers(0, 5))
    p_thr, d_thr = data.draw(st.floats(0.0, 1.0)), data.draw(st.floats(0.0, 4.5))
    B, n = 2, 4
    probs, q = rand_probs(g, B, n, V), rand_probs(g, B, n, V, sparse=False)
    draft = torch.randint(0, V, (B, n), generator=g)
    cb = rand_unit_codebook(g, V)
    u = torch.rand(B, n, generator=g)
    got = gsd_accept(probs, q, draft, cb, u, w, p_thr, d_thr)
    for b in range(B):
        for i in range(n):
            grp = brute_gsd_group(probs[b, i].tolist(), int(draft[b, i]), cb.tolist(), w, p_thr, d_thr)
            P, Q = sum(float(probs[b, i, v]) for v in grp), sum(float(q[b, i, v]) for v in grp)
            assert bool(got[b, i]) == (float(u[b, i]) < min(1.0, P / Q))


@SETTINGS
@given(st.integers(0, 10**6), st.integers(2, 12), st.sampled_from(["w", "p", "d"]))
def test_gsd_group_of_one_is_exact_accept(seed, V, how):
    """A group of x alone (no rank window, or a threshold of 0) is SJD's p/q test, bit for bit."""
    g = gen(seed)
    B, n = 3, 5
    probs, q = rand_probs(g, B, n, V), rand_probs(g, B, n, V)
    draft = torch.multinomial(q.view(-1, V), 1, generator=g).view(B, n)
    cb = rand_unit_codebook(g, V)
    u = torch.rand(B, n, generator=g)
    w, p_thr, d_thr = {"w": (0, 0.15, 0.5), "p": (7, 0.0, 0.5), "d": (7, 0.15, 0.0)}[how]
    _, member = gsd_group(probs, draft, cb, w, p_thr, d_thr)
    assert (member.sum(-1) == 1).all()
    p_x, q_x = probs.gather(-1, draft[..., None])[..., 0], q.gather(-1, draft[..., None])[..., 0]
    assert torch.equal(gsd_accept(probs, q, draft, cb, u, w, p_thr, d_thr), exact_accept(p_x, q_x, u))


def test_gsd_small_example():
    """Tokens 0..7 in increasing p; codes on the unit circle (cos > 0.75 within 41.4 degrees)."""
    p = torch.tensor([[0.0, 0.01, 0.02, 0.05, 0.10, 0.17, 0.26, 0.39]])
    deg = torch.tensor([180.0, 120.0, 60.0, 20.0, 90.0, 0.0, -30.0, 5.0]).deg2rad()
    cb = torch.stack([deg.cos(), deg.sin()], -1)

    def group(x, w=2):
        cand, member = gsd_group(p, torch.tensor([x]), cb, w, 0.15, 0.5)
        return sorted(cand[0][member[0]].tolist())

    assert group(5) == [3, 5, 6]      # places 3..6; token 4 is 90 degrees away, token 7 outside the window
    assert group(7) == [6, 7]         # places 5..7 (clipped at the top); token 5 is 0.22 less probable
    assert group(1) == [1]            # among the 2 least probable: upstream's empty slice, x alone
    assert group(5, w=0) == [5]
    q = torch.zeros(1, 8)
    q[0, 5] = 1.0                     # a fresh draft: one-hot q, so the test is u < P = 0.48
    x = torch.tensor([5])
    assert gsd_accept(p, q, x, cb, torch.tensor([0.47]), 2).tolist() == [True]
    assert gsd_accept(p, q, x, cb, torch.tensor([0.49]), 2).tolist() == [False]
    assert exact_accept(p[:, 5], q[:, 5], torch.tensor([0.47])).tolist() == [False]   # SJD: u < 0.17


# ------------------------------------------------------------------ geometry


masks = st.integers(1, 3).flatmap(
    lambda B: st.integers(1, 6).flatmap(
        lambda R: st.integers(1, 12).flatmap(
            lambda W: st.lists(st.booleans(), min_size=B * R * W, max_size=B * R * W).map(
                lambda v: torch.tensor(v).view(B, R, W)
            )
        )
    )
)


@SETTINGS
@given(masks, st.integers(0, 3))
def test_expand_local_brute_force(m, radius):
    out = expand_local(m, radius)
    assert out.dtype == torch.bool and out.shape == m.shape
    B, R, W = m.shape
    for b in range(B):
        for r in range(R):
            for c in range(W):
                want = any(
                    bool(m[b, rr, cc])
                    for rr in range(max(0, r - radius), min(R, r + radius + 1))
                    for cc in range(max(0, c - radius), min(W, c + radius + 1))
                )
                assert bool(out[b, r, c]) == want
    assert torch.equal(expand_local(m[0], radius), out[0])  # 2-D input


def test_raster_cut():
    rej = torch.tensor([[False, False, True, True], [False] * 4, [True, False, False, False]])
    assert raster_cut(rej).tolist() == [2, 4, 0]
    assert raster_cut(torch.zeros(2, 0, dtype=torch.bool)).tolist() == [0, 0]


def flood_fill(mask: list[list[bool]]):
    """Brute-force 8-connected labelling by BFS from each unvisited pixel in raster order."""
    R, W = len(mask), len(mask[0])
    lab = [[0] * W for _ in range(R)]
    nxt = 0
    for r in range(R):
        for c in range(W):
            if mask[r][c] and not lab[r][c]:
                nxt += 1
                stack = [(r, c)]
                lab[r][c] = nxt
                while stack:
                    y, x = stack.pop()
                    for dy in (-1, 0, 1):
                        for dx in (-1, 0, 1):
                            yy, xx = y + dy, x + dx
                            if 0 <= yy < R and 0 <= xx < W and mask[yy][xx] and not lab[yy][xx]:
                                lab[yy][xx] = nxt
                                stack.append((yy, xx))
    return lab


grid_masks = st.integers(1, 8).flatmap(
    lambda R: st.integers(1, 16).flatmap(
        lambda W: st.lists(st.booleans(), min_size=R * W, max_size=R * W).map(lambda v: torch.tensor(v).view(R, W))
    )
)


@settings(max_examples=100, deadline=None)
@given(grid_masks)
def test_label_islands_matches_flood_fill(m):
    lab = label_islands(m)
    assert lab.dtype == torch.long and lab.shape == m.shape
    # flood fill started in raster order numbers islands by their first pixel: equal exactly
    assert lab.tolist() == flood_fill(m.tolist())


@settings(max_examples=100, deadline=None)
@given(grid_masks)
def test_island_waves_partition(m):
    lab = label_islands(m).flatten().tolist()
    waves = island_waves(m)
    sizes = {}
    for v in lab:
        if v:
            sizes[v] = sizes.get(v, 0) + 1
    assert len(waves) == max(sizes.values(), default=0)
    flat = [p for w in waves for p in w.tolist()]
    assert sorted(flat) == [i for i, v in enumerate(m.flatten().tolist()) if v]  # partition
    seen = {}
    for w, wave in enumerate(waves):
        ids = [lab[p] for p in wave.tolist()]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)  # one per island, id order
        assert set(ids) == {i for i, s in sizes.items() if s > w}
        for p, i in zip(wave.tolist(), ids):
            assert p > seen.get(i, -1)  # raster order inside an island
            seen[i] = p
    mb = torch.stack([m, m.flip(1)])
    wb = island_waves_batched(mb)
    assert len(wb) == len(waves)
    for w, (a, bw) in enumerate(zip(waves, wb)):
        assert bw[bw[:, 0] == 0, 1].tolist() == a.tolist()
        assert bw[bw[:, 0] == 1, 1].tolist() == island_waves(m.flip(1))[w].tolist()


def test_islands_example():
    m = torch.tensor(
        [
            [1, 1, 0, 0, 1],
            [0, 0, 1, 0, 1],
            [1, 0, 0, 0, 0],
        ],
        dtype=torch.bool,
    )
    assert label_islands(m).tolist() == [[1, 1, 0, 0, 2], [0, 0, 1, 0, 2], [3, 0, 0, 0, 0]]
    assert [w.tolist() for w in island_waves(m)] == [[0, 4, 10], [1, 9], [7]]
    assert island_waves(torch.zeros(2, 3, dtype=torch.bool)) == []


def test_grouped_accept_pools_gsd_group_against_tau():
    """sum of p over GSD's group >= tau; a window of 0 leaves x alone, i.e. p(x) >= tau."""
    from mulosd_core.verify import grouped_accept, gsd_group
    g = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(5, 7, 32, generator=g), -1)
    draft = torch.randint(0, 32, (5, 7), generator=g)
    cb = torch.nn.functional.normalize(torch.randn(32, 4, generator=g), dim=-1)
    cand, member = gsd_group(probs, draft, cb)
    pooled = (probs.gather(-1, cand) * member).sum(-1)
    for tau in (0.0, 0.05, 0.1, 0.3):
        assert torch.equal(grouped_accept(probs, draft, cb, tau), pooled >= tau)
    alone = grouped_accept(probs, draft, cb, 0.04, rank_window=0)
    assert torch.equal(alone, probs.gather(-1, draft[..., None])[..., 0] >= 0.04)
    assert bool((pooled >= probs.gather(-1, draft[..., None])[..., 0] - 1e-7).all())   # x is always in its group
