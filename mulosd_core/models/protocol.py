"""What decoding code may call on a model family. A new family is one adapter of this.

The engine never reaches into a model's internals: it prepares condition rows (with CFG
the batch is [cond; uncond]), allocates one static cache, prefills, then runs forwards
over sets of image positions on top of the cache.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, runtime_checkable

import torch

from .kv_cache import KVCache


@dataclass
class ConditionRows:
    """Embedded condition for every model row: [R, T, dim], plus key validity [R, T] for padded captions."""

    embeddings: torch.Tensor
    key_valid: Optional[torch.Tensor] = None

    @property
    def rows(self) -> int:
        return self.embeddings.shape[0]


@runtime_checkable
class ImageARModel(Protocol):
    name: str
    grid: int            # tokens per side of the image grid
    vocab_size: int      # codebook size
    cond_len: int        # condition positions before image token 0
    image_size: int      # pixels per side

    @property
    def num_tokens(self) -> int: ...
    @property
    def device(self) -> torch.device: ...
    def condition_rows(self, cond, cfg: bool) -> ConditionRows: ...
    def new_cache(self, rows: int) -> KVCache: ...
    def prefill(self, cond: ConditionRows, cache: KVCache) -> torch.Tensor: ...
    def forward_tokens(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                       fed_at: Optional[torch.Tensor] = None) -> torch.Tensor: ...
    def codebook(self) -> torch.Tensor: ...
    def codebook_id(self) -> str: ...
    def encode(self, images: torch.Tensor) -> torch.Tensor: ...
    def decode(self, tokens: torch.Tensor, rows: Optional[int] = None) -> torch.Tensor: ...
    def decode_rows(self, tokens: torch.Tensor, rows: int) -> torch.Tensor: ...
    def code_latent(self, tokens: torch.Tensor, rows: int) -> torch.Tensor: ...
    def nearest_codes(self, latent: torch.Tensor) -> torch.Tensor: ...
