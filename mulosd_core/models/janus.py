"""The Janus-Pro family behind the model protocol, through transformers' JanusForConditionalGeneration.

Janus-Pro generates a fixed 24 x 24 grid (384 px, VQ downsampling 16), so a Janus drafter and a
Janus target are the r = 1 case (Janus-Pro-1B drafts for Janus-Pro-7B; both share one VQ).

What we take from transformers: the modules (the Llama language model, `generation_embeddings` +
`generation_aligner` to embed image tokens, `generation_head` for image logits, the VQ), the
prompt formatting (the processor's chat template, then the image-start token) and the CFG rows
(the unconditional row is the conditional one with every token but BOS and image-start replaced by
the pad token, as `generate(generation_mode="image")` does). What we add: a static cache written
at explicit slots with a validity mask (kv_cache.KVCache), so the engine may feed image tokens at
any positions in any order, and forget slots by truncation.

Layout of one row: `cond_len` condition slots (the formatted prompt, left-padded; padding slots
stay invalid), then image position i at slot cond_len + i. RoPE positions skip the padding, so a
prompt gives the same logits alone or in a batch.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import SamplingConfig
from .kv_cache import KVCache, round_up
from .protocol import ConditionRows

# DeepSeek's own single-turn format, used when a processor has no chat template.
SFT_FORMAT = "<|User|>: {prompt}\n\n<|Assistant|>:"
DEFAULT_MAX_PROMPT_TOKENS = 256


class JanusCache(KVCache):
    """A KVCache that transformers' attention layers write into.

    Each attention layer calls `update(keys, values, layer_idx, ...)`; we put the new keys and
    values at the slots of the current forward (`slots`) and hand back the whole static cache,
    which the explicit 4D mask restricts to valid slots j <= p.
    """

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.slots: Optional[torch.Tensor] = None
        self.rope_shift: Optional[torch.Tensor] = None  # [R] left-padding length of each row (set by prefill)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs):
        k, v = self.k[layer_idx], self.v[layer_idx]
        k.index_copy_(2, self.slots, key_states.to(k.dtype))
        v.index_copy_(2, self.slots, value_states.to(v.dtype))
        return k, v

    def get_seq_length(self, layer_idx: int = 0) -> int:  # asked by some transformers versions; we pass positions
        return 0


def _is_text(x) -> bool:
    return isinstance(x, str)


class JanusModel:
    """Adapter of a JanusForConditionalGeneration (text prompt -> image tokens) to ImageARModel.

    `processor` (a JanusProcessor) formats text prompts; without it only pre-tokenised prompts
    (ids ending in the image-start token) are accepted. `max_prompt_tokens` is cond_len: every
    formatted prompt is left-padded to it, so image slots are the same for every row.
    """

    model_type = "janus"   # conditioning: a chat-formatted text prompt
    num_classes = 0
    caption_dim = 0

    def __init__(self, hf, processor=None, name: str = "janus", max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS,
                 bos_id: Optional[int] = None, pad_id: Optional[int] = None, boi_id: Optional[int] = None) -> None:
        cfg = hf.config
        vq_cfg, text_cfg = cfg.vq_config, cfg.text_config
        self.hf, self.processor, self.name = hf.eval(), processor, name
        self.lm = hf.model.language_model
        self.vq = hf.model.vqmodel
        self.grid = int(vq_cfg.num_patches)
        n_gen = int(cfg.vision_config.num_image_tokens)
        if self.grid * self.grid != n_gen:
            raise ValueError(f"Janus config: expected num_image_tokens = num_patches^2 = {self.grid ** 2}, got {n_gen}")
        self.downsample = 2 ** (len(vq_cfg.channel_multiplier) - 1)
        self.image_size = self.grid * self.downsample
        self.vocab_size = int(vq_cfg.num_embeddings)
        if max_prompt_tokens < 2:
            raise ValueError(f"max_prompt_tokens: expected at least 2 (BOS and image-start), got {max_prompt_tokens}")
        self.cond_len = int(max_prompt_tokens)
        self.n_layer = int(text_cfg.num_hidden_layers)
        self.n_kv_head = int(getattr(text_cfg, "num_key_value_heads", None) or text_cfg.num_attention_heads)
        self.head_dim = int(getattr(text_cfg, "head_dim", None) or text_cfg.hidden_size // text_cfg.num_attention_heads)
        self.bos_id, self.pad_id, self.boi_id = self._special_ids(bos_id, pad_id, boi_id)
        params = inspect.signature(type(self.lm).forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._pass_cache_position = "cache_position" in params
        self.family: Optional[str] = None                    # not an embedded family: MuLo-SD runs the paper's settings
        self.default_sampling: Optional[SamplingConfig] = None
        self.streamer = None                                 # offload.stream_weights sets it while the blocks stream
        self._codebook_id: Optional[str] = None

    def _special_ids(self, bos, pad, boi) -> tuple[int, int, int]:
        """BOS, pad and image-start ids: given, else where transformers' generate reads them, else the tokenizer."""
        gen = getattr(self.hf, "generation_config", None)
        tok = getattr(self.processor, "tokenizer", self.processor)
        text_cfg = self.hf.config.text_config
        if bos is None:
            bos = next((v for v in (getattr(gen, "bos_token_id", None), text_cfg.bos_token_id,
                                    getattr(tok, "bos_token_id", None)) if v is not None), None)
        if pad is None:
            pad = next((v for v in (getattr(gen, "pad_token_id", None), getattr(tok, "pad_token_id", None),
                                    text_cfg.pad_token_id) if v is not None), None)
        if boi is None:
            boi = (getattr(gen, "generation_kwargs", None) or {}).get("boi_token_id")
            if boi is None and getattr(tok, "boi_token", None) is not None:
                boi = tok.convert_tokens_to_ids(tok.boi_token)
        missing = [n for n, v in (("bos", bos), ("pad", pad), ("image-start (boi)", boi)) if v is None]
        if missing:
            raise ValueError(f"Janus model {self.name!r}: could not find the {', '.join(missing)} token id(s) in its "
                             "generation config or tokenizer; pass them explicitly")
        return int(bos), int(pad), int(boi)

    @property
    def num_tokens(self) -> int:
        return self.grid * self.grid

    @property
    def device(self) -> torch.device:
        return self.hf.model.generation_head.vision_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.hf.model.generation_head.vision_head.weight.dtype

    # -- condition ------------------------------------------------------------------------
    def format_prompt(self, prompt: str) -> list[int]:
        """Token ids of one prompt as Janus-Pro generates images from it: BOS, chat-formatted prompt, image-start."""
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"prompt: expected a non-empty text, got {prompt!r}")
        if self.processor is None:
            raise ValueError(f"prompt: model {self.name!r} was loaded without a processor, so it takes token ids, "
                             f"got the text {prompt!r}")
        p = self.processor
        if getattr(p, "chat_template", None):
            messages = [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
            text = p.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        else:
            text = SFT_FORMAT.format(prompt=prompt.strip())
        ids = p(text=[text], generation_mode="image", return_tensors="pt")["input_ids"][0]
        return [int(i) for i in ids]

    def _sequences(self, cond, mask: Optional[torch.Tensor]) -> list[list[int]]:
        if _is_text(cond):
            raise ValueError(f"prompt: expected a list of prompts (list[str]), got a single str {cond!r}; wrap it in a list")
        if isinstance(cond, torch.Tensor):
            if cond.dim() != 2 or cond.is_floating_point():
                raise ValueError(f"prompt ids: expected integer token ids [B, T], got {cond.dtype} {tuple(cond.shape)}")
            if mask is not None and tuple(mask.shape) != tuple(cond.shape):
                raise ValueError(f"prompt ids mask: expected shape {tuple(cond.shape)} like the ids, got {tuple(mask.shape)}")
            rows = cond.tolist()
            if mask is not None:
                keep = mask.bool().tolist()
                rows = [[t for t, k in zip(r, m) if k] for r, m in zip(rows, keep)]
            seqs = rows
        else:
            cond = list(cond)
            if not cond:
                raise ValueError("prompt: expected at least one prompt, got an empty list")
            seqs = []
            for c in cond:
                if _is_text(c):
                    seqs.append(self.format_prompt(c))
                elif isinstance(c, (list, tuple, torch.Tensor)):
                    seqs.append([int(t) for t in c])
                else:
                    raise ValueError(f"prompt: expected a text or a list of token ids, got {type(c).__name__} {c!r}")
        for s in seqs:
            if not s:
                raise ValueError("prompt ids: expected a non-empty token sequence, got []")
            if s[-1] != self.boi_id:
                raise ValueError(f"prompt ids: expected each prompt to end with the image-start token {self.boi_id} "
                                 f"(format it with the processor, generation_mode='image'), got {s[-1]}")
            if len(s) > self.cond_len:
                raise ValueError(f"prompt: expected at most {self.cond_len} tokens after formatting "
                                 f"(max_prompt_tokens of {self.name!r}), got {len(s)}")
        return seqs

    def condition_rows(self, cond, cfg: bool, mask: Optional[torch.Tensor] = None) -> ConditionRows:
        """Prompts (list[str], or token ids [B, T] / list of id lists, formatted) -> rows [cond; uncond].

        Each sequence is left-padded to cond_len (padding slots invalid). The unconditional row keeps
        BOS and image-start and puts the pad token everywhere else, as transformers' Janus generate does.
        """
        seqs = self._sequences(cond, mask)
        ids = torch.full((len(seqs), self.cond_len), self.pad_id, dtype=torch.long)
        valid = torch.zeros(len(seqs), self.cond_len, dtype=torch.bool)
        for i, s in enumerate(seqs):
            ids[i, self.cond_len - len(s):] = torch.tensor(s)
            valid[i, self.cond_len - len(s):] = True
        if cfg:
            uncond = ids.masked_fill((ids != self.bos_id) & (ids != self.boi_id), self.pad_id)
            ids, valid = torch.cat([ids, uncond]), torch.cat([valid, valid])
        emb = self.lm.get_input_embeddings()(ids.to(self.device))
        return ConditionRows(emb, None if bool(valid.all()) else valid.to(self.device))

    # -- forward --------------------------------------------------------------------------
    def new_cache(self, rows: int) -> JanusCache:
        return JanusCache(self.n_layer, rows, self.n_kv_head, round_up(self.cond_len + self.num_tokens, 8),
                          self.head_dim, self.dtype, self.device)

    def cache_bytes(self, rows: int) -> int:
        """Bytes `new_cache(rows)` allocates (for memory estimates before a run)."""
        return KVCache.bytes_for(self.n_layer, rows, self.n_kv_head, round_up(self.cond_len + self.num_tokens, 8),
                                 self.head_dim, self.dtype)

    def _run(self, h: torch.Tensor, slots: torch.Tensor, cache: JanusCache, key_valid=None) -> torch.Tensor:
        """Embeddings [R, S, C] at cache slots [S] -> image logits [R, S, V] (float32)."""
        cache.mark(slots, key_valid)
        allowed = cache.attention_mask(slots)                       # [R, 1, S, L] bool
        mask = torch.zeros(allowed.shape, dtype=h.dtype, device=h.device)
        mask.masked_fill_(~allowed, torch.finfo(h.dtype).min)      # additive: works for eager and sdpa alike
        pos = (slots[None, :] - cache.rope_shift[:, None]).clamp_min(0)
        cache.slots = slots
        kw = {self._cache_kw: cache}
        if self._pass_cache_position:
            kw["cache_position"] = slots
        out = self.lm(inputs_embeds=h, attention_mask=mask, position_ids=pos, use_cache=True, **kw)
        cache.slots = None
        return self.hf.model.generation_head(out.last_hidden_state).float()

    def prefill(self, cond: ConditionRows, cache: JanusCache) -> torch.Tensor:
        """Logits [R, V] for image token 0 (from the image-start slot, the last condition slot)."""
        R = cond.rows
        if cond.key_valid is None:
            cache.rope_shift = torch.zeros(R, dtype=torch.long, device=self.device)
        else:
            cache.rope_shift = (~cond.key_valid).sum(1).to(self.device)
        slots = torch.arange(self.cond_len, device=self.device)
        return self._run(cond.embeddings, slots, cache, cond.key_valid)[:, -1]

    def forward_tokens(self, tokens: torch.Tensor, positions: torch.Tensor, cache: JanusCache,
                       fed_at: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Feed image tokens [R, n] at image positions [n] (or at `fed_at`, for ZipAR's proxy inputs).

        Returns float32 logits [R, n, V]; entry i predicts the image position after the slot it was fed at.
        """
        slots = (positions if fed_at is None else fed_at).to(self.device) + self.cond_len
        h = self.hf.prepare_embeddings_for_image_generation(tokens.to(self.device))
        return self._run(h, slots, cache)

    def truncate(self, cache: JanusCache, image_length: int) -> None:
        cache.truncate(self.cond_len + image_length)

    # -- tokenizer ------------------------------------------------------------------------
    def codebook(self) -> torch.Tensor:
        """Codebook vectors [V, D] as the decoder uses them (l2-normalised, like get_codebook_entry)."""
        return F.normalize(self.vq.quantize.embedding.weight.detach(), p=2, dim=-1)

    def raw_codebook(self) -> torch.Tensor:
        """Codebook vectors [V, D] as stored (not normalised)."""
        return self.vq.quantize.embedding.weight.detach()

    def codebook_id(self) -> str:
        """Fingerprint of the codebook: drafter and target must share it (Janus-Pro 1B and 7B do)."""
        if self._codebook_id is None:
            data = self.vq.quantize.embedding.weight.detach().float().cpu().numpy().tobytes()
            self._codebook_id = hashlib.sha1(data).hexdigest()[:16]
        return self._codebook_id

    def nearest_codes(self, latent: torch.Tensor) -> torch.Tensor:
        """Token grid [B, h*w] of the nearest codes to latent vectors [B, D, h, w].

        Both sides l2-normalised, as DeepSeek's Janus VQ quantises (transformers' quantizer
        forward compares raw vectors; its decoder, like ours, uses normalised codes).
        """
        z = F.normalize(latent.permute(0, 2, 3, 1).float(), p=2, dim=-1)
        e = self.codebook().float().to(z.device)
        d = z.pow(2).sum(-1, keepdim=True) + e.pow(2).sum(-1) - 2 * z @ e.t()
        return d.argmin(-1).flatten(1)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Token grid [B, h*w] (raster order) of images [B, 3, H, W] in [0, 1]."""
        h, w = images.shape[-2:]
        if h % self.downsample or w % self.downsample:
            raise ValueError(f"images: expected a size that is a multiple of the VQ downsampling {self.downsample}, "
                             f"got {h}x{w}")
        w_conv = self.vq.quant_conv.weight
        x = images.to(w_conv.device, w_conv.dtype) * 2 - 1
        return self.nearest_codes(self.vq.quant_conv(self.vq.encoder(x)))

    def code_latent(self, tokens: torch.Tensor, rows: int) -> torch.Tensor:
        """Codebook vectors [B, D, rows, grid] of a band of token rows (as the decoder uses them).

        Contiguous, as transformers' get_codebook_entry makes it: the permuted view has channels-last
        strides, for which the CPU convolutions pick other kernels that sum in another order (decoded
        pixels then differ from transformers' by 1e-5 to 3e-5, depending on threads and CPU)."""
        cb = self.codebook()
        return cb[tokens.reshape(-1, rows, self.grid).long().to(cb.device)].permute(0, 3, 1, 2).contiguous()

    def decode_rows(self, tokens: torch.Tensor, rows: int) -> torch.Tensor:
        """Images [B, 3, rows*ds, grid*ds] in [0, 1] of a band of `rows` token rows (any band, not only the top)."""
        if tokens.shape[-1] != rows * self.grid:
            raise ValueError(f"tokens: expected {rows} x {self.grid} = {rows * self.grid} per image, got {tokens.shape[-1]}")
        w = self.vq.post_quant_conv.weight
        z = self.code_latent(tokens, rows).to(w.device, w.dtype)
        return ((self.vq.decoder(self.vq.post_quant_conv(z)) + 1) / 2).clamp(0, 1)

    def decode(self, tokens: torch.Tensor, rows: Optional[int] = None) -> torch.Tensor:
        """Images [B, 3, rows*ds, W] in [0, 1] of the first `rows` token rows (all by default)."""
        rows = self.grid if rows is None else rows
        return self.decode_rows(tokens[:, : rows * self.grid], rows)

    def decoder_channels(self) -> tuple[int, ...]:
        """Not known here: the memory estimate counts the VQ's attention terms only for Janus-Pro."""
        return ()

    # -- weights --------------------------------------------------------------------------
    def weight_blocks(self) -> list[nn.Module]:
        return list(self.lm.layers)

    def weights_module(self) -> nn.Module:
        """The whole transformers model (language model, VQ, heads and vision parts)."""
        return self.hf

    def describe(self, tokenizer: str = "") -> str:
        text = self.hf.config.text_config
        return (f"Janus-Pro text-to-image, language model {text.num_hidden_layers} layers x {text.hidden_size}, "
                f"{self.image_size} px, grid {self.grid}x{self.grid}, prompts of up to {self.cond_len} tokens "
                f"(chat-formatted); VQ in the folder (codebook {self.vocab_size}, {self.downsample}x downsampling); "
                f"{str(self.dtype).replace('torch.', '')} on {self.device}")


# ------------------------------------------------------------------------------ loading
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model")


def check_janus_folder(folder: str) -> None:
    """Raise a ValueError naming the folder and what is missing unless it holds a HF-format Janus model."""
    if not os.path.isdir(folder):
        raise ValueError(f"Janus folder {folder!r}: expected a folder with config.json, safetensors weights and "
                         "processor files, got a path that is not a folder")
    names = set(os.listdir(folder))
    missing = []
    if "config.json" not in names:
        missing.append("config.json")
    if not any(n.endswith(".safetensors") for n in names):
        missing.append("safetensors weights (model.safetensors or model-*.safetensors + index)")
    if "tokenizer_config.json" not in names:
        missing.append("tokenizer_config.json")
    if not names.intersection(_TOKENIZER_FILES):
        missing.append("tokenizer.json")
    if missing:
        raise ValueError(f"Janus folder {folder!r}: missing {', '.join(missing)}")
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        try:
            model_type = json.load(f).get("model_type")
        except json.JSONDecodeError as e:
            raise ValueError(f"Janus folder {folder!r}: config.json is not valid JSON ({e})") from None
    if model_type != "janus":
        raise ValueError(f"Janus folder {folder!r}: expected config.json model_type 'janus', got {model_type!r}")


def load_janus(folder: str, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
               name: Optional[str] = None, max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS) -> JanusModel:
    """A JanusModel from a local HuggingFace-format folder (config.json, safetensors, processor files).

    Never downloads (local_files_only=True) and reads weights only from safetensors.
    """
    check_janus_folder(folder)
    try:
        from transformers import JanusForConditionalGeneration, JanusProcessor
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("Janus-Pro needs transformers with Janus support (>= 4.51): pip install -U transformers") from e
    hf = JanusForConditionalGeneration.from_pretrained(folder, local_files_only=True, use_safetensors=True, dtype=dtype)
    processor = JanusProcessor.from_pretrained(folder, local_files_only=True)
    hf = hf.to(device).eval()
    return JanusModel(hf, processor, name=name or os.path.basename(os.path.normpath(folder)),
                      max_prompt_tokens=max_prompt_tokens)

