"""Schedules: ZipAR (docs/DESIGN.md section 5.4), parallel drafting (section 2.2), SJD window (section 5.5)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mulosd_core.schedules import (
    ZipARStep,
    jacobi_max_iters,
    jacobi_window,
    parallel_draft_nfe,
    parallel_draft_schedule,
    raster_schedule,
    sjd_upstream_window,
    zipar_nfe,
    zipar_schedule,
)


@pytest.mark.parametrize("W,s,nfe", [(16, 8, 144), (24, 8, 224), (24, 4, 136), (32, 16, 544), (32, 8, 304)])
def test_zipar_nfe_verified_examples(W, s, nfe):
    assert zipar_nfe(W, s) == nfe
    assert len(zipar_schedule(W, s)) == nfe


def check_schedule(steps: list[ZipARStep], rows: int, W: int, window: int, first_window: int) -> None:
    """Every position sampled once, only from tokens that already exist, with the context the
    next-set rule promises (row r+1 col c sees row r up to col c+window-1)."""
    done_at: dict[int, int] = {-1: -1}  # position -> step index that sampled it
    proxy_slots: set[int] = set()
    for t, step in enumerate(steps):
        ats = [at for _, at in step.fed]
        assert ats == sorted(ats) and len(set(ats)) == len(ats)
        for src, at in step.fed:
            assert done_at.get(src, 10**9) < t, (t, src)  # the fed token exists
            if src != at:  # proxy: row r-1's newest token in slot (r, W-1)
                assert at % W == W - 1 and at not in done_at and src < at
                proxy_slots.add(at)
            elif at in proxy_slots and not any(i == step.fed.index((src, at)) for i, _ in step.sampled):
                proxy_slots.discard(at)  # re-fed: proxy overwritten
        for i, pos in step.sampled:
            src, at = step.fed[i]
            assert pos == at + 1 and pos not in done_at
            r, c = divmod(pos, W)
            if c > 0:
                assert src == pos - 1
            if r >= 1:
                need = min(first_window if r == 1 else window, W)
                upto = min(c + need - 1, W - 1)  # row r-1 must hold cols 0..upto
                assert done_at[(r - 1) * W + upto] < t
                if upto == W - 1 and c + need - 1 >= W:
                    assert (r - 1) * W + W - 1 not in proxy_slots  # real K/V there by now
        for _, pos in step.sampled:
            done_at[pos] = t
    assert sorted(p for p in done_at if p >= 0) == list(range(rows * W))
    assert not proxy_slots - {(rows - 1) * W + W - 1}


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 14))
def test_zipar_schedule_properties(W, s):
    steps = zipar_schedule(W, s)
    check_schedule(steps, W, W, s, W)
    assert len(steps) == zipar_nfe(W, s)
    if 2 <= s < W:
        assert len(steps) == 2 * W + (W - 2) * s
    if s >= W:
        assert len(steps) == W * W
    assert steps[0] == ZipARStep(fed=((-1, -1),), sampled=((0, 0),))  # prefill samples (0, 0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.integers(1, 14))
def test_parallel_draft_schedule_properties(rows, W, s):
    steps = parallel_draft_schedule(rows, W, s)
    check_schedule(steps, rows, W, s, s)
    assert len(steps) == parallel_draft_nfe(rows, W, s) == W + (rows - 1) * min(s, W)
    if s >= W:  # sequential row by row: one position per call, raster order
        assert [st.sampled_positions for st in steps] == [[p] for p in range(rows * W)]


def test_zipar_small_trace():
    # W = 4, window 2: prefill + row 0 AR (4 forwards), then rows 1..3 overlap
    steps = zipar_schedule(4, 2)
    assert [s.sampled_positions for s in steps[:5]] == [[0], [1], [2], [3], [4]]
    assert steps[4].fed == ((3, 3),)  # row 0's last token is the real input of (1, 0)
    # row 2 starts when row 1 holds 2 tokens: proxy = newest of row 0 = (0, 3), in slot (1, 3)
    assert steps[6].fed == ((5, 5), (3, 7)) and steps[6].sampled_positions == [6, 8]
    # row 1 completes at step 7; its last token is re-fed once in step 8 without a sample
    assert steps[7].sampled_positions == [7, 9]
    assert (7, 7) in steps[8].fed and 7 not in [steps[8].fed[i][1] for i, _ in steps[8].sampled]
    assert len(steps) == 2 * 4 + 2 * 2


def test_parallel_draft_trace():
    steps = parallel_draft_schedule(2, 4, 2)
    assert steps[0] == ZipARStep(fed=((-1, -1),), sampled=((0, 0),))
    # row 1 starts from a proxy: the last context token (-1) in slot (0, 3)
    assert steps[2].fed == ((1, 1), (-1, 3)) and steps[2].sampled_positions == [2, 4]
    assert len(steps) == 4 + 2


def test_raster_schedule():
    steps = raster_schedule(3)
    assert [s.fed for s in steps] == [((-1, -1),), ((0, 0),), ((1, 1),)]
    assert [s.sampled_positions for s in steps] == [[0], [1], [2]]


def test_jacobi_windows():
    assert jacobi_window(0, 1024) == 16
    assert jacobi_window(1020, 1024) == 4
    assert jacobi_window(1024, 1024) == 0
    assert jacobi_window(0, 100, L=8) == 8
    assert sjd_upstream_window(0, 1, 1006) == 1
    assert sjd_upstream_window(1, 1, 1006) == 16
    assert sjd_upstream_window(1000, 1, 1006) == 6
    assert sjd_upstream_window(1006, 1, 1006) == 1
    assert jacobi_max_iters(16) == 17 and jacobi_max_iters(500) == 200
