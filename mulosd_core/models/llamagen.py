"""The LlamaGen family behind the model protocol: a GPT, its VQ tokenizer and an image size."""
from __future__ import annotations

import hashlib
from typing import Optional

import torch
from torch import nn

from ..config import SamplingConfig
from .kv_cache import KVCache
from .llamagen_gpt import LlamaGenGPT
from .llamagen_vq import VQModel
from .protocol import ConditionRows


class LlamaGenModel:
    """Adapter: grid from image size and the tokenizer's downsampling, never from the weights."""

    def __init__(self, gpt: LlamaGenGPT, vq: VQModel, image_size: int, name: str = "llamagen") -> None:
        ds = vq.downsample
        if image_size <= 0 or image_size % ds:
            raise ValueError(f"image_size must be a positive multiple of the tokenizer's downsampling {ds}, got {image_size}")
        if gpt.config.vocab_size != vq.config.codebook_size:
            raise ValueError(f"GPT vocabulary {gpt.config.vocab_size} != VQ codebook size {vq.config.codebook_size}")
        self.gpt, self.vq, self.name = gpt.eval(), vq.eval(), name
        self.image_size = image_size
        self.grid = image_size // ds
        self.vocab_size = gpt.config.vocab_size
        self.cond_len = gpt.cond_len
        self.model_type = gpt.config.model_type
        self.num_classes = gpt.config.num_classes if self.model_type == "c2i" else 0
        self.caption_dim = gpt.config.caption_dim if self.model_type == "t2i" else 0
        self.family: Optional[str] = None   # the embedded family its card names (presets.mulo_defaults); None: real
        self.default_sampling: Optional[SamplingConfig] = None   # set by registry.load_model from the card
        self.streamer = None                 # offload.stream_weights sets it while the GPT's blocks stream
        self.exit_layers: Optional[int] = None   # blocks run before the head (an early-exit view); None: all
        # how the checkpoint was trained to draft for itself, (grid, blocks), from its metadata
        # (registry.SELF_DRAFT_META_KEY); None: not recorded (any released LlamaGen checkpoint)
        self.self_draft: Optional[tuple[int, int]] = None
        self._codebook_id: Optional[str] = None

    def at_grid(self, grid: int, name: Optional[str] = None, layers: Optional[int] = None) -> "LlamaGenModel":
        """The same weights run at another token grid (2D RoPE over the grid makes that possible): the
        self-drafter of MuLo-SD, the target at 1/r of its grid, optionally exiting after its first `layers`
        blocks (shared final norm and head). No weights are copied; each view gets its own KV cache from the
        engine (of `layers` blocks). Quality at a grid or exit the model was not trained for is not guaranteed."""
        if grid < 1:
            raise ValueError(f"grid: expected a positive token grid, got {grid}")
        n_layer = self.num_blocks
        if layers is not None and (isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= n_layer):
            raise ValueError(f"layers: expected a whole number of blocks from 1 to {n_layer} (None: all), got {layers!r}")
        view = LlamaGenModel(self.gpt, self.vq, grid * self.vq.downsample, name=name or f"{self.name}@{grid}")
        view.family, view._codebook_id, view.streamer = self.family, self._codebook_id, self.streamer
        view.exit_layers, view.self_draft = (None if layers == n_layer else layers), self.self_draft
        for attr in ("default_sampling", "sampling_source"):
            if hasattr(self, attr):
                setattr(view, attr, getattr(self, attr))
        return view

    @property
    def num_tokens(self) -> int:
        return self.grid * self.grid

    @property
    def num_blocks(self) -> int:
        """The GPT's transformer blocks, all of them (a view with `exit_layers` runs only the first ones):
        what the Self Drafter node reports without reading the GPT's config."""
        return self.gpt.config.n_layer

    @property
    def device(self) -> torch.device:
        return self.gpt.output.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.gpt.output.weight.dtype

    # -- condition ------------------------------------------------------------------------
    def condition_rows(self, cond, cfg: bool, mask: Optional[torch.Tensor] = None) -> ConditionRows:
        """Class ids [B] (c2i) or caption features [B, T, C] with mask [B, T] (t2i) -> rows [cond; uncond]."""
        if self.model_type == "c2i":
            cond = torch.as_tensor(cond, dtype=torch.long, device=self.device).reshape(-1)
            bad = (cond < 0) | (cond >= self.num_classes)
            if bool(bad.any()):
                raise ValueError(f"class id {int(cond[bad][0])} is outside this model's classes 0..{self.num_classes - 1}")
        else:
            cond = cond.to(self.device)
            # upstream uses T = cond.shape[1] condition positions and slices the embeddings to cls_token_num,
            # so the two must agree (120 for the released models, the T5 max_length)
            if cond.dim() != 3 or cond.shape[1] != self.cond_len or cond.shape[2] != self.caption_dim:
                raise ValueError(f"caption features must be [B, {self.cond_len}, {self.caption_dim}] for this "
                                 f"model, got {tuple(cond.shape)} (encode captions with max_length={self.cond_len})")
            if mask is not None and tuple(mask.shape) != tuple(cond.shape[:2]):
                raise ValueError(f"caption mask must be [B, {self.cond_len}] like the features, got {tuple(mask.shape)}")
        b = cond.shape[0]
        if cfg:
            cond = torch.cat([cond, self.gpt.null_condition(b, self.device)])
            if mask is not None:
                mask = torch.cat([mask, mask])
        emb = self.gpt.embed_condition(cond)
        key_valid = mask.to(self.device, torch.bool) if mask is not None else None
        return ConditionRows(emb, key_valid)

    # -- forward --------------------------------------------------------------------------
    def new_cache(self, rows: int) -> KVCache:
        return self.gpt.new_cache(rows, self.num_tokens, layers=self.exit_layers)

    def cache_bytes(self, rows: int) -> int:
        return self.gpt.cache_bytes(rows, self.num_tokens, layers=self.exit_layers)

    def prefill(self, cond: ConditionRows, cache: KVCache) -> torch.Tensor:
        """Logits [R, V] for image token 0 (from the last condition position)."""
        positions = torch.arange(self.cond_len, device=self.device)
        logits = self.gpt.forward_embeddings(cond.embeddings, positions, self.grid, cache, cond.key_valid,
                                             layers=self.exit_layers)
        return logits[:, -1]

    def forward_tokens(self, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                       fed_at: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Feed image tokens [R, n] at image positions [n] (or at `fed_at`, for ZipAR's proxy inputs).

        Returns float32 logits [R, n, V]; entry i predicts the image position after the slot it was fed at.
        """
        slots = positions if fed_at is None else fed_at
        h = self.gpt.tok_embeddings(tokens)
        return self.gpt.forward_embeddings(h, slots + self.cond_len, self.grid, cache, layers=self.exit_layers)

    def format_prompt(self, prompt: str) -> list[int]:
        raise ValueError(f"prompt: {self.name} is a LlamaGen {self.model_type} model and takes "
                         + ("class ids" if self.model_type == "c2i" else "caption features from a text encoder")
                         + f", not text; got {prompt!r}")

    def truncate(self, cache: KVCache, image_length: int) -> None:
        cache.truncate(self.cond_len + image_length)

    # -- tokenizer ------------------------------------------------------------------------
    def codebook(self) -> torch.Tensor:
        return self.vq.quantize.codebook().detach()

    def raw_codebook(self) -> torch.Tensor:
        """The codebook as stored (LlamaGen's VQ l2-normalises it before use; `codebook` is that)."""
        return self.vq.quantize.embedding.weight.detach()

    def codebook_id(self) -> str:
        """Fingerprint of the codebook: drafter and target must share it (docs/DESIGN.md section 7.1)."""
        if self._codebook_id is None:
            data = self.vq.quantize.embedding.weight.detach().float().cpu().numpy().tobytes()
            self._codebook_id = hashlib.sha1(data).hexdigest()[:16]
        return self._codebook_id

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        return self.vq.encode(images.to(self.vq.quant_conv.weight.device))

    def decode_rows(self, tokens: torch.Tensor, rows: int) -> torch.Tensor:
        """Images [B, 3, rows*ds, grid*ds] of a band of `rows` token rows (any band, not only the top)."""
        return self.vq.decode(tokens.to(self.vq.quant_conv.weight.device), rows, self.grid)

    def code_latent(self, tokens: torch.Tensor, rows: int) -> torch.Tensor:
        """Codebook vectors [B, D, rows, grid] of a band of token rows (as the tokenizer uses them)."""
        return self.vq.quantize.lookup(tokens.reshape(-1, rows, self.grid).long())

    def nearest_codes(self, latent: torch.Tensor) -> torch.Tensor:
        """Token grid [B, h*w] of the nearest codes to latent vectors [B, D, h, w]."""
        return self.vq.quantize.nearest(latent).flatten(1)

    def decode(self, tokens: torch.Tensor, rows: Optional[int] = None) -> torch.Tensor:
        """Images [B, 3, rows*ds, W] in [0, 1] of the first `rows` token rows (all by default)."""
        rows = self.grid if rows is None else rows
        return self.vq.decode(tokens[:, : rows * self.grid].to(self.vq.quant_conv.weight.device), rows, self.grid)

    def decoder_channels(self) -> tuple[int, ...]:
        """Channels at each decoder level, full resolution first (ch x decoder_ch_mult)."""
        return tuple(self.vq.config.ch * m for m in self.vq.config.decoder_ch_mult)

    # -- weights --------------------------------------------------------------------------
    def weight_blocks(self) -> list[nn.Module]:
        return list(self.gpt.layers)

    def weights_module(self) -> nn.Module:
        """The GPT (the VQ tokenizer is shared with the drafter and stays where it is)."""
        return self.gpt

    def describe(self, tokenizer: str = "") -> str:
        cfg = self.gpt.config
        if self.model_type == "c2i":
            kind, cond = "class-to-image (c2i)", f"{self.num_classes} classes"
        else:
            kind, cond = "text-to-image (t2i)", f"{self.cond_len} caption tokens of width {cfg.caption_dim} (T5 features)"
        vq = f"VQ {tokenizer} " if tokenizer else "VQ "
        depth = f"{cfg.n_layer} layers" if self.exit_layers is None else f"first {self.exit_layers} of {cfg.n_layer} layers"
        return (f"LlamaGen {kind} GPT {cfg.name} ({depth} x {cfg.dim}), {self.image_size} px, grid "
                f"{self.grid}x{self.grid}, {cond}; {vq}(codebook {self.vocab_size}, {self.vq.downsample}x downsampling); "
                f"{str(self.dtype).replace('torch.', '')} on {self.device}")


def self_drafter(target, ratio: Optional[int] = None, layers: Optional[int] = None) -> LlamaGenModel:
    """MuLo-SD's drafter as the target itself at 1/`ratio` of its grid: the same weights in memory, its own
    KV cache (LlamaGenModel.at_grid). Any LlamaGen-format target can do it; whether its drafts are good
    depends on training at that grid too (the embedded family's self_target is; released weights are not
    known to be; docs/DESIGN.md section 3.4).

    `ratio` None: the grid the checkpoint was trained to draft at (`target.self_draft`), else 2. `layers`
    None: the early exit it was trained for at that grid, else all blocks; a number overrides it."""
    if not isinstance(target, LlamaGenModel):
        raise ValueError(f"self-drafting needs a LlamaGen-format target (its 2D RoPE runs at a smaller grid); "
                         f"got {getattr(target, 'name', type(target).__name__)!r}, a {getattr(target, 'model_type', '?')} model")
    trained = target.self_draft
    if ratio is None:
        ratio = target.grid // trained[0] if trained and trained[0] and target.grid % trained[0] == 0 else 2
    if isinstance(ratio, bool) or not isinstance(ratio, int) or ratio < 2:
        raise ValueError(f"ratio: expected a whole number >= 2 (the drafter's grid is the target's / ratio), got {ratio!r}")
    if target.grid % ratio:
        raise ValueError(f"ratio: the target's grid {target.grid} is not divisible by {ratio}; choose a divisor of it")
    grid = target.grid // ratio
    if layers is None and trained and trained[0] == grid:
        layers = trained[1]
    n_layer = target.num_blocks
    depth = "" if layers is None or layers == n_layer else f", {layers} of {n_layer} blocks"
    return target.at_grid(grid, name=f"{target.name}@{grid} (self{depth})", layers=layers)
