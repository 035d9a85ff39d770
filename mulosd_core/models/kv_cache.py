"""Static KV cache: allocated once at the final length, written by index, never grown.

`valid[b, j]` says whether key slot j may be attended. Slots become valid when written;
t2i caption padding stays invalid (docs/DESIGN.md section 7.5). Queries always see
their own slot, so fully masked condition rows stay well defined.
"""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

_scope: contextvars.ContextVar[list | None] = contextvars.ContextVar("mulosd_cache_scope", default=None)


@contextlib.contextmanager
def cache_scope() -> Iterator[list["KVCache"]]:
    """Collect every KVCache built inside the block and release them all when it ends.

    A run that fails or is cancelled leaves its frames alive in the traceback ComfyUI keeps;
    releasing the tensors here frees the memory whatever still refers to the cache objects.
    """
    caches: list[KVCache] = []
    outer = _scope.get()
    token = _scope.set(caches)
    try:
        yield caches
    finally:
        _scope.reset(token)
        for c in caches:
            c.release()
        if outer is not None:       # a nested scope's caches count for the enclosing run too
            outer.extend(caches)


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
        self._keys: torch.Tensor | None = None  # [L] slot indices, for masks of the rows being computed
        self._all_own_valid = True  # every written slot is valid, so "own slot" adds nothing to the mask
        self.released = False
        self.allocated_bytes = self.nbytes() + self.valid.numel() * self.valid.element_size()
        scope = _scope.get()
        if scope is not None:
            scope.append(self)

    def mark(self, positions: torch.Tensor, key_valid: torch.Tensor | None = None) -> None:
        """Mark slots at `positions` as written (or set them to `key_valid` [B, S])."""
        if key_valid is None:
            self.valid[:, positions] = True
        else:
            self.valid[:, positions] = key_valid
            self._all_own_valid = False

    def truncate(self, length: int) -> None:
        """Forget every slot at sequence position >= length (contents stay, masked out)."""
        self.valid[:, length:] = False

    def attention_mask(self, positions: torch.Tensor) -> torch.Tensor:
        """Boolean mask [B, 1, S, L]: key j visible to the query at p iff j <= p and valid (or j == p).

        Call it after `mark(positions, ...)` (forward_embeddings does). Only the S rows being computed
        are built (S x L, never L x L): a decode step costs one comparison against the slot indices and
        one AND; while no slot was ever marked invalid, a query's own slot is valid already.
        """
        if self._keys is None or self._keys.device != positions.device:
            self._keys = torch.arange(self.max_len, device=positions.device)
        causal = self._keys[None, :] <= positions[:, None]  # [S, L]
        if self._all_own_valid:
            # no slot was ever written invalid (no masked caption padding): own slots are valid already
            return (causal[None] & self.valid[:, None, :])[:, None]
        own = self._keys[None, :] == positions[:, None]
        return (causal[None] & (self.valid[:, None, :] | own[None]))[:, None]

    @staticmethod
    def mask_bytes(rows: int, queries: int, max_len: int) -> int:
        """Bytes `attention_mask` allocates for `queries` positions of `rows` cache rows (bool, plus the
        [S, L] comparison it starts from), for memory estimates before a run."""
        return (rows + 2) * queries * max_len

    def reset(self) -> None:
        """Make the cache empty again (used after an interrupted run) without reallocating."""
        self.valid.zero_()
        self._all_own_valid = True
        for t in self.k + self.v:
            t.zero_()

    def release(self) -> None:
        """Drop the tensors (the cache is unusable afterwards)."""
        self.k, self.v, self._keys = [], [], None
        self.valid = self.valid.new_zeros(0, 0)
        self.released = True

    @staticmethod
    def bytes_for(n_layer: int, batch: int, n_kv_head: int, max_len: int, head_dim: int, dtype: torch.dtype) -> int:
        """What the constructor would allocate for these arguments (keys + values)."""
        return 2 * n_layer * batch * n_kv_head * max_len * head_dim * torch.empty(0, dtype=dtype).element_size()

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.k + self.v)
