"""Bookkeeping for the recheck rounds (VerifierConfig.recheck): our extension, not in the paper.

The paper's verifier judges a draft in the context of the drafts before it; when resampling then
changes one of those, the draft stays although the target might not accept it any more. A recheck
round verifies such tokens again. To find them, every token carries two times on one clock:
`decided`, when the context it was judged in (verified or sampled) was read, and `changed`, when
its value was last written. A token is stale when a token before it in raster order changed after
it was decided. A resampling wave reads its context before it writes, so its tokens change one
tick after they are decided: the islands of one wave see each other as stale.
"""
from __future__ import annotations

import torch


class ContextClock:
    """`decided` and `changed` times of every token of a batch [B, N]."""

    def __init__(self, batch: int, num_tokens: int, device: torch.device) -> None:
        self.decided = torch.zeros(batch, num_tokens, dtype=torch.long, device=device)
        self.changed = torch.zeros(batch, num_tokens, dtype=torch.long, device=device)
        self.now = 0

    def verified(self, lo: int, hi: int) -> None:
        """Drafts lo..hi-1 were written and judged by one verify call."""
        self.now += 1
        self.decided[:, lo:hi] = self.changed[:, lo:hi] = self.now

    def sampled(self, b: int, positions: list[int]) -> None:
        """Sample b drew `positions` in one wave: context read now, values written a tick later."""
        self.decided[b, positions] = self.now + 1
        self.changed[b, positions] = self.now + 2

    def wave_done(self) -> None:
        self.now += 2

    def confirmed(self, lo: int, hi: int, ok: torch.Tensor) -> None:
        """A recheck round found tokens lo..hi-1 where `ok` [B, hi-lo] still acceptable now."""
        self.now += 1
        self.decided[:, lo:hi][ok] = self.now

    def stale(self, lo: int, hi: int) -> torch.Tensor:
        """Bool [B, hi-lo]: tokens decided before a token ahead of them (from lo on) last changed."""
        c = self.changed[:, lo:hi]
        before = torch.cat([torch.zeros_like(c[:, :1]), c.cummax(1).values[:, :-1]], 1)
        return before > self.decided[:, lo:hi]
