"""Position schedules for the target-only baselines and for parallel drafting (no model).

ZipAR (docs/DESIGN.md section 5.4) and the drafter's ZipAR-style parallel drafting (section 2.2)
are one "next-set" simulation: every forward feeds, for each active row, its newest token and
samples that row's next column; row r+1 joins once row r holds `window` tokens. SJD's Jacobi
window (section 5.5) is a pair of small formulas.

Positions are flat raster indices n = row * W + col of the image (or, for a drafting block, of
the block). Position -1 stands for "the token before position 0": the condition prefix for a
full image (the prefill's last output predicts position 0) or the last committed token before a
drafting block. A fed token whose output is read always predicts `fed_at + 1`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DraftLayout",
    "ZipARStep",
    "jacobi_max_iters",
    "jacobi_window",
    "parallel_draft_layout",
    "parallel_draft_nfe",
    "parallel_draft_schedule",
    "raster_schedule",
    "sjd_upstream_window",
    "zipar_nfe",
    "zipar_schedule",
]


@dataclass(frozen=True)
class ZipARStep:
    """One model forward.

    fed: (source_position, fed_at_position) per input token, in raster order of fed_at. Usually
        source == fed_at; a ZipAR "proxy" feeds the token of `source` in the slot of a not yet
        decoded position (r, W-1) so its output can start row r+1. source = fed_at = -1 is the
        prefix (prefill / last committed token).
    sampled: (fed_index, sampled_position): position sampled from the output of fed[fed_index]
        (always fed_at + 1). Fed entries without a sample are ZipAR's re-feeds, which only
        overwrite a proxy's K/V with the real token.
    """

    fed: tuple[tuple[int, int], ...]
    sampled: tuple[tuple[int, int], ...]

    @property
    def sampled_positions(self) -> list[int]:
        return [p for _, p in self.sampled]

    @property
    def fed_positions(self) -> list[int]:
        return [at for _, at in self.fed]


def _next_set(rows: int, W: int, window: int, first_window: int) -> list[ZipARStep]:
    """Simulate next-set decoding of a rows x W block; row 0 starts from position -1.

    Row r+1 joins once row r holds `first_window` (r = 0) or `window` (r >= 1) tokens, both
    capped at W. Its first input is the real (r, W-1) token if decoded, else a proxy: the newest
    token of row r-1 (position -1 when r-1 is the row before the block), fed in slot (r, W-1);
    once row r completes, its last token is re-fed at its own slot in the next forward.
    """
    if rows <= 0 or W <= 0:
        return []
    if window < 1 or first_window < 1:
        raise ValueError(f"window must be >= 1, got {window}/{first_window}")
    count = [0] * rows  # decoded tokens per row
    started = [True] + [False] * (rows - 1)
    proxied = [False] * rows  # slot (r, W-1) holds a proxy's K/V not yet overwritten
    steps: list[ZipARStep] = []

    def newest(r: int) -> int:
        return r * W + count[r] - 1 if r >= 0 else -1

    while count[rows - 1] < W:
        entries: list[tuple[int, int, bool]] = []  # (source, fed_at, output is sampled)
        for r in range(rows):
            last = r * W + W - 1
            if count[r] == W:
                if proxied[r]:  # completed last step: overwrite the proxy once, logits unused
                    entries.append((last, last, False))
                    proxied[r] = False
                continue
            if not started[r]:
                need = min(first_window if r == 1 else window, W)
                if count[r - 1] < need:
                    continue
                started[r] = True
                up_last = last - W
                if count[r - 1] == W:  # the real predecessor (r-1, W-1) exists
                    entries.append((up_last, up_last, True))
                else:  # proxy: newest token of row r-2 in slot (r-1, W-1)
                    entries.append((newest(r - 2), up_last, True))
                    proxied[r - 1] = True
                continue
            p = newest(r)  # -1 for row 0 of the block before its first token
            entries.append((p, p, True))
        entries.sort(key=lambda e: e[1])
        fed = tuple((src, at) for src, at, _ in entries)
        sampled = tuple((i, at + 1) for i, (_, at, s) in enumerate(entries) if s)
        for _, pos in sampled:
            count[pos // W] += 1
        steps.append(ZipARStep(fed=fed, sampled=sampled))
    return steps


def raster_schedule(n: int) -> list[ZipARStep]:
    """Plain AR: one forward per position, position n sampled from the token at n-1."""
    return [ZipARStep(fed=((p - 1, p - 1),), sampled=((0, p),)) for p in range(n)]


def zipar_schedule(W: int, window: int, rows: int | None = None) -> list[ZipARStep]:
    """ZipAR on a rows x W grid (rows defaults to W), docs/DESIGN.md section 5.4.

    The prefill is the first step (it samples position 0); row 0 is plain AR; row r+1 starts when
    row r holds `window` tokens, its first token predicted from a proxy in slot (r, W-1); a
    completed row's last token is re-fed once. For window >= W this is plain AR (W*rows steps);
    upstream's degenerate s = W count (242 for W = 16) and its s = 1 crash are not reproduced.
    """
    rows = W if rows is None else rows
    return _next_set(rows, W, window, first_window=W)


def zipar_nfe(W: int, window: int, rows: int | None = None) -> int:
    """len(zipar_schedule(W, window)): 2W + (W-2)*window for 1 <= window < W (square grid)."""
    rows = W if rows is None else rows
    if rows <= 0 or W <= 0:
        return 0
    if rows == 1:
        return W
    s = min(window, W)
    return 2 * W + (rows - 2) * s


def parallel_draft_schedule(rows: int, W: int, window: int) -> list[ZipARStep]:
    """Drafter calls for a block of `rows` rows that continues committed context.

    Same next-set rule as ZipAR, but row 0 of the block needs no prefill (its first token comes
    from position -1, the last context token) and row 1 may start early too (its proxy is the
    last context token). window >= W is sequential row-by-row drafting.
    """
    return _next_set(rows, W, window, first_window=window)


def parallel_draft_nfe(rows: int, W: int, window: int) -> int:
    """len(parallel_draft_schedule(rows, W, window)) = W + (rows-1)*min(window, W)."""
    if rows <= 0 or W <= 0:
        return 0
    return W + (rows - 1) * min(window, W)


@dataclass(frozen=True)
class DraftLayout:
    """Parallel drafting of a whole image as one teacher-forced sequence (docs/DESIGN.md section 3.4).

    Every forward of `parallel_draft_schedule` writes K/V that later forwards read; what a fed token
    attends to is the slots written so far, so the whole schedule is one forward over its fed entries
    with an attention mask. A proxy and the real token that later overwrites its slot are two entries.
    Entry e feeds the token of grid position `source[e]` at slot `slot[e]`, attends to the entries in
    `sees[e]` (itself included; the condition prefix always), and its output is sampled for grid
    position `target[e]` (-1: a re-feed, output unused). Position 0 is predicted by the prefix.
    """

    source: tuple[int, ...]
    slot: tuple[int, ...]
    sees: tuple[tuple[int, ...], ...]
    target: tuple[int, ...]


def parallel_draft_layout(W: int, window: int) -> DraftLayout:
    """The layout of drafting a W x W grid from an empty context in one block (rows_per_step covers
    the drafter's grid, as the scenes defaults do). With no context the engine feeds row 1's first
    proxy from position 0 (`_Speculative._draft_parallel`), so a source of -1 becomes 0 here."""
    source, slot, target, sees = [], [], [], []
    occupant: dict[int, int] = {}   # slot -> entry whose K/V it holds
    for step in parallel_draft_schedule(W, W, window):
        new = {}
        for i, (src, at) in enumerate(step.fed):
            if at < 0:
                continue
            new[i] = len(source)
            occupant[at] = len(source)
            source.append(max(src, 0))
            slot.append(at)
            target.append(-1)
        for i in new.values():   # a forward writes all its slots before any of them attends
            sees.append(tuple(sorted(e for s, e in occupant.items() if s <= slot[i])))
        for fi, pos in step.sampled:
            if fi in new:
                target[new[fi]] = pos
    return DraftLayout(tuple(source), tuple(slot), tuple(sees), tuple(target))


def jacobi_window(cur: int, total: int, L: int = 16) -> int:
    """SJD: number of draft positions in the forward at frontier `cur`, min(L, total - cur)."""
    return max(0, min(L, total - cur))


def sjd_upstream_window(cur: int, lo: int, hi: int, L: int = 16) -> int:
    """Upstream SJD's per-forward count (docs/DESIGN.md section 5.5): min(L, hi - cur) inside
    [lo, hi), 1 outside (test_llamagen: lo = start + 1, hi = start + grid^2 - 18)."""
    return min(L, hi - cur) if lo <= cur < hi else 1


def jacobi_max_iters(L: int = 16) -> int:
    """Upstream SJD's iteration cap per window: min(200, L + 1)."""
    return min(200, L + 1)
