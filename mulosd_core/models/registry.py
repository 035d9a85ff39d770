"""Detect what a weights file is and build the model it describes.

Shapes determine most of the config (width, depth, vocabulary, classes, caption width,
VQ channel multipliers); the head count is not visible in the shapes, so it comes from
the file's metadata (our safetensors), the official size table by width, or an override.
"""
from __future__ import annotations

import json
import os
import re
from typing import Optional

import torch

from ..config import SamplingConfig
from .checkpoints import CheckpointError, check_and_load, clean_keys, read_checkpoint, torch_pickle
from .latent_upsampler import UPSAMPLER_KIND
from .llamagen import LlamaGenModel
from .llamagen_gpt import GPT_SIZES, GPTConfig, LlamaGenGPT
from .llamagen_vq import VQConfig, VQModel

GPT_MARKER = "tok_embeddings.weight"
VQ_MARKER = "quantize.embedding.weight"
# weight precisions by name, as the loader nodes and the benchmarks offer them (the first is the default)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def detect_kind(sd: dict[str, torch.Tensor]) -> str:
    """'gpt', 'vq' or 'unknown'."""
    if GPT_MARKER in sd and any(k.startswith("layers.") for k in sd):
        return "gpt"
    if VQ_MARKER in sd and any(k.startswith("encoder.") for k in sd):
        return "vq"
    return "unknown"


def _count(sd: dict, pattern: str) -> int:
    rx = re.compile(pattern)
    return len({m.group(1) for k in sd if (m := rx.match(k))})


def _meta_config(meta: dict[str, str]) -> dict:
    raw = meta.get("mulosd_config")
    return json.loads(raw) if raw else {}


def infer_gpt_config(sd: dict[str, torch.Tensor], meta: Optional[dict] = None, size: Optional[str] = None,
                     **overrides) -> GPTConfig:
    vocab, dim = sd[GPT_MARKER].shape
    n_layer = _count(sd, r"layers\.(\d+)\.")
    kw: dict = dict(dim=dim, n_layer=n_layer, vocab_size=vocab)
    if "cls_embedding.embedding_table.weight" in sd:
        kw.update(model_type="c2i", num_classes=sd["cls_embedding.embedding_table.weight"].shape[0] - 1, cls_token_num=1)
    elif "cls_embedding.cap_proj.fc1.weight" in sd:
        kw.update(model_type="t2i", caption_dim=sd["cls_embedding.cap_proj.fc1.weight"].shape[1],
                  cls_token_num=sd["cls_embedding.uncond_embedding"].shape[0] if "cls_embedding.uncond_embedding" in sd else 120)
    else:
        raise CheckpointError("GPT weights have neither a class embedding nor a caption projection")
    stored = _meta_config(meta or {})
    if stored.get("n_head"):
        kw["n_head"] = stored["n_head"]
        kw["name"] = stored.get("name", "custom")
    elif size is not None:
        if size not in GPT_SIZES:
            raise ValueError(f"unknown LlamaGen size {size!r}; expected one of {sorted(GPT_SIZES)}")
        n_layer_s, n_head_s, dim_s = GPT_SIZES[size]
        if (n_layer_s, dim_s) != (n_layer, dim):
            raise CheckpointError(f"weights have {n_layer} layers of width {dim}, but size {size} has {n_layer_s} of width {dim_s}")
        kw.update(n_head=n_head_s, name=size)
    else:
        matches = [name for name, (l, h, d) in GPT_SIZES.items() if (l, d) == (n_layer, dim)]
        if not matches and "n_head" not in overrides:
            raise CheckpointError(
                f"cannot tell the head count of a GPT with {n_layer} layers of width {dim}: name its size or pass n_head")
        if matches:
            kw.update(n_head=GPT_SIZES[matches[0]][1], name=matches[0])
    # settings the shapes cannot tell apart: our own files record them (the FFN width is checked below)
    kw.update({k: stored[k] for k in ("multiple_of", "ffn_dim_multiplier", "norm_eps", "rope_base", "class_dropout_prob")
               if k in stored})
    kw.update({k: v for k, v in overrides.items() if v is not None})
    cfg = GPTConfig(**kw)
    qkv_rows = sd["layers.0.attention.wqkv.weight"].shape[0]
    kv = (qkv_rows // cfg.head_dim - cfg.n_head) // 2
    if kv != cfg.n_head:
        cfg.n_kv_head = kv
    hidden = sd["layers.0.feed_forward.w1.weight"].shape[0]
    if hidden != cfg.ffn_hidden:
        cfg.ffn_hidden_dim = hidden
    return cfg


def infer_vq_config(sd: dict[str, torch.Tensor], meta: Optional[dict] = None, **overrides) -> VQConfig:
    n_codes, edim = sd[VQ_MARKER].shape
    ch = sd["encoder.conv_in.weight"].shape[0]
    levels = _count(sd, r"encoder\.conv_blocks\.(\d+)\.")
    enc_mult = [sd[f"encoder.conv_blocks.{l}.res.0.conv1.weight"].shape[0] // ch for l in range(levels)]
    dec_levels = _count(sd, r"decoder\.conv_blocks\.(\d+)\.")
    dec_mult = [sd[f"decoder.conv_blocks.{j}.res.0.conv1.weight"].shape[0] // ch for j in range(dec_levels)][::-1]
    kw: dict = dict(codebook_size=n_codes, codebook_embed_dim=edim, ch=ch, encoder_ch_mult=enc_mult, decoder_ch_mult=dec_mult,
                    z_channels=sd["encoder.conv_out.weight"].shape[0],
                    num_res_blocks=_count(sd, r"encoder\.conv_blocks\.0\.res\.(\d+)\."),
                    codebook_show_usage="quantize.codebook_used" in sd)
    stored = _meta_config(meta or {})
    for key in ("codebook_l2_norm", "norm_groups"):
        if key in stored:
            kw[key] = stored[key]
    kw.update({k: v for k, v in overrides.items() if v is not None})
    return VQConfig(**kw)


# What a weights file can be (file_kind), in words, and what a loader of each wanted kind asks for instead.
CLASSIFIER_FORMAT = "mulosd-pattern-classifier"   # the "format" metadata of train.classifier's files
KINDS = {"gpt": "a LlamaGen GPT", "vq": "a VQ tokenizer",
         "upsampler": "a learned upsampler (read by the upsampler of kind 'learned', not by a model loader)",
         "classifier": "an image classifier (the embedded family's evaluation model, not a generator)",
         "other": "neither a LlamaGen GPT nor a VQ tokenizer"}
WANTED = {"gpt": "a LlamaGen GPT file (e.g. c2i_XL_384.pt as released, or the embedded target.safetensors)",
          "vq": "the VQ tokenizer file of the GPT (e.g. vq_ds16_c2i.pt as released, or the embedded vq.safetensors)"}


def file_kind(path: str) -> Optional[str]:
    """What a weights file holds, told from its header alone, no tensor read: 'gpt', 'vq', 'upsampler',
    'classifier' or 'other' (a readable header of none of these). The header is a safetensors file's JSON
    (tensor names, metadata) or the pickle of a PyTorch archive (searched for the names, never unpickled).
    None when the header cannot tell (a missing, damaged or legacy file): the full load says what is wrong."""
    if path.endswith(".safetensors"):
        try:
            names, meta = read_safetensors_meta(path)
        except CheckpointError:
            return None
        if meta.get("kind") == UPSAMPLER_KIND:
            return "upsampler"
        if meta.get("format") == CLASSIFIER_FORMAT:
            return "classifier"
        kind = detect_kind(clean_keys(dict.fromkeys(names)))
        return "other" if kind == "unknown" else kind
    pickled = torch_pickle(path)
    if pickled is None:
        return None
    for kind, markers in (("gpt", (GPT_MARKER, "layers.")), ("vq", (VQ_MARKER, "encoder."))):
        if all(m.encode() in pickled for m in markers):
            return kind
    return "other"


def check_file(path: str, want: str, shown: Optional[str] = None) -> Optional[str]:
    """What is wrong with `path` as a `want` file ('gpt' or 'vq') before its weights are read: no such file,
    or a header of another kind (file_kind). None when nothing is known to be wrong. The message names the
    file as `shown` (the path by default; the nodes show it relative to their model folder)."""
    shown = shown or path
    if not os.path.isfile(path):
        return f"{shown}: no such file; check the path (expected {WANTED[want]})"
    kind = file_kind(path)
    if kind is None or kind == want:
        return None
    return f"{shown} is {KINDS[kind]}, not {KINDS[want]}; choose {WANTED[want]}"


def check_model_files(gpt_path: str, vq_path: Optional[str], inputs: tuple[str, str] = ("gpt_path", "vq_path"),
                      shown: tuple[Optional[str], Optional[str]] = (None, None)) -> None:
    """Raise one CheckpointError naming every problem check_file finds with the GPT and the VQ file (`vq_path`
    None: not checked), each after the input it belongs to (`inputs`)."""
    problems = [f"{name}: {problem}" for name, path, want, label in zip(inputs, (gpt_path, vq_path), ("gpt", "vq"), shown)
                if path is not None and (problem := check_file(path, want, label))]
    if problems:
        raise CheckpointError("; ".join(problems))


def _expect(kind: str, want: str, path: str) -> None:
    if kind == want:
        return
    if kind == "unknown":   # name the pack's other files (upsampler, classifier) by their metadata
        kind = file_kind(path) or "other"
    raise CheckpointError(f"{path}: expected {KINDS[want]} checkpoint, but this file is {KINDS.get(kind, KINDS['other'])}")


def load_gpt(path: str, size: Optional[str] = None, key: Optional[str] = None, dtype: torch.dtype = torch.float32,
             device: str | torch.device = "cpu", **overrides) -> LlamaGenGPT:
    """Load a LlamaGen GPT file (safetensors or nested .pt) with its config inferred from the weights."""
    sd, meta = read_checkpoint(path, key)
    _expect(detect_kind(sd), "gpt", path)
    try:
        cfg = infer_gpt_config(sd, meta, size, **overrides)
    except CheckpointError as e:
        raise CheckpointError(f"{path}: {e}") from None
    with torch.device("meta"):
        model = LlamaGenGPT(cfg)
    model = model.to_empty(device="cpu")
    if cfg.model_type == "t2i" and "cls_embedding.uncond_embedding" not in sd:
        raise CheckpointError(f"{path}: t2i GPT lacks cls_embedding.uncond_embedding (the null caption)")
    check_and_load(model, sd, path, f"LlamaGen {cfg.name} {cfg.model_type} GPT")
    return model.to(device=device, dtype=dtype).eval()


def load_vq(path: str, key: Optional[str] = None, device: str | torch.device = "cpu", **overrides) -> VQModel:
    """Load a LlamaGen VQ tokenizer file; it stays in float32 as upstream."""
    sd, meta = read_checkpoint(path, key)
    _expect(detect_kind(sd), "vq", path)
    cfg = infer_vq_config(sd, meta, **overrides)
    with torch.device("meta"):
        model = VQModel(cfg)
    model = model.to_empty(device="cpu")
    check_and_load(model, sd, path, "VQ tokenizer")
    return model.to(device).eval()


def describe(path: str) -> dict:
    """What a file is, for UIs: kind plus the inferred config (no model is built)."""
    sd, meta = read_checkpoint(path)
    kind = detect_kind(sd)
    if kind == "gpt":
        return {"kind": kind, **infer_gpt_config(sd, meta).to_dict()}
    if kind == "vq":
        return {"kind": kind, **infer_vq_config(sd, meta).to_dict()}
    return {"kind": kind}


EMBEDDED_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "models", "embedded")
# The shipped families: the default one (scenes) at the top of models/embedded, the others in sub-folders.
# scenes128 is the scenes family's 128 px member (a 32 x 32 target with the same VQ and classifier, and the
# upsamplers from the 64 px target, r = 2, and from the 8 x 8 drafter, r = 4): docs/DESIGN.md section 3.8.
EMBEDDED_FAMILIES = {"scenes": EMBEDDED_DIR, "patterns": os.path.join(EMBEDDED_DIR, "patterns"),
                     "scenes128": os.path.join(EMBEDDED_DIR, "scenes128")}
DEFAULT_EMBEDDED_FAMILY = "scenes"
EMBEDDED_MEMBERS = {"target": "target.safetensors", "drafter": "drafter.safetensors",
                    "self_target": "self_target.safetensors",   # scenes only: trained at its grid and at half
                    "sd_drafter": "sd_drafter.safetensors", "vq": "vq.safetensors",
                    "upsampler": "upsampler.safetensors", "classifier": "classifier.safetensors",
                    "upsampler_r4": "upsampler_r4.safetensors"}   # scenes128 only: from the 8 x 8 drafter


def embedded_dir(family: str = DEFAULT_EMBEDDED_FAMILY) -> str:
    """The folder of a shipped embedded family ('scenes', the default, or 'patterns')."""
    if family not in EMBEDDED_FAMILIES:
        raise ValueError(f"family: unknown embedded family {family!r}; expected one of {sorted(EMBEDDED_FAMILIES)}")
    return EMBEDDED_FAMILIES[family]


def embedded_path(member: str, family: str = DEFAULT_EMBEDDED_FAMILY) -> str:
    """Path of a shipped embedded-family file ('target', 'drafter', 'sd_drafter', 'vq', 'upsampler', 'classifier')."""
    if member not in EMBEDDED_MEMBERS:
        raise ValueError(f"unknown embedded model {member!r}; expected one of {sorted(EMBEDDED_MEMBERS)}")
    path = os.path.join(embedded_dir(family), EMBEDDED_MEMBERS[member])
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: the embedded model is missing; train it with "
                                f"`python -m mulosd_core.train.family --family {family}` or reinstall the pack")
    return path


def stored_image_size(path: str) -> Optional[int]:
    """The image size a GPT file was trained at, when its metadata says (our safetensors do)."""
    if not path.endswith(".safetensors"):
        return None
    _, meta = read_safetensors_meta(path)
    return _meta_config(meta).get("image_size")


def read_safetensors_meta(path: str) -> tuple[list[str], dict]:
    from safetensors import safe_open

    try:
        with safe_open(path, framework="pt", device="cpu") as f:
            return list(f.keys()), dict(f.metadata() or {})
    except Exception as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({type(e).__name__}: {e})") from None


# The sampling a model was trained for travels with it (ar.model_sampling uses it when a caller passes
# sampling=None). Where it comes from, first found wins:
#   1. the weights file's safetensors metadata key "mulosd_sampling" (a JSON object),
#   2. the "sampling" object of the family card, the family.json in the same folder as the weights file,
#   3. LlamaGen's published sampling for the model's kind (the defaults of its sample_c2i.py and
#      sample_t2i.py), for released checkpoints that carry neither.
# Either object holds SamplingConfig fields (cfg_scale, temperature, top_k, top_p); missing ones take
# SamplingConfig's defaults, unknown ones are an error naming the file.
SAMPLING_META_KEY = "mulosd_sampling"
FAMILY_CARD = "family.json"
LLAMAGEN_SAMPLING = {"c2i": SamplingConfig(cfg_scale=4.0, temperature=1.0, top_k=2000, top_p=1.0),
                     "t2i": SamplingConfig(cfg_scale=7.5, temperature=1.0, top_k=1000, top_p=1.0)}


def parse_sampling(raw, where: str) -> SamplingConfig:
    """A SamplingConfig from a card's JSON object; errors name `where` (file and key)."""
    if not isinstance(raw, dict):
        raise CheckpointError(f"{where}: expected an object of sampling settings, got {type(raw).__name__}")
    fields = set(SamplingConfig.__dataclass_fields__)
    unknown = sorted(set(raw) - fields)
    if unknown:
        raise CheckpointError(f"{where}: unknown sampling setting(s) {unknown}; expected some of {sorted(fields)}")
    try:
        return SamplingConfig(**raw)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: {e}") from None


def card_sampling(gpt_path: str) -> tuple[Optional[SamplingConfig], str]:
    """The sampling recorded for a GPT file (its metadata, then its folder's family card) and where it was
    found, or (None, "") when neither records one."""
    if gpt_path.endswith(".safetensors"):
        _, meta = read_safetensors_meta(gpt_path)
        if SAMPLING_META_KEY in meta:
            where = f"{gpt_path} (metadata {SAMPLING_META_KEY})"
            try:
                raw = json.loads(meta[SAMPLING_META_KEY])
            except json.JSONDecodeError as e:
                raise CheckpointError(f"{where}: not JSON ({e})") from None
            return parse_sampling(raw, where), where
    data, card = _card_beside(gpt_path)
    if "sampling" in data:
        return parse_sampling(data["sampling"], f"{card} (key sampling)"), card
    return None, ""


# A checkpoint trained to draft for itself (train.family's low_share, with low_layers for an early exit)
# records how in its safetensors metadata: {"grid": the low grid, "layers": the blocks it exits after}.
# models.llamagen.self_drafter follows it; checkpoints without it self-draft at half the grid, all blocks.
SELF_DRAFT_META_KEY = "mulosd_self_draft"


def stored_self_draft(gpt_path: str, n_layer: int) -> Optional[tuple[int, int]]:
    """(grid, blocks) a GPT file records for drafting for itself, None when it records nothing."""
    if not gpt_path.endswith(".safetensors"):
        return None
    _, meta = read_safetensors_meta(gpt_path)
    if SELF_DRAFT_META_KEY not in meta:
        return None
    where = f"{gpt_path} (metadata {SELF_DRAFT_META_KEY})"
    try:
        raw = json.loads(meta[SELF_DRAFT_META_KEY])
        grid, layers = int(raw["grid"]), int(raw["layers"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{where}: expected an object with whole numbers grid and layers ({type(e).__name__}: {e})") from None
    if grid < 1 or not 1 <= layers <= n_layer:
        raise CheckpointError(f"{where}: grid must be >= 1 and layers 1..{n_layer}, got grid {grid}, layers {layers}")
    return grid, layers


def family_card(folder: str) -> tuple[dict, str]:
    """The family card (family.json) of a model folder, as a dict ({} without one), and its path. The one
    reader of family cards: the loaders (card_sampling, card_family), the evaluation and the training."""
    card = os.path.join(folder, FAMILY_CARD)
    if not os.path.isfile(card):
        return {}, card
    try:
        with open(card, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{card}: the family card is not readable JSON ({e})") from None
    return (data if isinstance(data, dict) else {}), card


def _card_beside(gpt_path: str) -> tuple[dict, str]:
    return family_card(os.path.dirname(os.path.abspath(gpt_path)))


def card_family(gpt_path: str) -> Optional[str]:
    """The embedded data family the family card beside a GPT file names ("data_family"), None without one."""
    family = _card_beside(gpt_path)[0].get("data_family")
    return family if isinstance(family, str) else None


def load_model(gpt_path: str, vq_path: str, image_size: Optional[int] = None, dtype: torch.dtype = torch.float32,
               device: str | torch.device = "cpu", name: Optional[str] = None, vq: Optional[VQModel] = None,
               sampling: Optional[SamplingConfig] = None, **overrides) -> LlamaGenModel:
    """A LlamaGen model behind the protocol: GPT + VQ files and the image size to generate at.

    The model's `default_sampling` is `sampling` when given, else what its card records (card_sampling),
    else LlamaGen's published sampling for its kind; `sampling_source` says which.
    """
    check_model_files(gpt_path, vq_path if vq is None else None)   # a missing or wrong file first, then its size
    size = image_size or stored_image_size(gpt_path)
    if size is None:
        raise ValueError(f"image_size: {gpt_path} does not record the image size it generates at; pass image_size "
                         "(e.g. 256, 384, 512)")
    gpt = load_gpt(gpt_path, dtype=dtype, device=device, **overrides)
    vq = vq if vq is not None else load_vq(vq_path, device=device)
    model = LlamaGenModel(gpt, vq, int(size), name=name or os.path.splitext(os.path.basename(gpt_path))[0])
    if sampling is not None:
        model.default_sampling, model.sampling_source = sampling, "given to load_model"
    else:
        found, where = card_sampling(gpt_path)
        if found is not None:
            model.default_sampling, model.sampling_source = found, where
        else:
            model.default_sampling = LLAMAGEN_SAMPLING[model.model_type]
            model.sampling_source = f"LlamaGen's published {model.model_type} sampling (no card)"
    model.family = card_family(gpt_path)
    model.self_draft = stored_self_draft(gpt_path, gpt.config.n_layer)
    return model


def load_embedded(member: str = "target", dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                  vq: Optional[VQModel] = None, family: str = DEFAULT_EMBEDDED_FAMILY) -> LlamaGenModel:
    """One member of a shipped embedded family (scenes by default), sharing `vq` when given."""
    prefix = "embedded" if family == DEFAULT_EMBEDDED_FAMILY else f"embedded-{family}"
    return load_model(embedded_path(member, family), embedded_path("vq", family), dtype=dtype, device=device,
                      name=f"{prefix}-{member}", vq=vq)
