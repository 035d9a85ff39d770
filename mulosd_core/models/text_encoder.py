"""Caption features for LlamaGen t2i from a local FLAN-T5 folder (docs/DESIGN.md section 7.8).

Upstream tokenizes each caption with padding='max_length', max_length=120, truncation and the
special tokens (T5 appends </s>), runs T5EncoderModel and takes last_hidden_state. It then moves
the padding to the front ("left padding", on by default in the sampling scripts): with v valid
tokens, rows are rotated as cat(emb[v:], emb[:v]) so the real tokens sit at the end, the mask is
flipped, and padded rows are zeroed (emb * mask). The GPT masks those rows out (emb_masks).

Caption cleaning: upstream runs `clean_caption` twice (PixArt/DeepFloyd): lower-casing, URL,
HTML (BeautifulSoup), @handle, CJK-range, IP-address, file-name, hashtag/long-number and
"free shipping"-style spam removal, dash and quote normalisation, ftfy fixing and HTML unescaping.
Those rules target web-scraped training captions and need ftfy + bs4; we skip them and only
strip, collapse whitespace and lower-case (upstream lower-cases in every path, with or without
its cleaning). A typed prompt therefore gives the same tokens as upstream unless it contains
the markup, URLs or symbols those rules rewrite.

Nothing is downloaded: the folder must hold a T5 config, weights and tokenizer files.
"""
from __future__ import annotations

import json
import os
import re
from typing import Optional, Sequence

import torch

CAPTION_LENGTH = 120


def clean_caption(text: str, lowercase: bool = True) -> str:
    """Light cleaning: strip, collapse whitespace (newlines and tabs included), lower-case."""
    text = re.sub(r"\s+", " ", str(text)).strip()
    return text.lower() if lowercase else text


def left_pad(emb: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream's left padding of right-padded encoder output.

    emb [B, L, C], mask [B, L] with the valid tokens first -> rows rotated by the valid count
    (real tokens at the end), mask flipped, padded rows zeroed.
    """
    b, length = mask.shape
    valid = mask.long().sum(dim=1)  # [B]
    src = (torch.arange(length, device=mask.device)[None, :] + valid[:, None]) % length  # row i <- emb[(i + v) % L]
    rotated = torch.gather(emb, 1, src[..., None].expand(b, length, emb.shape[-1]))
    new_mask = torch.flip(mask, dims=[-1])
    return rotated * new_mask[..., None].to(rotated.dtype), new_mask


def _transformers_dtype_kwarg() -> str:
    import transformers

    nums = re.findall(r"\d+", transformers.__version__)[:2]
    major, minor = (int(nums[0]), int(nums[1])) if len(nums) == 2 else (0, 0)
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


class T5CaptionEncoder:
    """FLAN-T5 encoder + tokenizer from a local folder; `encode(prompts)` -> (emb [B, L, C], mask [B, L])."""

    def __init__(self, folder: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 max_length: int = CAPTION_LENGTH, lowercase: bool = True) -> None:
        folder = os.fspath(folder)
        self.folder, self.device, self.dtype = folder, torch.device(device), dtype
        self.max_length, self.lowercase = int(max_length), lowercase
        if self.max_length <= 0:
            raise ValueError(f"max_length must be positive, got {max_length}")
        model_type = self._check_folder(folder)
        try:
            from transformers import AutoTokenizer, T5EncoderModel
        except ImportError as e:  # pragma: no cover - transformers is a hard requirement
            raise ImportError(f"the t2i caption encoder needs the 'transformers' package ({e})") from None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except Exception as e:
            raise ValueError(f"{folder}: could not load the T5 tokenizer ({type(e).__name__}: {e})") from None
        try:
            model = T5EncoderModel.from_pretrained(folder, local_files_only=True, **{_transformers_dtype_kwarg(): dtype})
        except Exception as e:
            raise ValueError(f"{folder}: could not load a T5 encoder from this {model_type} folder "
                             f"({type(e).__name__}: {e})") from None
        self.model = model.to(device=self.device, dtype=dtype).eval()
        self.tokenizer.padding_side = "right"  # the rotation below assumes valid tokens first
        if self.tokenizer.pad_token is None:
            raise ValueError(f"{folder}: the tokenizer has no padding token")

    @staticmethod
    def _check_folder(folder: str) -> str:
        if not os.path.isdir(folder):
            raise ValueError(f"{folder}: not a folder (expected a local FLAN-T5 folder with config.json, weights and tokenizer)")
        cfg_path = os.path.join(folder, "config.json")
        if not os.path.isfile(cfg_path):
            raise ValueError(f"{folder}: not a T5 folder: config.json is missing")
        try:
            with open(cfg_path) as f:
                cfg = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"{folder}: not a T5 folder: config.json is unreadable ({e})") from None
        model_type = cfg.get("model_type") if isinstance(cfg, dict) else None
        if model_type not in ("t5", "mt5"):
            raise ValueError(f"{folder}: not a T5 folder: config.json says model_type={model_type!r}, expected 't5'")
        return model_type

    @property
    def dim(self) -> int:
        """Feature width (T5 d_model): the t2i GPT's caption_dim must equal it (2048 for flan-t5-xl)."""
        return int(self.model.config.d_model)

    def clean(self, prompt: str) -> str:
        return clean_caption(prompt, self.lowercase)

    def tokenize(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids [B, L], attention_mask [B, L]) padded on the right to max_length, as upstream."""
        if isinstance(prompts, str) or not isinstance(prompts, Sequence):
            raise TypeError(f"prompts must be a list of strings, got {type(prompts).__name__}")
        if len(prompts) == 0:
            raise ValueError("no prompts given")
        texts = []
        for i, p in enumerate(prompts):
            if not isinstance(p, str):
                raise TypeError(f"prompt {i} is a {type(p).__name__}, not a string")
            text = self.clean(p)
            if not text:
                raise ValueError(f"prompt {i} is empty: a text-to-image model needs a caption "
                                 f"(use the CFG scale, not an empty prompt, for unconditional guidance)")
            texts.append(text)
        tok = self.tokenizer(texts, max_length=self.max_length, padding="max_length", truncation=True,
                             add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
        return tok["input_ids"], tok["attention_mask"]

    def encode(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Caption features [B, max_length, d_model] (model dtype, left-padded, pad rows zero) and mask [B, max_length] (long 0/1)."""
        ids, mask = self.tokenize(prompts)
        ids, mask = ids.to(self.device), mask.to(self.device)
        with torch.inference_mode():
            emb = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        return left_pad(emb, mask)

    __call__ = encode

    def to(self, device: Optional[str | torch.device] = None) -> "T5CaptionEncoder":
        if device is not None:
            self.device = torch.device(device)
            self.model.to(self.device)
        return self
