"""Train the embedded LlamaGen-format family in order: VQ, classifier, target, drafter, SD drafter,
learned upsampler.

    python -m mulosd_core.train.family --preset cpu --device cpu --out outputs/family

The default preset `cpu` trains the shipped architectures on short schedules, in two processes
(`--jobs 2`: the classifier, drafter and SD drafter beside the target), within 80 minutes on a
2-core CPU; `cpu-full` is the longer recipe the shipped weights in models/embedded come from.
Each stage resumes after an interruption (state under --work) and is skipped once its
safetensors and model card exist. Every model is a real LlamaGen-format checkpoint that
the generic loaders read (registry.load_gpt / load_vq).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from ..data.families import DEFAULT_FAMILY, DataFamily, data_family
from ..imageops import resize
from ..models.checkpoints import save_safetensors
from ..models.llamagen_gpt import GPTConfig, LlamaGenGPT
from ..models.llamagen_vq import VQConfig, VQModel
from ..models.registry import SELF_DRAFT_META_KEY
from ..sampling import SamplingConfig
from .common import (COMMAND_ENV, DATA_SEED, PACK_ROOT, Progress, base_folder, cosine_lr, load_resume, reproduce_command,
                     save_resume, write_card)
from .parallel_context import parallel_logits
from .upsampler import UpsamplerStage, own_pairs, train_upsampler

log = logging.getLogger("mulosd.train")


@dataclass
class GPTStage:
    name: str
    grid: int
    dim: int
    n_layer: int
    n_head: int
    steps: int
    batch: int = 32
    lr: float = 1e-3
    pool: int = 0   # images this stage learns from; 0 = the preset's shared pool, more extends its low-grid images
    low_share: float = 0.0   # share of steps at half the grid (the pool's low tokens): a target that can draft for itself
    low_batch: int = 0       # images per step at half the grid (0 = batch); 4 x batch feeds as many tokens as a full step
    low_layers: int = 0      # blocks the half-grid steps run before the head (0 = all): the self-drafter's early exit
    parallel_share: float = 0.0   # share of half-grid steps taught the partial rows parallel drafting shows
    parallel_windows: tuple[int, ...] = (2, 3, 4)   # drafting windows those steps draw from (train.parallel_context)

    def __post_init__(self) -> None:
        if not 0 <= self.low_layers <= self.n_layer or (self.low_layers and not self.low_share):
            raise ValueError(f"stage {self.name}: low_layers must be 0 (all) or 1..{self.n_layer}, and needs low_share "
                             f"> 0; got low_layers={self.low_layers}, low_share={self.low_share}")
        if not 0 <= self.parallel_share <= 1 or (self.parallel_share and not self.low_share) \
                or not self.parallel_windows or min(self.parallel_windows) < 1:
            raise ValueError(f"stage {self.name}: parallel_share must be in [0, 1] and needs low_share > 0, and "
                             f"parallel_windows must be windows >= 1; got parallel_share={self.parallel_share}, "
                             f"low_share={self.low_share}, parallel_windows={self.parallel_windows}")

    @property
    def low_grid_batch(self) -> int:
        """Images per step at half the grid."""
        return self.low_batch or self.batch


@dataclass
class Preset:
    name: str
    data: str = "patterns"   # the data family (mulosd_core.data.families) every member learns
    image_size: int = 64
    vq: VQConfig = field(default_factory=lambda: VQConfig(
        codebook_size=1024, codebook_embed_dim=8, encoder_ch_mult=[1, 2, 2], decoder_ch_mult=[1, 2, 2],
        z_channels=32, ch=16, num_res_blocks=1, norm_groups=8))
    vq_steps: int = 2400
    vq_batch: int = 16
    vq_lr: float = 2e-3
    vq_ae_fraction: float = 0.6   # share of VQ steps spent as a plain autoencoder before quantising
    classifier_steps: int | None = None
    pool: int = 36000
    gpts: list[GPTStage] = field(default_factory=lambda: [
        GPTStage("target", grid=16, dim=96, n_layer=4, n_head=4, steps=6000, batch=16),
        GPTStage("drafter", grid=8, dim=80, n_layer=4, n_head=4, steps=16000, batch=32, pool=108000),
        GPTStage("sd_drafter", grid=16, dim=48, n_layer=2, n_head=2, steps=1000, batch=16),
    ])
    upsamplers: tuple[UpsamplerStage, ...] = (UpsamplerStage(),)
    # A folder whose VQ and classifier this preset reuses (copied into --out) instead of training its own: a
    # larger member of a shipped family shares its tokenizer, so the shipped models can draft for it.
    base: str = ""
    pool_scales: tuple[int, ...] = (2,)   # the pool's lower grids, as divisors of the image: 2 -> "low", 4 -> "low4"
    # Stages that depend only on the VQ and the pool, trained by a second process while this one trains the
    # others (`--jobs 2`): small models use one core far better than two threads share it.
    second_lane: tuple[str, ...] = ("classifier", "drafter", "sd_drafter")
    # The sampling the family's GPTs are meant for: written into family.json, where the loaders read it.
    sampling: dict = field(default_factory=lambda: {"cfg_scale": 1.0, "temperature": 1.0, "top_k": 2, "top_p": 1.0})
    classifier_noise: float = 0.03   # the classifier's augmentation noise (TrainPreset.noise_std)

    @property
    def family(self) -> DataFamily:
        return data_family(self.data)


PATTERNS_PRESETS = {
    # The default: the shipped architectures on shorter schedules and a smaller pool, so that the whole
    # family trains in under 80 minutes on the 2-core CPU (two processes, see `Preset.second_lane`).
    "cpu": Preset("cpu", vq_steps=1600, pool=24000, gpts=[
        GPTStage("target", grid=16, dim=96, n_layer=4, n_head=4, steps=3000, batch=16),
        GPTStage("drafter", grid=8, dim=80, n_layer=4, n_head=4, steps=6000, batch=32, pool=48000),
        GPTStage("sd_drafter", grid=16, dim=48, n_layer=2, n_head=2, steps=1000, batch=16)],
        upsamplers=(UpsamplerStage(steps=1500),)),
    "cpu-full": Preset("cpu-full"),   # the shipped family (models/embedded), about 2.2 h stage by stage
    "gpu": Preset("gpu", vq_steps=6000, vq_batch=64, pool=100000, gpts=[
        GPTStage("target", grid=16, dim=192, n_layer=6, n_head=6, steps=8000, batch=64),
        GPTStage("drafter", grid=8, dim=128, n_layer=4, n_head=4, steps=6000, batch=64),
        GPTStage("sd_drafter", grid=16, dim=64, n_layer=2, n_head=2, steps=4000, batch=64)]),
    "smoke": Preset("smoke", vq=VQConfig(codebook_size=32, codebook_embed_dim=4, encoder_ch_mult=[1, 2, 2],
                                         decoder_ch_mult=[1, 2, 2], z_channels=8, ch=8, num_res_blocks=1, norm_groups=4),
                    vq_steps=2, vq_batch=4, classifier_steps=2, pool=32, gpts=[
                        GPTStage("target", grid=16, dim=32, n_layer=1, n_head=2, steps=2, batch=4),
                        GPTStage("drafter", grid=8, dim=32, n_layer=1, n_head=2, steps=2, batch=4, pool=40),
                        GPTStage("sd_drafter", grid=16, dim=32, n_layer=1, n_head=2, steps=2, batch=4)],
                    upsamplers=(UpsamplerStage(channels=8, layers=1, steps=2, batch=4),
                                UpsamplerStage("upsampler_own", pairs="target", own_images=8, channels=8, layers=1,
                                               steps=2, batch=4, match_images=2))),
}


SCENES_SAMPLING = {"cfg_scale": 1.0, "temperature": 1.0, "top_k": 0, "top_p": 1.0}   # plain sampling, as real models
_SCENES_VQ = VQConfig(codebook_size=1024, codebook_embed_dim=8, encoder_ch_mult=[1, 2, 2], decoder_ch_mult=[1, 2, 2],
                      z_channels=32, ch=16, num_res_blocks=1, norm_groups=8)
SCENES_PRESETS = {
    # The default: fits about an hour on the 2-core CPU. The target is deeper than the drafters (8 layers
    # against 3 and 2) so that, as with the real pair, a target call is the expensive one.
    "cpu": Preset("cpu", data="scenes", vq=_SCENES_VQ, vq_steps=1600, pool=24000, sampling=SCENES_SAMPLING,
                  classifier_steps=500, classifier_noise=0.06, gpts=[
                      GPTStage("target", grid=16, dim=128, n_layer=8, n_head=4, steps=2000, batch=16),
                      GPTStage("drafter", grid=8, dim=96, n_layer=3, n_head=4, steps=5000, batch=32, pool=48000),
                      GPTStage("sd_drafter", grid=16, dim=64, n_layer=2, n_head=2, steps=1200, batch=16),
                      # the target's architecture trained at both grids: it drafts for itself
                      # (LlamaGenModel.at_grid), so MuLo-SD needs no second model. Half of the steps at 8 x 8,
                      # each with 80 images of 64 tokens from the drafter's larger pool, so the low grid sees as
                      # many images as the drafter's 5000 steps of 32: with a quarter of the steps at batch 16
                      # its 8 x 8 samples had FD 12.4 against the drafter's 2.6, and MuLo-SD's images inherit
                      # the drafter's layout. The 8 x 8 steps exit after 5 of the 8 blocks (shared norm and
                      # head), so a self-drafter call costs 5/8 of the target's layers. With 4 blocks and 40%
                      # of 3200 steps at 48 images the exit's samples had FD 2.95 and NLL 4.27 (this recipe:
                      # 2.46 and 4.10; the drafter 2.58 and 3.48). Half of the 8 x 8 steps are taught the partial
                      # rows that parallel drafting at windows 2-4 shows (train.parallel_context): without them,
                      # self-drafting at window 3 gave FD +26% over AR; with them window 2 is within 15%
                      GPTStage("self_target", grid=16, dim=128, n_layer=8, n_head=4, steps=4000, batch=16,
                               low_share=0.5, low_batch=80, low_layers=5, pool=48000, parallel_share=0.5)],
                  upsamplers=(UpsamplerStage(steps=1000),)),
    # The 128 px member (32 x 32 tokens) of the shipped scenes family: same VQ and classifier, drafted by the
    # shipped target at r = 2 and by the shipped drafter at r = 4 (docs/DESIGN.md section 3.8). The target is
    # the 16 x 16 one's architecture; a step of 8 images feeds it twice the tokens of that one's 16, at about
    # 2.3 s a step on one core.
    "cpu-128": Preset("cpu-128", data="scenes", vq=_SCENES_VQ, base="models/embedded", image_size=128, pool=12000,
                      pool_scales=(2, 4), sampling=SCENES_SAMPLING, second_lane=(), gpts=[
                          # 8000 steps, trained in three legs that each resumed the finished one before: 1600 steps
                          # (class accuracy 0.73), 4000 (0.88), 8000. Each resume restarted the cosine where the
                          # longer schedule stands at that step; a fresh run follows one 8000-step cosine
                          GPTStage("target", grid=32, dim=128, n_layer=8, n_head=4, steps=8000, batch=8),
                          # same-resolution drafter for SD and LANTERN at 128 px
                          GPTStage("sd_drafter", grid=32, dim=64, n_layer=2, n_head=2, steps=600, batch=8)],
                      upsamplers=(UpsamplerStage("upsampler", drafter="base:target", steps=400, match_images=200),
                                  UpsamplerStage("upsampler_r4", drafter="base:drafter", low="low4", steps=400,
                                                 match_images=200))),
    "gpu": Preset("gpu", data="scenes", vq=_SCENES_VQ, vq_steps=6000, vq_batch=64, pool=100000, sampling=SCENES_SAMPLING,
                  classifier_noise=0.06, gpts=[
                      GPTStage("target", grid=16, dim=192, n_layer=8, n_head=6, steps=8000, batch=64),
                      GPTStage("drafter", grid=8, dim=128, n_layer=4, n_head=4, steps=6000, batch=64),
                      GPTStage("sd_drafter", grid=16, dim=64, n_layer=2, n_head=2, steps=4000, batch=64),
                      GPTStage("self_target", grid=16, dim=192, n_layer=8, n_head=6, steps=10000, batch=64,
                               low_share=0.25)]),
    "smoke": replace(PATTERNS_PRESETS["smoke"], data="scenes", sampling=SCENES_SAMPLING,
                     gpts=[*PATTERNS_PRESETS["smoke"].gpts,
                           GPTStage("self_target", grid=16, dim=32, n_layer=1, n_head=2, steps=2, batch=4, low_share=0.5,
                                    low_batch=8, pool=40, parallel_share=1.0)]),
}
PRESETS: dict[str, dict[str, Preset]] = {"scenes": SCENES_PRESETS, "patterns": PATTERNS_PRESETS}


def get_preset(family: str, preset: str) -> Preset:
    if family not in PRESETS:
        raise ValueError(f"--family: unknown family {family!r}; expected one of {sorted(PRESETS)}")
    if preset not in PRESETS[family]:
        raise ValueError(f"--preset: unknown preset {preset!r} for family {family!r}; expected one of "
                         f"{sorted(PRESETS[family])}")
    return PRESETS[family][preset]


def _labels(n: int, step: int, seed: int, num_classes: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, num_classes, (n,), generator=g)


# --------------------------------------------------------------------------------------- VQ
def vq_losses(vq: VQModel, images: torch.Tensor, beta: float = 0.25) -> tuple[torch.Tensor, dict, torch.Tensor, torch.Tensor]:
    """Reconstruction + commitment losses with a straight-through estimator.

    The codebook itself is not trained by gradient: `ema_codebook_update` moves each code to
    the running mean of the (normalised) encoder outputs assigned to it, which on a short CPU
    budget is far more robust against codebook collapse than a codebook loss.
    """
    z = vq.encode_latent(images)
    idx = vq.quantize.nearest(z)
    zn = F.normalize(z, dim=1) if vq.quantize.l2_norm else z
    e = vq.quantize.lookup(idx)
    commit = F.mse_loss(zn, e.detach())
    zq = zn + (e - zn).detach()
    recon = vq.decode_latent(zq)
    rec = F.mse_loss(recon, images)
    loss = rec + F.l1_loss(recon, images) * 0.5 + beta * commit
    return loss, {"mse": rec.item(), "commit": commit.item()}, idx, zn.detach()


@torch.no_grad()
def ema_codebook_update(vq: VQModel, idx: torch.Tensor, zn: torch.Tensor, state: dict, decay: float = 0.9) -> None:
    """Online (spherical) k-means step; codes that fall out of use restart on random encoder outputs."""
    n_codes, dim = vq.quantize.embedding.weight.shape
    flat = zn.permute(0, 2, 3, 1).reshape(-1, dim).float()
    i = idx.flatten()
    if "n" not in state:
        state["n"] = torch.ones(n_codes, device=flat.device)
        state["s"] = vq.quantize.codebook().detach().float().clone()
    state["n"].mul_(decay).add_(torch.bincount(i, minlength=n_codes).float(), alpha=1 - decay)
    state["s"].mul_(decay).add_(torch.zeros(n_codes, dim, device=flat.device).index_add_(0, i, flat), alpha=1 - decay)
    w = state["s"] / state["n"].clamp_min(1e-5)[:, None]
    w = F.normalize(w, dim=-1) if vq.quantize.l2_norm else w
    dead = state["n"] < 1e-3
    if bool(dead.any()):
        pick = torch.randint(0, flat.shape[0], (int(dead.sum()),), device=flat.device)
        w[dead] = flat[pick]
        state["s"][dead] = flat[pick]
        state["n"][dead] = 1.0
    vq.quantize.embedding.weight.data.copy_(w)


@torch.no_grad()
def kmeans_codebook_init(vq: VQModel, p: Preset, device: str, iters: int = 15) -> None:
    """Spherical k-means of warmed-up encoder outputs: every code starts where data lives."""
    half = p.image_size // 2
    labels = torch.arange(256) % p.family.num_classes
    images = p.family.keyed_batch(labels, (DATA_SEED, 3), p.image_size).to(device)
    lat = [vq.encode_latent(images), vq.encode_latent(resize(images, half, "area"))]
    x = torch.cat([F.normalize(z, dim=1).permute(0, 2, 3, 1).reshape(-1, z.shape[1]) for z in lat])
    n = vq.quantize.embedding.weight.shape[0]
    g = torch.Generator(device="cpu").manual_seed(DATA_SEED)
    c = x[torch.randperm(len(x), generator=g)[:n].to(x.device)].clone()
    for _ in range(iters):
        idx = (x @ c.t()).argmax(1)
        s = torch.zeros_like(c).index_add_(0, idx, x)
        cnt = torch.bincount(idx, minlength=n)
        empty = cnt == 0
        c = F.normalize(s, dim=1)
        c[empty] = x[torch.randint(0, len(x), (int(empty.sum()),), generator=g).to(x.device)]
    vq.quantize.embedding.weight.data.copy_(c)
    log.info("[vq] k-means codebook from %d latent vectors", len(x))


def train_vq(p: Preset, out: Path, work: Path, device: str) -> VQModel:
    torch.manual_seed(DATA_SEED)
    vq = VQModel(p.vq).to(device)
    params = [t for n, t in vq.named_parameters() if not n.startswith("quantize.")]
    opt = torch.optim.Adam(params, lr=p.vq_lr, betas=(0.9, 0.99))
    start, extra = load_resume(work, "vq", vq, opt)
    ema = {k: extra[k] for k in ("n", "s") if k in extra}
    prog = Progress("vq", p.vq_steps, start)
    vq.train()
    warm = int(p.vq_steps * p.vq_ae_fraction)
    for step in range(start, p.vq_steps):
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, p.vq_steps, p.vq_lr)
        if step == warm and warm > 0 and not ema:
            kmeans_codebook_init(vq, p, device)
        labels = _labels(p.vq_batch, step, DATA_SEED, p.family.num_classes)
        images = p.family.keyed_batch(labels, (DATA_SEED, 1, step), p.image_size).to(device)
        half = p.image_size // 2
        if step % 2:  # the tokenizer also sees the drafter's resolution (downsampled target images)
            images = resize(images, half, "area")
        else:  # a convolutional tokenizer trains on crops at a quarter of the cost
            oy, ox = (int(v) for v in torch.randint(0, half // 4 + 1, (2,), generator=torch.Generator().manual_seed(step)) * 4)
            images = images[..., oy:oy + half, ox:ox + half]
        if step < warm:  # autoencoder warm-up on the normalised latent: no quantisation yet
            zn = F.normalize(vq.encode_latent(images), dim=1)
            recon = vq.decode_latent(zn)
            loss = F.mse_loss(recon, images)
            parts = {"mse": loss.item()}
        else:
            loss, parts, idx, zn = vq_losses(vq, images)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step >= warm:
            ema_codebook_update(vq, idx, zn, ema)
            parts["codes"] = float((ema["n"] > 1e-2).sum())
        prog(step + 1, loss=loss.item(), **parts)
        if (step + 1) % 200 == 0:
            save_resume(work, "vq", vq, opt, step + 1, dict(ema))
    vq.eval()
    used = int((ema["n"] > 1e-2).sum()) if ema else 0
    psnr = vq_psnr(vq, 240, p.image_size, device, family=p.data)
    meta = {"mulosd_config": vq.config.to_dict(), "kind": "vq"}
    save_safetensors(vq.state_dict(), str(out / "vq.safetensors"), meta)
    write_card(out, "vq", {"kind": "vq", "config": vq.config.to_dict(), "steps": p.vq_steps, "data_seed": DATA_SEED,
                            "image_size": p.image_size, "metrics": {"psnr_db": psnr, "codes_used": used},
                            "reproduce": reproduce_command()})
    log.info("[vq] PSNR %.2f dB, %d codes in use", psnr, used)
    return vq


@torch.no_grad()
def vq_psnr(vq: VQModel, n: int, size: int, device: str, seed: int = 777, family: str = "patterns") -> float:
    fam = data_family(family)
    labels = torch.arange(n) % fam.num_classes
    images = fam.keyed_batch(labels, (seed,), size).to(device)
    g = size // vq.downsample
    rec = vq.decode(vq.encode(images), g, g)
    mse = F.mse_loss(rec, images, reduction="none").flatten(1).mean(1)
    return float((10 * torch.log10(1.0 / mse.clamp_min(1e-10))).mean())


# ------------------------------------------------------------------------------------- GPTs
def _pool_images(labels: torch.Tensor, start: int, p: Preset, device: str):
    """The GPT pools' keyed image stream from image `start` on, 256 at a time: image i is the same
    whichever pool asks for it, so an extended pool begins with the shared one."""
    for i in range(start, len(labels), 256):
        yield i, p.family.keyed_batch(labels[i:i + 256], (DATA_SEED, 2, i), p.image_size, p.family.gpt_variation).to(device)


def pool_key(scale: int) -> str:
    """The token pool's key for images `scale` times smaller than the preset's: "low" for half, "low4" for a quarter."""
    return "low" if scale == 2 else f"low{scale}"


@torch.no_grad()
def token_pool(vq: VQModel, p: Preset, work: Path, device: str) -> dict[str, torch.Tensor]:
    """Encode a fixed, class-balanced image pool once at both grids; shared by every GPT stage.

    The GPTs learn the data family's GPT variation (for patterns the grid-aligned one); the
    tokenizer and the classifier were trained on the wider one that contains it.
    """
    path = work / "token_pool.pt"
    meta = {"data": p.data, "variation": p.family.gpt_variation, "pool": p.pool, "image_size": p.image_size, "codebook_size": p.vq.codebook_size,
            **({"scales": list(p.pool_scales)} if p.pool_scales != (2,) else {})}
    if path.exists():
        pool = torch.load(path, map_location="cpu", weights_only=True)
        if pool.get("meta") == meta:
            return pool
        log.info("[pool] %s was built for %s, not %s: encoding it again", path, pool.get("meta"), meta)
    labels = torch.arange(p.pool) % p.family.num_classes
    keys = {"full": 1, **{pool_key(s): s for s in p.pool_scales}}
    parts = {k: [] for k in keys}
    for i, images in _pool_images(labels, 0, p, device):
        for k, s in keys.items():
            parts[k].append(vq.encode(images if s == 1 else resize(images, p.image_size // s, "area")).cpu().to(torch.int16))
        if i % 4096 == 0:
            log.info("[pool] encoded %d/%d images", i, p.pool)
    pool = {"labels": labels, **{k: torch.cat(v) for k, v in parts.items()}, "meta": meta}
    torch.save(pool, path)
    return pool


@torch.no_grad()
def extended_low_pool(vq: VQModel, p: Preset, pool: dict[str, torch.Tensor], size: int, work: Path,
                      device: str) -> dict[str, torch.Tensor]:
    """The shared pool's low-grid tokens extended to `size` images with more of the same keyed stream.

    The small drafter over-fits the shared pool (held-out loss above the training loss), and its
    32 px images are cheap to encode, so it alone learns from a larger pool; the images it shares
    with the other stages are the same ones.
    """
    if size <= p.pool:
        return {"labels": pool["labels"][:size], "low": pool["low"][:size]}
    path = work / f"token_pool_low_{size}.pt"
    meta = {**pool["meta"], "extended_to": size}
    if path.exists():
        ext = torch.load(path, map_location="cpu", weights_only=True)
        if ext.get("meta") == meta:
            return ext
    labels = torch.arange(size) % p.family.num_classes
    low = [pool["low"]]
    for i, images in _pool_images(labels, p.pool, p, device):
        low.append(vq.encode(resize(images, p.image_size // 2, "area")).cpu().to(torch.int16))
        if (i - p.pool) % 4096 == 0:
            log.info("[pool] extending the low-grid pool: %d/%d images", i, size)
    ext = {"labels": labels, "low": torch.cat(low), "meta": meta}
    torch.save(ext, path)
    return ext


def train_gpt(stage: GPTStage, p: Preset, pool: dict[str, torch.Tensor], out: Path, work: Path, device: str) -> LlamaGenGPT:
    cfg = GPTConfig(dim=stage.dim, n_layer=stage.n_layer, n_head=stage.n_head, vocab_size=p.vq.codebook_size,
                    num_classes=p.family.num_classes, multiple_of=32, name=f"embedded-{stage.name}")
    torch.manual_seed(DATA_SEED)
    model = LlamaGenGPT(cfg)
    for m in model.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(m.weight, std=0.02)
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=stage.lr, betas=(0.9, 0.95), weight_decay=0.05)
    start, _ = load_resume(work, stage.name, model, opt)
    tokens = pool["full"] if stage.grid * 4 == p.image_size else pool["low"]
    if stage.low_share and tokens is not pool["full"]:
        raise ValueError(f"stage {stage.name}: low_share needs a full-grid stage (it trains at half its grid too)")
    prog = Progress(stage.name, stage.steps, start)
    loss_ema = None
    for step in range(start, stage.steps):
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, stage.steps, stage.lr)
        gen = torch.Generator().manual_seed(DATA_SEED * 7 + step)
        low = stage.low_share > 0 and torch.rand((), generator=gen).item() < stage.low_share
        source, grid = (pool["low"], stage.grid // 2) if low else (tokens, stage.grid)
        batch = stage.low_grid_batch if low else stage.batch
        idx = torch.randint(0, source.shape[0], (batch,), generator=gen)
        x = source[idx].long().to(device)
        y = pool["labels"][idx].clone()
        y[torch.rand(batch, generator=gen) < cfg.class_dropout_prob] = cfg.num_classes  # CFG's null class
        layers = (stage.low_layers or None) if low else None
        if low and stage.parallel_share and torch.rand((), generator=gen).item() < stage.parallel_share:
            window = stage.parallel_windows[int(torch.randint(len(stage.parallel_windows), (), generator=gen))]
            logits = parallel_logits(model, x, y.to(device), grid, window, layers=layers)
        else:
            logits = model(x, y.to(device), grid, layers=layers)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), x.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_ema = loss.item() if loss_ema is None else 0.95 * loss_ema + 0.05 * loss.item()
        prog(step + 1, loss=loss_ema)
        if (step + 1) % 200 == 0:
            save_resume(work, stage.name, model, opt, step + 1, {})
    model.eval()
    meta = {"mulosd_config": {**cfg.to_dict(), "image_size": stage.grid * 4}, "kind": "gpt"}
    if stage.low_share:   # how it drafts for itself (registry.SELF_DRAFT_META_KEY)
        meta[SELF_DRAFT_META_KEY] = {"grid": stage.grid // 2, "layers": stage.low_layers or cfg.n_layer}
    save_safetensors({k: v.half() for k, v in model.state_dict().items()}, str(out / f"{stage.name}.safetensors"), meta)
    write_card(out, stage.name, {"kind": "gpt", "config": cfg.to_dict(), "grid": stage.grid, "image_size": stage.grid * 4,
                                  "steps": stage.steps, "batch": stage.batch, "low_share": stage.low_share, "low_batch": stage.low_grid_batch,
                                  **({"parallel_share": stage.parallel_share, "parallel_windows": list(stage.parallel_windows)}
                                     if stage.parallel_share else {}),
                                  **({"self_draft": meta[SELF_DRAFT_META_KEY]} if stage.low_share else {}), "final_loss": loss_ema, "data_seed": DATA_SEED,
                                  "data_family": p.data, "data_variation": p.family.gpt_variation, "pool_images": int(tokens.shape[0]),
                                  **({"low_pool_images": int(pool["low"].shape[0])} if stage.low_share else {}),
                                  "params": sum(t.numel() for t in model.parameters()), "reproduce": reproduce_command()})
    return model


def _done(out: Path, name: str) -> bool:
    return (out / f"{name}.safetensors").exists() and (out / f"{name}.json").exists()


def stage_names(p: Preset) -> list[str]:
    """Every member after the VQ, in training order (the upsamplers need the target and their drafter)."""
    return ["classifier"] + [s.name for s in p.gpts] + [u.name for u in p.upsamplers]


def copy_base_members(p: Preset, out: Path) -> None:
    """A preset with a base family takes its VQ and classifier as they are: same tokenizer, same judge."""
    import shutil

    for name in ("vq", "classifier"):
        if _done(out, name):
            continue
        for ext in ("safetensors", "json"):
            src = base_folder(p.base) / f"{name}.{ext}"
            if not src.is_file():
                raise FileNotFoundError(f"preset {p.name}: its base family {p.base} has no {src.name}; train that "
                                        f"family first (its card's `reproduce` command)")
            shutil.copyfile(src, out / src.name)
        log.info("%s copied from the base family %s", name, p.base)


def _start_second_lane(family: str, preset: str, names: list[str], out: Path, work: Path, device: str,
                       threads: int) -> subprocess.Popen:
    """The same command for `names` only, in a child process that logs to the same terminal."""
    root = str(PACK_ROOT)
    env = {**os.environ, COMMAND_ENV: reproduce_command(),
           "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "mulosd_core.train.family", "--family", family, "--preset", preset, "--out", str(out), "--work", str(work),
           "--device", device, "--threads", str(threads), "--jobs", "1", "--stages", ",".join(names)]
    log.info("second process trains %s (%d thread%s)", ", ".join(names), threads, "s"[:threads != 1])
    return subprocess.Popen(cmd, env=env)


def _train_members(names: list[str], p: Preset, vq: VQModel, out: Path, work: Path, device: str, t0: float,
                   pool: dict | None) -> dict | None:
    """Train the named members that are missing, in the preset's order; returns the pool it loaded."""
    from .classifier import train_classifier

    if "classifier" in names and not _done(out, "classifier"):
        train_classifier(steps=p.classifier_steps, seed=DATA_SEED, device=device, out_path=str(out / "classifier.safetensors"),
                         family=p.data, noise_std=p.classifier_noise)
        log.info("classifier ready after %.0fs", time.perf_counter() - t0)
    for stage in p.gpts:
        if _done(out, stage.name) or stage.name not in names:
            continue
        pool = pool or token_pool(vq, p, work, device)
        stage_pool = pool
        if stage.pool and stage.pool != p.pool:
            full_grid = stage.grid * 4 == p.image_size
            if full_grid and not stage.low_share:
                raise ValueError(f"stage {stage.name}: only low-grid images can have a pool of their own "
                                 f"(a low-grid stage, or a full-grid stage with low_share)")
            # labels[i] belongs to image i at both grids, so the full-grid images stay the shared pool's
            stage_pool = {**pool, **extended_low_pool(vq, p, pool, stage.pool, work, device)}
        train_gpt(stage, p, stage_pool, out, work, device)
        log.info("%s ready after %.0fs", stage.name, time.perf_counter() - t0)
    from ..models.registry import load_model

    for up in p.upsamplers:
        if up.name not in names or _done(out, up.name):
            continue
        drafter = (base_folder(p.base) / up.drafter.removeprefix("base:") if up.drafter.startswith("base:")
                   else out / up.drafter)
        pair = [load_model(str(path.with_suffix(".safetensors")), "", device=device, vq=vq)
                for path in (out / "target", drafter)]
        if up.pairs == "target":
            pool_up = own_pairs(*pair, SamplingConfig(**p.sampling), up.own_images, work, up.name)
        else:
            pool = pool_up = pool or token_pool(vq, p, work, device)
        train_upsampler(up, *pair, pool_up, out, work, device)
        log.info("%s ready after %.0fs", up.name, time.perf_counter() - t0)
    return pool


def train_family(preset: str, out: str, work: str, device: str, stages: list[str] | None = None,
                 jobs: int = 1, family: str = DEFAULT_FAMILY) -> None:
    """Train every missing member in order.

    `stages` limits the run to some members (the VQ is trained first whenever it is missing).
    With `jobs=2` the preset's `second_lane` runs in a child process on half the threads while
    this one trains the rest; the upsampler, which needs both GPTs, follows on all threads.
    """
    from ..models.registry import family_card, load_vq

    p = get_preset(family, preset)
    if jobs not in (1, 2):
        raise ValueError(f"--jobs: expected 1 or 2 processes, got {jobs}")
    names = stage_names(p)
    unknown = set(stages or ()) - set(names)
    if unknown:
        raise ValueError(f"--stages: unknown stage(s) {sorted(unknown)}; expected some of {names}")
    wanted = [n for n in names if not stages or n in stages]
    out_p, work_p = Path(out), Path(work)
    held, card_path = family_card(str(out_p))
    card = Path(card_path)
    held = held or {"preset": preset, "data_family": family}
    held_family = held.get("data_family", "patterns")
    if (held_family, held.get("preset")) != (family, preset):
        raise ValueError(f"--out: {out} holds a family trained with preset {held.get('preset')!r} on {held_family!r}, "
                         f"not {preset!r} on {family!r}; choose another --out (or that --family/--preset) so the two "
                         f"are not mixed")
    out_p.mkdir(parents=True, exist_ok=True)
    work_p.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if p.base:
        copy_base_members(p, out_p)
    vq = load_vq(str(out_p / "vq.safetensors"), device=device) if _done(out_p, "vq") else train_vq(p, out_p, work_p, device)
    log.info("VQ ready after %.0fs", time.perf_counter() - t0)
    second = [n for n in wanted if n in p.second_lane and not _done(out_p, n)] if jobs == 2 else []
    ups = {u.name for u in p.upsamplers}
    alongside = [n for n in wanted if n not in second and n not in ups and not _done(out_p, n)]
    pool = None
    if second and alongside:   # two processes only when both have something to train
        pool = token_pool(vq, p, work_p, device)   # encoded once, before the child reads it
        threads = torch.get_num_threads()
        lane = max(1, threads // 2)
        child = _start_second_lane(family, preset, second, out_p, work_p, device, lane)
        try:
            torch.set_num_threads(lane)
            pool = _train_members(alongside, p, vq, out_p, work_p, device, t0, pool)
        except BaseException:
            child.terminate()
            child.wait()
            raise
        finally:
            torch.set_num_threads(threads)
        if child.wait() != 0:
            raise RuntimeError(f"the second training process ({', '.join(second)}) failed with exit code "
                               f"{child.returncode}; its log is above. Run the same command again to resume.")
        log.info("both processes done after %.0fs", time.perf_counter() - t0)
    _train_members(wanted, p, vq, out_p, work_p, device, t0, pool)   # what is still missing: all, or the upsamplers
    if card.exists() or not all(_done(out_p, n) for n in ["vq", *names]):
        return   # the card is written once, by the run that completes the family
    card.write_text(json.dumps({
        "preset": preset, "data_family": family, "classes": list(p.family.class_names), "image_size": p.image_size,
        "vq_downsample": p.vq.downsample, "gpt_data_variation": p.family.gpt_variation, "sampling": p.sampling,
        "members": {"vq": "vq.safetensors", "classifier": "classifier.safetensors",
                    **{s.name: f"{s.name}.safetensors" for s in [*p.gpts, *p.upsamplers]}},
        **({"base": p.base} if p.base else {}), "reproduce": reproduce_command()}, indent=2))
    log.info("family trained in %.0fs", time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default=DEFAULT_FAMILY, help=f"data family: one of {sorted(PRESETS)}")
    ap.add_argument("--preset", default="cpu", help="training preset of that family (cpu, gpu, smoke; patterns also "
                                                     "has cpu-full, its shipped recipe)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--out", default="outputs/family", help="where the family goes (models/embedded holds the shipped one)")
    ap.add_argument("--work", default="outputs/train", help="resume state and the encoded token pool")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads in all (0 = default)")
    ap.add_argument("--jobs", type=int, default=2, help="training processes: 2 overlaps the preset's second lane")
    ap.add_argument("--stages", default="",
                    help="comma-separated members to train: classifier, the GPT stages, upsampler (default: all)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    if args.threads:
        torch.set_num_threads(args.threads)
    # Denormal floats (tiny gradients late in training) slow CPU convolutions down many times over.
    torch.set_flush_denormal(True)
    stages = [s for s in args.stages.split(",") if s]
    train_family(args.preset, args.out, args.work, args.device, stages or None, args.jobs, args.family)


if __name__ == "__main__":
    main()
