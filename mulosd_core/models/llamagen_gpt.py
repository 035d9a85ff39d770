"""LlamaGen GPT (c2i and t2i), parameter names identical to FoundationVision/LlamaGen.

Official checkpoints load without renaming. Behaviour follows upstream (docs/DESIGN.md sections 7.2-7.5):
pre-norm Llama blocks, SwiGLU with hidden = round_up(int(8*dim/3), 256), fused wqkv,
2D RoPE with zero rows at condition positions, logits cast to float32. The KV cache
lives outside the module (see kv_cache.py) so one loaded model serves many runs.
"""
from __future__ import annotations

from dataclasses import dataclass, asdict, field
from itertools import islice
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .kv_cache import KVCache, round_up
from .rope import apply_rope, rope_table_2d

# (n_layer, n_head, dim) of every released size (docs/DESIGN.md section 7.2).
GPT_SIZES: dict[str, tuple[int, int, int]] = {
    "GPT-B": (12, 12, 768),
    "GPT-L": (24, 16, 1024),
    "GPT-XL": (36, 20, 1280),
    "GPT-XXL": (48, 24, 1536),
    "GPT-XXXL": (48, 40, 2560),
    "GPT-1B": (22, 32, 2048),
    "GPT-3B": (24, 32, 3200),
    "GPT-7B": (32, 32, 4096),
}


@dataclass
class GPTConfig:
    dim: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_kv_head: Optional[int] = None
    multiple_of: int = 256
    ffn_dim_multiplier: Optional[float] = None
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    num_classes: int = 1000
    caption_dim: int = 2048
    class_dropout_prob: float = 0.1
    model_type: str = "c2i"
    vocab_size: int = 16384
    cls_token_num: int = 1
    ffn_hidden_dim: Optional[int] = None  # set only when a checkpoint's FFN width breaks the rule below
    name: str = field(default="custom", compare=False)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def ffn_hidden(self) -> int:
        if self.ffn_hidden_dim is not None:
            return self.ffn_hidden_dim
        hidden = int(2 * (4 * self.dim) / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        return round_up(hidden, self.multiple_of)

    @classmethod
    def from_size(cls, size: str, **overrides) -> "GPTConfig":
        if size not in GPT_SIZES:
            raise ValueError(f"unknown LlamaGen size {size!r}; expected one of {sorted(GPT_SIZES)}")
        n_layer, n_head, dim = GPT_SIZES[size]
        return cls(dim=dim, n_layer=n_layer, n_head=n_head, name=size, **overrides)

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class FeedForward(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.n_kv, self.head_dim, self.dim = cfg.n_head, cfg.kv_heads, cfg.head_dim, cfg.dim
        self.wqkv = nn.Linear(cfg.dim, (cfg.n_head + 2 * self.n_kv) * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, rope: torch.Tensor, mask: Optional[torch.Tensor],
                cache: Optional[tuple[torch.Tensor, torch.Tensor]], positions: Optional[torch.Tensor]) -> torch.Tensor:
        b, s, _ = x.shape
        kv_dim = self.n_kv * self.head_dim
        qkv = self.wqkv(x)
        # q and k are the first n_head + n_kv heads of the fused projection: rotate them in one go
        qk = apply_rope(qkv[..., : self.dim + kv_dim].view(b, s, self.n_head + self.n_kv, self.head_dim), rope)
        q = qk[:, :, : self.n_head].transpose(1, 2)
        k = qk[:, :, self.n_head:].transpose(1, 2)
        v = qkv[..., self.dim + kv_dim:].view(b, s, self.n_kv, self.head_dim).transpose(1, 2)
        if cache is not None:
            k_cache, v_cache = cache
            k_cache[:b, :, positions] = k
            v_cache[:b, :, positions] = v
            k, v = k_cache[:b], v_cache[:b]
        if self.n_kv != self.n_head:
            k = k.repeat_interleave(self.n_head // self.n_kv, dim=1)
            v = v.repeat_interleave(self.n_head // self.n_kv, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        return self.wo(out.transpose(1, 2).reshape(b, s, self.dim))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.attention = Attention(cfg)
        self.feed_forward = FeedForward(cfg)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, rope, mask, cache, positions):
        h = x + self.attention(self.attention_norm(x), rope, mask, cache, positions)
        return h + self.feed_forward(self.ffn_norm(h))


class LabelEmbedder(nn.Module):
    """Class embedding; the extra last row is the null class used for CFG."""

    def __init__(self, num_classes: int, dim: int, dropout_prob: float) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.embedding_table = nn.Embedding(num_classes + int(dropout_prob > 0), dim)

    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        return self.embedding_table(labels).unsqueeze(1)


class CaptionMLP(nn.Module):
    def __init__(self, in_features: int, dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, dim, bias=False)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class CaptionEmbedder(nn.Module):
    """Projects T5 caption features; `uncond_embedding` (a buffer, stored in checkpoints) is the null caption."""

    def __init__(self, caption_dim: int, dim: int, token_num: int = 120) -> None:
        super().__init__()
        self.cap_proj = CaptionMLP(caption_dim, dim)
        self.register_buffer("uncond_embedding", torch.randn(token_num, caption_dim) / caption_dim ** 0.5)

    def forward(self, caption: torch.Tensor) -> torch.Tensor:
        return self.cap_proj(caption)


class LlamaGenGPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        if cfg.model_type not in ("c2i", "t2i"):
            raise ValueError(f"model_type must be 'c2i' or 't2i', got {cfg.model_type!r}")
        self.config = cfg
        if cfg.model_type == "c2i":
            self.cls_embedding = LabelEmbedder(cfg.num_classes, cfg.dim, cfg.class_dropout_prob)
        else:
            # Upstream always stores 120 null-caption rows; every released t2i model has cls_token_num = 120,
            # so sizing the buffer by cls_token_num is identical there and keeps smaller configs consistent
            # (CFG rows match the caption length, and the registry reads cls_token_num back from the shape).
            self.cls_embedding = CaptionEmbedder(cfg.caption_dim, cfg.dim, cfg.cls_token_num)
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self._rope: dict[tuple, torch.Tensor] = {}

    # -- condition -------------------------------------------------------------------------
    @property
    def cond_len(self) -> int:
        return self.config.cls_token_num

    def null_condition(self, batch: int, device=None) -> torch.Tensor:
        """The unconditional input used for CFG: null class id, or the stored null caption."""
        if self.config.model_type == "c2i":
            return torch.full((batch,), self.config.num_classes, dtype=torch.long, device=device)
        unc = self.cls_embedding.uncond_embedding[: self.config.cls_token_num]
        return unc[None].expand(batch, *unc.shape).to(device)

    def embed_condition(self, cond: torch.Tensor) -> torch.Tensor:
        """Class ids [B] -> [B, 1, dim]; caption features [B, T, C] -> [B, cls_token_num, dim]."""
        if self.config.model_type == "c2i":
            if cond.dtype not in (torch.long, torch.int, torch.int32, torch.int64) or cond.dim() != 1:
                raise ValueError(f"c2i condition must be a 1-D tensor of class ids, got {tuple(cond.shape)} {cond.dtype}")
            return self.cls_embedding(cond.long())
        if cond.dim() != 3:
            raise ValueError(f"t2i condition must be caption features [B, T, {self.config.caption_dim}], got {tuple(cond.shape)}")
        return self.cls_embedding(cond.to(self.output.weight.dtype))[:, : self.config.cls_token_num]

    # -- rotary table ----------------------------------------------------------------------
    def rope_table(self, grid: int, device: torch.device) -> torch.Tensor:
        key = (grid, str(device))
        if key not in self._rope:
            self._rope[key] = rope_table_2d(grid, self.config.head_dim, self.cond_len, self.config.rope_base).to(device)
        return self._rope[key]

    # -- forward ---------------------------------------------------------------------------
    def forward_embeddings(self, h: torch.Tensor, positions: torch.Tensor, grid: int,
                           cache: Optional[KVCache] = None, key_valid: Optional[torch.Tensor] = None,
                           attn_mask: Optional[torch.Tensor] = None, layers: Optional[int] = None) -> torch.Tensor:
        """Run the blocks on embeddings h [B, S, dim] at sequence positions [S]; return float32 logits [B, S, V].

        `layers` runs only the first blocks before the final norm and head (an early exit: the self-drafter
        of a target trained to exit there at the low grid, GPTStage.low_layers); None runs them all.

        Without a cache, h must be the full sequence from position 0 (training path, causal mask, or
        `attn_mask` [B, 1, S, S] when given). With a cache, keys/values are written at `positions` and
        queries see every valid slot <= their own.
        """
        rope = self.rope_table(grid, h.device)[positions]
        mask = attn_mask
        if cache is not None:
            cache.mark(positions, key_valid)
            mask = cache.attention_mask(positions)[: h.shape[0]]
        for i, layer in enumerate(islice(self.layers, layers)):   # not layers[:k]: that builds a ModuleList per call
            kv = (cache.k[i], cache.v[i]) if cache is not None else None
            h = layer(h, rope, mask, kv, positions)
        return self.output(self.norm(h)).float()

    def forward(self, tokens: torch.Tensor, cond: torch.Tensor, grid: int,
                cond_mask: Optional[torch.Tensor] = None, layers: Optional[int] = None) -> torch.Tensor:
        """Teacher-forced full sequence: logits [B, N, V] where logits[:, n] predicts image token n.

        `cond_mask` [B, cls_token_num] (t2i, left-padded captions) hides padded caption keys from every
        query as upstream's emb_masks do (causal mask's condition columns times the mask, diagonal kept).
        """
        h = torch.cat([self.embed_condition(cond), self.tok_embeddings(tokens[:, :-1])], dim=1)
        s = h.shape[1]
        positions = torch.arange(s, device=h.device)
        mask = None
        if cond_mask is not None:
            valid = torch.ones(h.shape[0], s, dtype=torch.bool, device=h.device)
            valid[:, : self.cond_len] = cond_mask.to(device=h.device, dtype=torch.bool)
            causal = positions[None, :] <= positions[:, None]
            own = positions[None, :] == positions[:, None]
            mask = (causal[None] & (valid[:, None, :] | own[None]))[:, None]
        return self.forward_embeddings(h, positions, grid, attn_mask=mask, layers=layers)[:, self.cond_len - 1:]

    def new_cache(self, batch: int, num_tokens: int, device=None, dtype=None, layers: Optional[int] = None) -> KVCache:
        """Cache for `batch` rows (2B with CFG) and the whole sequence, rounded up to 8 as upstream; for the
        first `layers` blocks only when the model exits early (None: all)."""
        w = self.output.weight
        return KVCache(layers or self.config.n_layer, batch, self.config.kv_heads, round_up(self.cond_len + num_tokens, 8),
                       self.config.head_dim, dtype or w.dtype, device or w.device)

    def cache_bytes(self, batch: int, num_tokens: int, layers: Optional[int] = None) -> int:
        """Bytes `new_cache(batch, num_tokens, layers=layers)` allocates (for memory estimates before a run)."""
        return KVCache.bytes_for(layers or self.config.n_layer, batch, self.config.kv_heads,
                                 round_up(self.cond_len + num_tokens, 8), self.config.head_dim, self.output.weight.dtype)
