"""Train the learned upsampler (models/latent_upsampler.py) on the family's token pool.

Pairs are the same images encoded at both resolutions (`family.token_pool`: "low" at the
drafter's grid, "full" at the target's), so the network learns which target tokens lie under
a low-res row. With `pairs="target"` the images are the target's own AR samples instead
(`own_pairs`), so that its q approaches the target's p, which is what the exact test's
acceptance 1 - TV(p, q) asks for. Held-out pairs measure its token match against the pixel
route's, each given only the rows a drafting step has (row-causal): the card records both.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..models.latent_upsampler import LatentUpsampler, LatentUpsamplerConfig, save_latent_upsampler
from ..decode import generate_ar
from ..models.llamagen import LlamaGenModel
from ..sampling import SamplingConfig
from ..upsample import UpsamplerConfig, upsample_rows
from .common import DATA_SEED, Progress, cosine_lr, load_resume, reproduce_command, save_resume, write_card
from .token_stats import low_encoding

log = logging.getLogger("mulosd.train")
HELD_OUT = 1000   # the pool's last pairs, never trained on
PAIRS = ("pool", "target")
OWN_SEED = 900_000   # first AR seed of the target's own training samples (bench.ceiling measures on seeds from 0)


@dataclass
class UpsamplerStage:
    """One learned upsampler of a family preset (train/family.py): which pair it serves, its width, depth
    and schedule. `drafter` is the member whose grid it lifts ("base:<member>" for a member of the preset's
    base family) and `low` the token pool's key at that grid ("low": half the target's grid, "low4": a quarter)."""
    name: str = "upsampler"
    drafter: str = "drafter"
    low: str = "low"
    channels: int = 64
    layers: int = 4
    steps: int = 3000
    batch: int = 64
    lr: float = 3e-3
    match_images: int = HELD_OUT   # held-out pairs the card's token match is measured on (the pixel route is slow at 128 px)
    pairs: str = "pool"            # "pool": the data pool's images; "target": the target's own AR samples (own_pairs)
    own_images: int = 5000         # pairs="target": AR samples drawn (the last HELD_OUT held out)

    def __post_init__(self) -> None:
        if self.pairs not in PAIRS:
            raise ValueError(f"upsampler stage {self.name}: pairs must be one of {PAIRS}, got {self.pairs!r}")


@torch.no_grad()
def own_pairs(target: LlamaGenModel, drafter: LlamaGenModel, sampling: SamplingConfig, images: int, work: Path,
              name: str, batch: int = 50) -> dict[str, torch.Tensor]:
    """(low, full) token pairs of the target's own AR samples, class-balanced, seeds from OWN_SEED: full the
    sample, low its encoding at the drafter's grid (token_stats.low_encoding). Written under `work` once;
    a rerun (or a resumed run) reads them back when drawn by the same target, count and sampling."""
    path = work / f"{name}.own_pairs.pt"
    meta = {"images": images, "grids": [drafter.grid, target.grid], "sampling": sampling.to_dict(),
            "target": float(sum(t.double().sum() for t in target.gpt.state_dict().values()))}
    if path.exists():
        held = torch.load(path, map_location="cpu", weights_only=True)
        if held.get("meta") == meta:
            return held
    labels = torch.arange(images) % target.gpt.config.num_classes
    low, full = [], []
    for i in range(0, images, batch):
        res = generate_ar(target, labels[i:i + batch], sampling, seed=OWN_SEED + i)
        full.append(res.tokens.cpu().to(torch.int16))
        low.append(low_encoding(target, drafter, res.tokens).cpu().to(torch.int16))
        log.info("[%s] own samples %d/%d", name, min(i + batch, images), images)
    pairs = {"labels": labels, "low": torch.cat(low), "full": torch.cat(full), "meta": meta}
    torch.save(pairs, path)
    return pairs


@torch.no_grad()
def token_match(target: LlamaGenModel, drafter: LlamaGenModel, net: LatentUpsampler, low: torch.Tensor,
                full: torch.Tensor) -> dict:
    """Share of held-out target tokens each route reproduces, drafting one low-res row at a time
    under the rows above it (what the engine gives an upsampler)."""
    g = drafter.grid
    learned = net.upsample(low, g, g)
    pixel = torch.cat([upsample_rows(UpsamplerConfig(kind="pixel"), drafter, target, low[:, i * g:(i + 1) * g], 1,
                                     low[:, :i * g]) for i in range(g)], 1)
    nearest = upsample_rows(UpsamplerConfig(kind="nearest"), drafter, target, low, g)   # reads no context
    return {f"{k}_token_match": float((v == full).float().mean())
            for k, v in (("learned", learned), ("pixel", pixel), ("nearest", nearest))} | {"held_out_images": len(low)}


def train_upsampler(stage: UpsamplerStage, target: LlamaGenModel, drafter: LlamaGenModel,
                    pool: dict[str, torch.Tensor], out: Path, work: Path, device: str) -> LatentUpsampler:
    """Train on the pool's pairs (`own_pairs` for pairs="target"); `target` and `drafter` give the grids, the
    codebook and the pixel route to compare."""
    cfg = LatentUpsamplerConfig(codebook_size=target.vocab_size, ratio=target.grid // drafter.grid,
                                channels=stage.channels, layers=stage.layers)
    torch.manual_seed(DATA_SEED)
    net = LatentUpsampler(cfg).to(device).train()
    opt = torch.optim.AdamW(net.parameters(), lr=stage.lr, weight_decay=0.01)
    start, _ = load_resume(work, stage.name, net, opt)
    low, full = pool["low" if stage.pairs == "target" else stage.low].long(), pool["full"].long()
    n_train = len(low) - min(HELD_OUT, len(low) // 4)
    g = drafter.grid
    prog = Progress(stage.name, stage.steps, start)
    loss_ema = None
    for step in range(start, stage.steps):
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, stage.steps, stage.lr)
        idx = torch.randint(0, n_train, (stage.batch,), generator=torch.Generator().manual_seed(DATA_SEED * 11 + step))
        logits = net(low[idx].to(device), g, g)
        loss = F.cross_entropy(logits.reshape(-1, cfg.codebook_size), full[idx].to(device).reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_ema = loss.item() if loss_ema is None else 0.95 * loss_ema + 0.05 * loss.item()
        prog(step + 1, loss=loss_ema)
        if (step + 1) % 200 == 0:
            save_resume(work, stage.name, net, opt, step + 1, {})
    net.eval()
    net.codebook_id = codebook_id = target.codebook_id()
    held = slice(n_train, n_train + stage.match_images)
    metrics = token_match(target, drafter, net, low[held].to(device), full[held].to(device))
    log.info("[%s] held-out token match: learned %.3f, pixel %.3f, nearest %.3f", stage.name, metrics["learned_token_match"],
             metrics["pixel_token_match"], metrics["nearest_token_match"])
    save_latent_upsampler(net, str(out / f"{stage.name}.safetensors"))
    write_card(out, stage.name, {"kind": "latent_upsampler", "config": cfg.to_dict(), "codebook_id": codebook_id,
                                 "grids": [drafter.grid, target.grid],
                                 "steps": stage.steps, "batch": stage.batch, "final_loss": loss_ema, "pairs": stage.pairs,
                                 **({"own_images": stage.own_images, "own_seed": OWN_SEED} if stage.pairs == "target" else {}),
                                 "data_seed": DATA_SEED, "metrics": metrics,
                                 "params": sum(t.numel() for t in net.parameters()), "reproduce": reproduce_command()})
    return net
