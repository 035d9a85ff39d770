"""What decoding code may call on a model family. A new family is one adapter of this.

The engine, the memory estimate (memory.py), weight streaming (offload.py) and the nodes call
only these members: they never reach into a model's internals. The engine prepares condition
rows (with CFG the batch is [cond; uncond]), allocates one static cache, prefills, then runs
forwards over sets of image positions on top of the cache, forgetting slots by truncation.
tests/core/models/test_protocol.py runs AR and MuLo-SD through an adapter written from this
file alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, runtime_checkable

import torch
from torch import nn

from ..config import SamplingConfig
from .kv_cache import KVCache


@dataclass
class ConditionRows:
    """Embedded condition for every model row: [R, T, dim], plus key validity [R, T] for padded captions."""

    embeddings: torch.Tensor
    key_valid: Optional[torch.Tensor] = None

    @property
    def rows(self) -> int:
        return self.embeddings.shape[0]


class WeightStreamer(Protocol):
    """What a model's `streamer` offers while its blocks stream from the CPU (offload.BlockStreamer is one).
    Declared here so this protocol and the memory estimate need not import offload.py."""

    blocks: list[nn.Module]   # the streamed blocks
    compute: torch.device     # where each block runs

    @property
    def block_bytes(self) -> int:
        """The largest block: what streaming adds to the compute device's memory at any moment."""
    def drop_all(self) -> None:
        """Send any block left on the compute device (by an exception mid-call) back to the CPU."""
    def remove(self) -> None:
        """Stop streaming: every block back on the compute device for good."""


@runtime_checkable
class ImageARModel(Protocol):
    name: str
    grid: int            # tokens per side of the image grid
    vocab_size: int      # codebook size
    cond_len: int        # condition positions before image token 0
    image_size: int      # pixels per side
    model_type: str      # the condition it takes: "c2i" class ids [B], "t2i" caption features [B, T, C] + mask,
                         # "janus" prompts (text or token ids); drafter and target must agree
    num_classes: int     # c2i: class ids 0..num_classes-1; 0 for the others
    caption_dim: int     # t2i: width of one caption feature (conditions.py checks it); 0 for the others
    family: Optional[str]                       # the embedded family its card names (presets.mulo_defaults); None: real
    default_sampling: Optional[SamplingConfig]  # the sampling it was trained for (ar.model_sampling); None: unknown
    streamer: Optional[WeightStreamer]          # set by offload.stream_weights while its blocks stream; else None

    @property
    def num_tokens(self) -> int: ...
    @property
    def device(self) -> torch.device: ...

    # -- condition and forward
    def condition_rows(self, cond, cfg: bool, mask: Optional[torch.Tensor] = None) -> ConditionRows:
        """Rows [cond; uncond] (uncond only with cfg) of a batch of conditions; `mask` [B, T]: valid caption tokens."""
    def format_prompt(self, prompt: str) -> list[int]:
        """janus: a text prompt's token ids as the model reads them (its condition length is checked on these);
        models that take no text raise ValueError."""
    def new_cache(self, rows: int) -> KVCache: ...
    def cache_bytes(self, rows: int) -> int:
        """Bytes `new_cache(rows)` allocates (the memory estimate before a run)."""
    def prefill(self, cond: ConditionRows, cache: KVCache) -> torch.Tensor:
        """Logits [R, V] for image token 0."""
    def forward_tokens(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                       fed_at: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Feed tokens [R, n] at image positions [n] (or at `fed_at`); float32 logits [R, n, V], entry i
        predicting the position after the slot it was fed at."""
    def truncate(self, cache: KVCache, image_length: int) -> None:
        """Forget every image slot from `image_length` on (the condition stays)."""

    # -- tokenizer
    def codebook(self) -> torch.Tensor:
        """Codebook vectors [V, D] as the decoder uses them (MuLo-SD's neighbours, GSD's distances)."""
    def raw_codebook(self) -> torch.Tensor:
        """Codebook vectors [V, D] as stored, before any normalisation the decoder applies (LANTERN's
        latent proximity is measured on these, as upstream does)."""
    def codebook_id(self) -> str:
        """Fingerprint of the codebook: drafter and target must share it."""
    def encode(self, images: torch.Tensor) -> torch.Tensor: ...
    def decode(self, tokens: torch.Tensor, rows: Optional[int] = None) -> torch.Tensor: ...
    def decode_rows(self, tokens: torch.Tensor, rows: int) -> torch.Tensor: ...
    def code_latent(self, tokens: torch.Tensor, rows: int) -> torch.Tensor: ...
    def nearest_codes(self, latent: torch.Tensor) -> torch.Tensor: ...
    def decoder_channels(self) -> tuple[int, ...]:
        """Channels of the VQ decoder's level j, which runs at image_size / 2^j pixels per side (j = 0: full
        size), for the memory estimate of a decode; () when not known (then only the attention terms count)."""

    # -- weights (offload.py streams `weight_blocks`; the rest of `weights_module` stays on the device)
    def weight_blocks(self) -> list[nn.Module]:
        """The transformer blocks: almost all of the weights, run one after another."""
    def weights_module(self) -> nn.Module:
        """The module that moves with the blocks (a shared VQ tokenizer may stay outside it)."""

    def describe(self, tokenizer: str = "") -> str:
        """One line for the loaders' text output: what the model is, its size, grid, condition and codebook,
        dtype and device; `tokenizer` names the tokenizer's file where the family keeps it apart."""
