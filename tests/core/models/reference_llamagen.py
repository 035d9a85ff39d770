"""Test-only, deliberately naive re-statement of upstream LlamaGen's GPT forward.

Written from the upstream facts of docs/DESIGN.md section 7, independent of
`mulosd_core.models` (nothing is imported from it): it reads a plain state dict
with the official key names and computes logits the slow, obvious way, so the
port can be checked against it.

Differences in *how* (never in *what*) from the port, on purpose:
- RoPE multiplies complex numbers (`view_as_complex` of interleaved pairs) by a
  complex table built in float64; condition positions get complex zeros.
- Attention runs head by head with an explicit boolean mask, -inf fill and softmax.
- The layers are plain `F.linear` calls on state-dict tensors.

Upstream behaviour re-stated here (docs/DESIGN.md sections 7.2-7.5 and 8):
- pre-norm block h = x + Attn(RMSNorm(x)); out = h + FFN(RMSNorm(h)); FFN = w2(silu(w1 x) * w3 x)
- RMSNorm: float32 x * rsqrt(mean(x^2) + eps), cast back, then times weight
- fused wqkv split [q | k | v], heads contiguous blocks of head_dim
- 2D RoPE: pair p < D/4 rotates by row * f_p, the others by col * f_(p - D/4),
  f_j = base^(-4j/D); the first cls_token_num table rows are zero (q, k vanish there)
- c2i condition = embedding_table[label]; t2i = fc2(gelu_tanh(fc1(caption)))[:, :cls_token_num]
- t2i masking: the causal mask's first T columns are multiplied by emb_masks, then
  the diagonal is forced to 1
- incremental decode: a static cache of max_len = round_up(T + N, 8) slots written at
  input_pos, mask = causal_mask[:bs, None, input_pos] against the whole cache
- logits = output(norm(h)).float()
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    normed = xf / torch.sqrt((xf * xf).mean(dim=-1, keepdim=True) + eps)
    return normed.to(x.dtype) * w


def complex_rope_table(grid: int, head_dim: int, cls_token_num: int, base: float = 10000.0) -> torch.Tensor:
    """complex64 [cls_token_num + grid^2, head_dim // 2]; zero rows for the condition."""
    quarter = head_dim // 4
    assert 4 * quarter == head_dim
    freqs = [base ** (-4.0 * j / head_dim) for j in range(quarter)]
    rows = []
    for _ in range(cls_token_num):
        rows.append([0.0] * (head_dim // 2))
    for n in range(grid * grid):
        r, c = divmod(n, grid)
        rows.append([r * f for f in freqs] + [c * f for f in freqs])
    angles = torch.tensor(rows, dtype=torch.float64)
    table = torch.polar(torch.ones_like(angles), angles)
    table[:cls_token_num] = 0
    return table.to(torch.complex64)


def _rotate(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """x [B, S, H, D] (pairs interleaved), table complex [S, D/2]."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], x.shape[-1] // 2, 2).contiguous())
    out = torch.view_as_real(xc * table[None, :, None, :]).reshape(x.shape)
    return out.to(x.dtype)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """q [B, H, S, D], k/v [B, H, L, D], mask bool broadcastable to [B, 1, S, L] -> [B, S, H*D]."""
    outs = []
    scale = 1.0 / math.sqrt(q.shape[-1])
    for h in range(q.shape[1]):
        scores = (q[:, h] @ k[:, h].transpose(-1, -2)) * scale  # [B, S, L]
        scores = scores.masked_fill(~mask[:, 0], float("-inf"))
        outs.append(torch.softmax(scores.float(), dim=-1).to(v.dtype) @ v[:, h])
    return torch.cat(outs, dim=-1)


class ReferenceLlamaGen:
    """Upstream-behaviour LlamaGen GPT over a state dict with the official key names."""

    def __init__(self, sd: dict[str, torch.Tensor], n_head: int, grid: int, cls_token_num: int,
                 rope_base: float = 10000.0, norm_eps: float = 1e-5) -> None:
        self.sd = sd
        self.n_head = n_head
        self.dim = sd["tok_embeddings.weight"].shape[1]
        self.head_dim = self.dim // n_head
        self.n_layer = len({k.split(".")[1] for k in sd if k.startswith("layers.")})
        self.model_type = "c2i" if "cls_embedding.embedding_table.weight" in sd else "t2i"
        self.T = cls_token_num
        self.grid = grid
        self.eps = norm_eps
        self.table = complex_rope_table(grid, self.head_dim, cls_token_num, rope_base)
        self.num_classes = sd["cls_embedding.embedding_table.weight"].shape[0] - 1 if self.model_type == "c2i" else 0

    # -- pieces --------------------------------------------------------------------------
    def cond_embeddings(self, cond: torch.Tensor) -> torch.Tensor:
        sd = self.sd
        if self.model_type == "c2i":
            return sd["cls_embedding.embedding_table.weight"][cond.long()][:, None, :]
        w1 = sd["cls_embedding.cap_proj.fc1.weight"]
        x = F.linear(cond.to(w1.dtype), w1)
        x = F.gelu(x, approximate="tanh")
        return F.linear(x, sd["cls_embedding.cap_proj.fc2.weight"])[:, : self.T]

    def null_cond(self, batch: int) -> torch.Tensor:
        if self.model_type == "c2i":
            return torch.full((batch,), self.num_classes, dtype=torch.long)
        return torch.zeros(batch, self.T, self.sd["cls_embedding.uncond_embedding"].shape[1]) + \
            self.sd["cls_embedding.uncond_embedding"][: self.T]

    def _layer(self, i: int, x: torch.Tensor, rope: torch.Tensor, mask: torch.Tensor,
               cache: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
               input_pos: Optional[torch.Tensor] = None) -> torch.Tensor:
        sd, p = self.sd, f"layers.{i}."
        b, s, _ = x.shape
        hx = _rms(x, sd[p + "attention_norm.weight"], self.eps)
        qkv = F.linear(hx, sd[p + "attention.wqkv.weight"])
        q, k, v = qkv[..., : self.dim], qkv[..., self.dim: 2 * self.dim], qkv[..., 2 * self.dim:]
        q = _rotate(q.reshape(b, s, self.n_head, self.head_dim), rope).permute(0, 2, 1, 3)
        k = _rotate(k.reshape(b, s, self.n_head, self.head_dim), rope).permute(0, 2, 1, 3)
        v = v.reshape(b, s, self.n_head, self.head_dim).permute(0, 2, 1, 3)
        if cache is not None:
            kc, vc = cache
            kc[:, :, input_pos] = k
            vc[:, :, input_pos] = v
            k, v = kc, vc
        att = _attend(q, k, v, mask)
        h = x + F.linear(att, sd[p + "attention.wo.weight"])
        hf = _rms(h, sd[p + "ffn_norm.weight"], self.eps)
        ff = F.linear(F.silu(F.linear(hf, sd[p + "feed_forward.w1.weight"])) * F.linear(hf, sd[p + "feed_forward.w3.weight"]),
                      sd[p + "feed_forward.w2.weight"])
        return h + ff

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(_rms(h, self.sd["norm.weight"], self.eps), self.sd["output.weight"]).float()

    def _base_mask(self, batch: int, length: int, emb_masks: Optional[torch.Tensor]) -> torch.Tensor:
        """[batch, length, length] bool: tril, first T columns times emb_masks, diagonal forced on."""
        m = torch.tril(torch.ones(length, length, dtype=torch.bool)).unsqueeze(0).repeat(batch, 1, 1)
        if emb_masks is not None:
            m[:, :, : self.T] = m[:, :, : self.T] & emb_masks.bool()[:, None, :]
            m = m | torch.eye(length, dtype=torch.bool)[None]
        return m

    # -- full sequence -------------------------------------------------------------------
    def forward_full(self, cond: torch.Tensor, tokens: torch.Tensor, emb_masks: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Logits [B, T + n, V] at every position for cond + image tokens [B, n] (n may be 0)."""
        h = self.cond_embeddings(cond)
        if tokens.shape[1]:
            h = torch.cat([h, self.sd["tok_embeddings.weight"][tokens.long()]], dim=1)
        s = h.shape[1]
        mask = self._base_mask(h.shape[0], s, emb_masks)[:, None]
        rope = self.table[:s]
        for i in range(self.n_layer):
            h = self._layer(i, h, rope, mask)
        return self._head(h)

    def image_logits(self, cond: torch.Tensor, tokens: torch.Tensor, emb_masks: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Teacher forcing: logits [B, N, V] where entry n predicts tokens[:, n] (upstream training slice)."""
        return self.forward_full(cond, tokens[:, :-1], emb_masks)[:, self.T - 1:]

    # -- incremental decode --------------------------------------------------------------
    def decode_incremental(self, cond: torch.Tensor, tokens: torch.Tensor, emb_masks: Optional[torch.Tensor] = None,
                           dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Prefill + one token per step through a static cache; logits [B, N, V] (entry n predicts token n)."""
        b, n_tok = tokens.shape
        max_len = ((self.T + n_tok + 7) // 8) * 8
        caches = [(torch.zeros(b, self.n_head, max_len, self.head_dim, dtype=dtype),
                   torch.zeros(b, self.n_head, max_len, self.head_dim, dtype=dtype)) for _ in range(self.n_layer)]
        causal = self._base_mask(b, max_len, emb_masks)  # upstream forces the whole diagonal when masked
        out = []

        def step(h: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
            mask = causal[:b, None, input_pos]
            rope = self.table[input_pos]
            for i in range(self.n_layer):
                h = self._layer(i, h, rope, mask, caches[i], input_pos)
            return self._head(h)

        logits = step(self.cond_embeddings(cond), torch.arange(self.T))
        out.append(logits[:, -1])
        for i in range(n_tok - 1):
            h = self.sd["tok_embeddings.weight"][tokens[:, i: i + 1].long()]
            out.append(step(h, torch.tensor([self.T + i]))[:, -1])
        return torch.stack(out, dim=1)
