"""Moving token rows between the two resolutions (docs/DESIGN.md sections 2.2 and 2.3).

`upsample_rows` (U_r) takes the drafted low-res rows plus the low-res rows above them and
returns the target tokens of the r x rows rows under the drafted rows; `downsample_rows`
gives the drafter its context, the committed target rows re-encoded at its resolution.

Whenever a route runs the VQ tokenizer it codes a *whole* image, never a band of rows:
LlamaGen's encoder and decoder normalise over the whole image (GroupNorm) and attend across
it (mid-block attention), so a band alone has edges and statistics the tokenizer never saw in
training. On the embedded pair, band-wise coding re-encoded only 6-46% of the context tokens
as the drafter sees them in training and cut the target's acceptance of upsampled drafts from
about 35% to 5%. The rows not yet generated are filled by reflecting the rows that exist
(`full_grid`), which keeps the image statistics near the last row.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, asdict
from typing import Optional

import torch
import torch.nn.functional as F

from .imageops import FILTERS, resize
from .models.protocol import ImageARModel

KINDS = ("pixel", "nearest", "embedding", "learned")


@dataclass
class UpsamplerConfig:
    kind: str = "pixel"
    ratio: Optional[int] = None      # derived from the two models when None
    filter: str = "bicubic"
    weights: str = ""                # learned kind: a LatentUpsampler file ("" = the embedded family's)
    # learned kind: draw each target draft from the network's distribution q instead of taking its argmax,
    # so that the rules with a p/q test (exact: lossless under raster rejection) can verify it (section 3.7)
    draw: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"upsampler kind must be one of {KINDS}, got {self.kind!r}")
        if self.draw and self.kind != "learned":
            raise ValueError(f"upsampler draw=True needs the learned kind (only it gives a distribution over the "
                             f"target's codes), got kind {self.kind!r}")
        if self.filter not in FILTERS:
            raise ValueError(f"upsampler filter must be one of {FILTERS}, got {self.filter!r}")
        if self.ratio is not None and (int(self.ratio) != self.ratio or self.ratio < 1):
            raise ValueError(f"upsampler ratio must be a positive integer, got {self.ratio}")

    def to_dict(self) -> dict:
        return asdict(self)


def resolution_ratio(target_grid: int, drafter_grid: int) -> int:
    """r = s_p / s_q; must be a positive integer (r = 1 is a same-resolution drafter)."""
    if drafter_grid > target_grid:
        raise ValueError(f"the drafter's grid ({drafter_grid}x{drafter_grid}) is larger than the target's "
                         f"({target_grid}x{target_grid}); the drafter must work at the same or a lower resolution")
    if target_grid % drafter_grid:
        raise ValueError(f"resolution ratio target/drafter = {target_grid}/{drafter_grid} is not an integer; "
                         f"pick image sizes whose token grids divide (e.g. r = 2 or 4)")
    return target_grid // drafter_grid


def full_grid(tokens: torch.Tensor, rows: int, grid: int) -> torch.Tensor:
    """Token rows [B, rows*grid] -> a full grid [B, grid*grid] whose missing rows mirror the given ones.

    Rows rows, rows+1, ... copy rows rows-1, rows-2, ..., 0, then 0, 1, ... again (symmetric
    tiling), so the filled image continues the last rows instead of starting a new edge.
    """
    if not 1 <= rows <= grid or tokens.shape[1] != rows * grid:
        raise ValueError(f"expected 1..{grid} rows of {grid} tokens, got {tokens.shape[1]} tokens as {rows} rows")
    if rows == grid:
        return tokens
    period = 2 * rows
    src = [rows - 1 - m if m < rows else m - rows for m in (j % period for j in range(grid - rows))]
    g = tokens.reshape(tokens.shape[0], rows, grid)
    return torch.cat([g, g[:, src]], 1).flatten(1)


def downsample_rows(cfg: UpsamplerConfig, drafter: ImageARModel, target: ImageARModel, tokens: torch.Tensor,
                    rows: int) -> torch.Tensor:
    """The drafter's context: the first `rows` target rows [B, rows*s_p] (rows a multiple of r),
    decoded as a whole image, resized to the drafter's resolution with `cfg.filter` and encoded
    again; returns the rows//r low-res rows [B, rows//r*s_q] under them."""
    r = resolution_ratio(target.grid, drafter.grid)
    if rows % r:
        raise ValueError(f"the drafter's context needs whole low-res rows: {rows} target rows is not a multiple of r = {r}")
    if rows == 0:
        return tokens[:, :0]
    images = target.decode(full_grid(tokens[:, : rows * target.grid], rows, target.grid))
    h, w = images.shape[-2:]
    low = drafter.encode(resize(images, (h // r, w // r), cfg.filter))
    return low[:, : rows // r * drafter.grid].to(tokens.device)


def upsample_rows(cfg: UpsamplerConfig, drafter: ImageARModel, target: ImageARModel, low: torch.Tensor,
                  rows: int, context: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Low-res tokens [B, rows*s_q] under low-res context rows [B, c*s_q] -> target tokens [B, rows*r*s_p].

    The pixel route codes the whole image (context, drafted rows, reflected filler); the
    embedding route interpolates locally and only reads the last context row (a halo, so its
    interpolation sees no artificial top edge); the nearest route reads no context.
    """
    r = resolution_ratio(target.grid, drafter.grid)   # raises on a non-integer ratio or a larger drafter grid
    if cfg.ratio is not None and cfg.ratio != r:
        raise ValueError(f"upsampler ratio {cfg.ratio} does not match the models: target grid {target.grid} / "
                         f"drafter grid {drafter.grid} = {r}")
    if r == 1:
        return low
    if cfg.kind == "nearest":
        grid = low.reshape(-1, rows, drafter.grid)
        return grid.repeat_interleave(r, 1).repeat_interleave(r, 2).flatten(1)
    context = _context_rows(drafter, low, rows, context)
    c = context.shape[1] // drafter.grid
    if cfg.kind == "learned":
        return upsample_logits(cfg, drafter, target, low, rows, context).argmax(-1).to(low.device)
    if cfg.kind == "pixel":   # reads the whole band of low-res rows, context included
        band = torch.cat([context.to(low.device), low], 1)
        images = drafter.decode(full_grid(band, c + rows, drafter.grid))
        h, w = images.shape[-2:]
        tokens = target.encode(resize(images, (h * r, w * r), cfg.filter))
        first = c * r * target.grid
        return tokens[:, first:first + rows * r * target.grid].to(low.device)
    # embedding: interpolate code vectors in latent space, then re-quantise
    halo = context[:, -drafter.grid:].to(low.device) if c else low[:, :0]
    n_rows = rows + (1 if c else 0)
    z = drafter.code_latent(torch.cat([halo, low], 1), n_rows).float()
    mode = cfg.filter if cfg.filter in ("bilinear", "bicubic") else "nearest"
    z = F.interpolate(z, scale_factor=r, mode=mode, **({} if mode == "nearest" else {"align_corners": False}))
    tokens = target.nearest_codes(z)
    skip = r * target.grid if c else 0
    return tokens[:, skip:].to(low.device)


def _context_rows(drafter: ImageARModel, low: torch.Tensor, rows: int, context: Optional[torch.Tensor]) -> torch.Tensor:
    """The low-res context, checked: whole rows above the drafted ones (none when None)."""
    if context is None:
        context = low[:, :0]
    c = context.shape[1] // drafter.grid
    if context.shape[1] != c * drafter.grid or c + rows > drafter.grid:
        raise ValueError(f"low-res context must be whole rows of {drafter.grid} tokens above the drafted rows "
                         f"(at most {drafter.grid - rows} rows here), got {context.shape[1]} tokens")
    return context


@torch.no_grad()
def upsample_logits(cfg: UpsamplerConfig, drafter: ImageARModel, target: ImageARModel, low: torch.Tensor,
                    rows: int, context: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The learned upsampler's logits [B, rows*r*s_p, V] over the target tokens under the drafted rows, on
    the network's device: its argmax is the learned route's draft, its softmax the q that `draw` samples."""
    r = resolution_ratio(target.grid, drafter.grid)
    context = _context_rows(drafter, low, rows, context)
    c = context.shape[1] // drafter.grid
    net = learned_net(cfg, target, r)
    band = torch.cat([context.to(low.device), low], 1).to(net.head.weight.device)
    first = c * r * target.grid
    return net(band, c + rows, drafter.grid)[:, first:first + rows * r * target.grid]


def learned_net(cfg: UpsamplerConfig, target: ImageARModel, r: int):
    """The learned upsampler for this pair: loaded once per file, on the target's device, checked
    against the pair's ratio and codebook (it only knows the codes it was trained on)."""
    from .models.latent_upsampler import cached_latent_upsampler

    path = cfg.weights or embedded_upsampler(target, r)
    net = cached_latent_upsampler(path, target.device)
    if net.config.ratio != r:
        raise ValueError(f"learned upsampler {path} upsamples by r = {net.config.ratio}, but these models need r = {r}")
    own = target.codebook_id() if hasattr(target, "codebook_id") else ""
    if net.codebook_id and own and net.codebook_id != own:
        raise ValueError(f"learned upsampler {path} was trained on codebook {net.codebook_id}, but {target.name} uses "
                         f"codebook {own}: train one for this VQ (python -m mulosd_core.train.family --stages upsampler) "
                         f"or use the pixel upsampler")
    return net


def embedded_upsampler(target: ImageARModel, r: int = 2) -> str:
    """The shipped learned upsampler for this target and ratio: trained on the target's codebook, by `r`, into
    the target's grid (a family's grid is its card's image_size / vq_downsample). The default family's when
    none matches: `learned_net` then says what differs."""
    own = target.codebook_id() if hasattr(target, "codebook_id") else ""
    return _shipped_upsampler(own, target.grid, r)


@functools.lru_cache(maxsize=None)
def _shipped_upsampler(codebook_id: str, grid: int, r: int) -> str:
    """embedded_upsampler's search over the shipped files, once per (codebook, grid, ratio): learned_net asks
    on every drafting step, and the shipped folders do not change while the pack runs."""
    from .models.registry import DEFAULT_EMBEDDED_FAMILY, EMBEDDED_FAMILIES, EMBEDDED_MEMBERS, embedded_path, family_card

    for folder in EMBEDDED_FAMILIES.values():
        card = family_card(folder)[0]
        if card.get("image_size", 0) // card.get("vq_downsample", 4) != grid:
            continue
        for member in (m for m in EMBEDDED_MEMBERS if m.startswith("upsampler")):
            path = os.path.join(folder, EMBEDDED_MEMBERS[member])
            if not os.path.isfile(path):
                continue
            if codebook_id and upsampler_header(path) == (codebook_id, r):
                return path
    return embedded_path("upsampler", DEFAULT_EMBEDDED_FAMILY)


def upsampler_header(path: str) -> tuple[str, int | None]:
    """A learned upsampler file's (codebook id, ratio), read from its header alone (no tensor loaded)."""
    import json

    from .models.registry import read_safetensors_meta

    meta = read_safetensors_meta(path)[1]
    return meta.get("codebook_id", ""), json.loads(meta.get("mulosd_config", "{}")).get("ratio")
