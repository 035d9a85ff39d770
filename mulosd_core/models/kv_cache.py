"""Static KV cache: allocated once at the final length, written by index, never grown.

`valid[b, j]` says whether key slot j may be attended. Slots become valid when written;
t2i caption padding stays invalid (upstream-facts A.6: emb_masks). Queries always see
their own slot, so fully masked condition rows stay well defined.
"""
from __future__ import annotations

import torch


def round_up(n: int, k: int) -> int:
    return ((n + k - 1) // k) * k


class KVCache:
    def __init__(self, n_layer: int, batch: int, n_kv_head: int, max_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str) -> None:
        shape = (batch, n_kv_head, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layer)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layer)]
        self.valid = torch.zeros(batch, max_len, dtype=torch.bool, device=device)
        self.max_len = max_len
        self.batch = batch

    def mark(self, positions: torch.Tensor, key_valid: torch.Tensor | None = None) -> None:
        """Mark slots at `positions` as written (or set them to `key_valid` [B, S])."""
        if key_valid is None:
            self.valid[:, positions] = True
        else:
            self.valid[:, positions] = key_valid

    def truncate(self, length: int) -> None:
        """Forget every slot at sequence position >= length (contents stay, masked out)."""
        self.valid[:, length:] = False

    def attention_mask(self, positions: torch.Tensor) -> torch.Tensor:
        """Boolean mask [B, 1, S, L]: key j visible to the query at p iff j <= p and valid (or j == p)."""
        keys = torch.arange(self.max_len, device=positions.device)
        causal = keys[None, :] <= positions[:, None]  # [S, L]
        own = keys[None, :] == positions[:, None]
        return (causal[None] & (self.valid[:, None, :] | own[None]))[:, None]

    def reset(self) -> None:
        """Make the cache empty again (used after an interrupted run) without reallocating."""
        self.valid.zero_()
        for t in self.k + self.v:
            t.zero_()

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)
