"""A model family written from models/protocol.py alone runs every method of the engine.

`ToyModel` is a one-layer attention model over a colour-palette tokenizer: no LlamaGen or Janus
code, only the members ImageARModel declares (and private helpers). AR, ZipAR, SJD, GSD, SD,
LANTERN and MuLo-SD (presets.method_presets) run through decode.generate on it, a recorder checks
that generate reads nothing the protocol does not declare, and greedy SD reproduces AR token for
token (the cache, truncation and slots behave as the protocol says).
"""
from __future__ import annotations

import hashlib
from typing import Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mulosd_core.decode import MethodConfig, generate
from mulosd_core.models.kv_cache import KVCache, round_up
from mulosd_core.models.protocol import ConditionRows, ImageARModel
from mulosd_core.presets import method_presets
from mulosd_core.sampling import SamplingConfig

DOWNSAMPLE = 4
VOCAB = 24
CLASSES = 5


def protocol_members() -> set[str]:
    return set(ImageARModel.__annotations__) | {n for n in vars(ImageARModel) if not n.startswith("_")}


class _Net(nn.Module):
    """Token and class embeddings, a position embedding per cache slot, one attention layer, a head."""

    def __init__(self, dim: int, max_len: int, seed: int) -> None:
        super().__init__()
        self.tok, self.cls, self.pos = nn.Embedding(VOCAB, dim), nn.Embedding(CLASSES + 1, dim), nn.Embedding(max_len, dim)
        self.qkv, self.head = nn.Linear(dim, 3 * dim), nn.Linear(dim, VOCAB)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.8)


class ToyModel:
    """An ImageARModel adapter built from the protocol alone: c2i, condition length 1, grid x grid tokens."""

    model_type = "c2i"
    num_classes = CLASSES
    caption_dim = 0
    cond_len = 1
    vocab_size = VOCAB

    def __init__(self, grid: int, palette: torch.Tensor, seed: int, dim: int = 16, name: str = "toy") -> None:
        self.name, self.grid, self.image_size = name, grid, grid * DOWNSAMPLE
        self.family: Optional[str] = None
        self.default_sampling: Optional[SamplingConfig] = None
        self.streamer = None
        self._palette = palette                       # [V, 3] colours: the codebook
        self._max_len = round_up(self.cond_len + grid * grid, 8)
        self._net = _Net(dim, self._max_len, seed).eval()

    @property
    def num_tokens(self) -> int:
        return self.grid * self.grid

    @property
    def device(self) -> torch.device:
        return self._net.head.weight.device

    # -- condition and forward
    def condition_rows(self, cond, cfg: bool, mask: Optional[torch.Tensor] = None) -> ConditionRows:
        ids = torch.as_tensor(cond, dtype=torch.long).reshape(-1)
        if cfg:
            ids = torch.cat([ids, torch.full_like(ids, CLASSES)])   # the null class
        return ConditionRows(self._net.cls(ids)[:, None])

    def format_prompt(self, prompt: str) -> list[int]:
        raise ValueError(f"prompt: {self.name} takes class ids, not text")

    def new_cache(self, rows: int) -> KVCache:
        return KVCache(1, rows, 1, self._max_len, self._net.tok.embedding_dim, torch.float32, self.device)

    def cache_bytes(self, rows: int) -> int:
        return KVCache.bytes_for(1, rows, 1, self._max_len, self._net.tok.embedding_dim, torch.float32)

    def _run(self, h: torch.Tensor, slots: torch.Tensor, cache: KVCache) -> torch.Tensor:
        h = h + self._net.pos(slots)
        q, k, v = self._net.qkv(h).chunk(3, -1)
        cache.k[0][:, 0, slots], cache.v[0][:, 0, slots] = k, v
        cache.mark(slots)
        att = F.scaled_dot_product_attention(q[:, None], cache.k[0], cache.v[0], attn_mask=cache.attention_mask(slots))
        return self._net.head(h + att[:, 0]).float()

    def prefill(self, cond: ConditionRows, cache: KVCache) -> torch.Tensor:
        return self._run(cond.embeddings, torch.arange(self.cond_len), cache)[:, -1]

    def forward_tokens(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                       fed_at: Optional[torch.Tensor] = None) -> torch.Tensor:
        slots = (positions if fed_at is None else fed_at) + self.cond_len
        return self._run(self._net.tok(tokens), slots, cache)

    def truncate(self, cache: KVCache, image_length: int) -> None:
        cache.truncate(self.cond_len + image_length)

    # -- tokenizer: one palette colour per DOWNSAMPLE x DOWNSAMPLE patch
    def codebook(self) -> torch.Tensor:
        return self._palette

    def raw_codebook(self) -> torch.Tensor:
        return self._palette

    def codebook_id(self) -> str:
        return hashlib.sha1(self._palette.numpy().tobytes()).hexdigest()[:16]

    def nearest_codes(self, latent: torch.Tensor) -> torch.Tensor:
        z = latent.permute(0, 2, 3, 1)                               # [B, h, w, 3]
        return torch.cdist(z.reshape(z.shape[0], -1, 3), self._palette[None].expand(z.shape[0], -1, -1)).argmin(-1)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        return self.nearest_codes(F.avg_pool2d(images.float(), DOWNSAMPLE))

    def code_latent(self, tokens: torch.Tensor, rows: int) -> torch.Tensor:
        return self._palette[tokens.reshape(-1, rows, self.grid).long()].permute(0, 3, 1, 2)

    def decode_rows(self, tokens: torch.Tensor, rows: int) -> torch.Tensor:
        z = self.code_latent(tokens, rows)
        return z.repeat_interleave(DOWNSAMPLE, 2).repeat_interleave(DOWNSAMPLE, 3)

    def decode(self, tokens: torch.Tensor, rows: Optional[int] = None) -> torch.Tensor:
        rows = self.grid if rows is None else rows
        return self.decode_rows(tokens[:, : rows * self.grid], rows)

    def decoder_channels(self) -> tuple[int, ...]:
        return ()

    # -- weights
    def weight_blocks(self) -> list[nn.Module]:
        return [self._net.qkv]

    def weights_module(self) -> nn.Module:
        return self._net

    def describe(self, tokenizer: str = "") -> str:
        return f"toy c2i model, grid {self.grid}x{self.grid}, palette of {VOCAB} colours"


class Recorder:
    """Passes everything through to a model and records which members were read."""

    def __init__(self, model) -> None:
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "read", set())

    def __getattr__(self, name: str):
        self.read.add(name)
        return getattr(self._model, name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._model, name, value)


@pytest.fixture(scope="module")
def toys():
    palette = torch.rand(VOCAB, 3, generator=torch.Generator().manual_seed(0))
    return {"target": ToyModel(4, palette, seed=1, name="toy-target"),
            "low": ToyModel(2, palette, seed=2, name="toy-drafter"),
            "same": ToyModel(4, palette, seed=3, name="toy-sd-drafter")}


def test_the_toy_is_written_from_the_protocol_alone(toys):
    t = toys["target"]
    assert isinstance(t, ImageARModel)
    public = {n for n in dir(t) if not n.startswith("_")}
    assert public == protocol_members()


METHODS = ["ar", "zipar", "sjd", "gsd", "sd", "lantern", "mulo_islands", "mulo_serial", "mulo_raster",
           "mulo_nearest", "mulo_embedding", "mulo_oracle"]


# MuLo-SD at the paper's settings (family None) and at the shipped ones (scenes: the recheck rounds too)
RUNS = [(n, None) for n in METHODS] + [(n, "scenes") for n in METHODS if n.startswith("mulo")]


@pytest.mark.parametrize("name, family", RUNS)
def test_every_method_runs_through_a_protocol_only_model(toys, name, family):
    cfg, kind = method_presets(family)[name]
    target, drafter = Recorder(toys["target"]), Recorder(toys[kind]) if kind else None
    res = generate(target, torch.tensor([1, 3]), SamplingConfig(cfg_scale=2.0, temperature=1.0), cfg, drafter, seed=5)
    assert res.tokens.shape == (2, 16) and bool(((res.tokens >= 0) & (res.tokens < VOCAB)).all())
    assert res.images.shape == (2, 3, 16, 16) and res.maps.shape == (2, 3, 4, 4)
    assert res.stats.target_calls > 0 and (kind is None or res.stats.drafter_calls > 0)
    read = target.read | (drafter.read if drafter is not None else set())
    undeclared = read - protocol_members()
    assert undeclared == set()


def test_greedy_speculative_decoding_reproduces_ar_token_for_token(toys):
    """With argmax sampling SD's exact test keeps exactly AR's tokens: the toy's cache, slots and truncation
    behave as the protocol says, under the engine's drafting, verification and rejection."""
    greedy = SamplingConfig(cfg_scale=2.0, temperature=0.0)
    cond = torch.tensor([0, 2, 4])
    ar = generate(toys["target"], cond, greedy, MethodConfig(method="ar"), seed=1, decode=False).tokens
    for name in ("sd", "mulo_raster"):
        cfg, kind = method_presets()[name]
        if name == "mulo_raster":   # greedy acceptance with raster rejection: AR exactly, from the low-res drafter
            from dataclasses import replace
            cfg = replace(cfg, verifier=replace(cfg.verifier, rule="greedy"))
        out = generate(toys["target"], cond, greedy, cfg, toys[kind], seed=1, decode=False)
        assert torch.equal(out.tokens, ar), name
