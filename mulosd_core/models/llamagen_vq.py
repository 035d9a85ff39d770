"""LlamaGen VQ tokenizer (VQ-8/VQ-16 and smaller widths), names identical to upstream.

Behaviour follows upstream (docs/DESIGN.md section 7.7): GroupNorm(32) + swish ResNet blocks, single-head
attention at the lowest resolution, asymmetric-pad stride-2 downsampling, nearest x2
upsampling, and an l2-normalised codebook (normalised at use time, not in storage).
Images cross this module's boundary in [0, 1]; the network works in [-1, 1].
"""
from __future__ import annotations

from dataclasses import dataclass, asdict, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class VQConfig:
    codebook_size: int = 16384
    codebook_embed_dim: int = 8
    codebook_l2_norm: bool = True
    codebook_show_usage: bool = True
    encoder_ch_mult: list[int] = field(default_factory=lambda: [1, 1, 2, 2, 4])
    decoder_ch_mult: list[int] = field(default_factory=lambda: [1, 1, 2, 2, 4])
    z_channels: int = 256
    ch: int = 128
    num_res_blocks: int = 2
    norm_groups: int = 32
    dropout_p: float = 0.0

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.encoder_ch_mult) - 1)

    def to_dict(self) -> dict:
        return asdict(self)


def vq_preset(name: str, **overrides) -> VQConfig:
    """Released tokenizers: 'VQ-16' (16x) and 'VQ-8' (8x)."""
    mults = {"VQ-16": [1, 1, 2, 2, 4], "VQ-8": [1, 2, 2, 4]}
    if name not in mults:
        raise ValueError(f"unknown VQ preset {name!r}; expected one of {sorted(mults)}")
    return VQConfig(encoder_ch_mult=list(mults[name]), decoder_ch_mult=list(mults[name]), **overrides)


def _norm(c: int, groups: int) -> nn.GroupNorm:
    return nn.GroupNorm(num_groups=groups, num_channels=c, eps=1e-6, affine=True)


class ResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int, groups: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm1 = _norm(cin, groups)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = _norm(cout, groups)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.nin_shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        return (self.nin_shortcut(x) if hasattr(self, "nin_shortcut") else x) + h


class AttnBlock(nn.Module):
    def __init__(self, c: int, groups: int) -> None:
        super().__init__()
        self.norm = _norm(c, groups)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(c, c, 1) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        b, c, hh, ww = h.shape
        q = self.q(h).reshape(b, c, hh * ww).transpose(1, 2)
        k = self.k(h).reshape(b, c, hh * ww)
        v = self.v(h).reshape(b, c, hh * ww)
        w = torch.softmax(torch.bmm(q, k) * c ** -0.5, dim=2)
        out = torch.bmm(v, w.transpose(1, 2)).reshape(b, c, hh, ww)
        return x + self.proj_out(out)


class Downsample(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Upsample(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Encoder(nn.Module):
    def __init__(self, cfg: VQConfig) -> None:
        super().__init__()
        ch, mult, g = cfg.ch, cfg.encoder_ch_mult, cfg.norm_groups
        self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
        self.conv_blocks = nn.ModuleList()
        cin = ch
        for level, m in enumerate(mult):
            block = nn.Module()
            block.res, block.attn = nn.ModuleList(), nn.ModuleList()
            cout = ch * m
            for _ in range(cfg.num_res_blocks):
                block.res.append(ResnetBlock(cin, cout, g, cfg.dropout_p))
                cin = cout
                if level == len(mult) - 1:
                    block.attn.append(AttnBlock(cin, g))
            if level != len(mult) - 1:
                block.downsample = Downsample(cin)
            self.conv_blocks.append(block)
        self.mid = nn.ModuleList([ResnetBlock(cin, cin, g, cfg.dropout_p), AttnBlock(cin, g), ResnetBlock(cin, cin, g, cfg.dropout_p)])
        self.norm_out = _norm(cin, g)
        self.conv_out = nn.Conv2d(cin, cfg.z_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for block in self.conv_blocks:
            for i, res in enumerate(block.res):
                h = res(h)
                if len(block.attn):
                    h = block.attn[i](h)
            if hasattr(block, "downsample"):
                h = block.downsample(h)
        for m in self.mid:
            h = m(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class Decoder(nn.Module):
    def __init__(self, cfg: VQConfig) -> None:
        super().__init__()
        ch, mult, g = cfg.ch, cfg.decoder_ch_mult, cfg.norm_groups
        cin = ch * mult[-1]
        self.conv_in = nn.Conv2d(cfg.z_channels, cin, 3, padding=1)
        self.mid = nn.ModuleList([ResnetBlock(cin, cin, g, cfg.dropout_p), AttnBlock(cin, g), ResnetBlock(cin, cin, g, cfg.dropout_p)])
        self.conv_blocks = nn.ModuleList()
        for level in range(len(mult)):
            block = nn.Module()
            block.res, block.attn = nn.ModuleList(), nn.ModuleList()
            cout = ch * mult[len(mult) - level - 1]
            for _ in range(cfg.num_res_blocks + 1):
                block.res.append(ResnetBlock(cin, cout, g, cfg.dropout_p))
                cin = cout
                if level == 0:
                    block.attn.append(AttnBlock(cin, g))
            if level != len(mult) - 1:
                block.upsample = Upsample(cin)
            self.conv_blocks.append(block)
        self.norm_out = _norm(cin, g)
        self.conv_out = nn.Conv2d(cin, 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(z)
        for m in self.mid:
            h = m(h)
        for block in self.conv_blocks:
            for i, res in enumerate(block.res):
                h = res(h)
                if len(block.attn):
                    h = block.attn[i](h)
            if hasattr(block, "upsample"):
                h = block.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class VectorQuantizer(nn.Module):
    def __init__(self, cfg: VQConfig) -> None:
        super().__init__()
        self.l2_norm = cfg.codebook_l2_norm
        self.embedding = nn.Embedding(cfg.codebook_size, cfg.codebook_embed_dim)
        self.embedding.weight.data.uniform_(-1.0 / cfg.codebook_size, 1.0 / cfg.codebook_size)
        if self.l2_norm:
            self.embedding.weight.data = F.normalize(self.embedding.weight.data, p=2, dim=-1)
        if cfg.codebook_show_usage:
            self.register_buffer("codebook_used", torch.zeros(65536))

    def codebook(self) -> torch.Tensor:
        """Codebook vectors as the tokenizer uses them (normalised when l2_norm)."""
        w = self.embedding.weight
        return F.normalize(w, p=2, dim=-1) if self.l2_norm else w

    def nearest(self, z: torch.Tensor) -> torch.Tensor:
        """Indices [B, H, W] of the nearest code for z [B, C, H, W]."""
        zf = z.permute(0, 2, 3, 1).float()
        if self.l2_norm:
            zf = F.normalize(zf, p=2, dim=-1)
        e = self.codebook().float()
        d = zf.pow(2).sum(-1, keepdim=True) + e.pow(2).sum(-1) - 2 * zf @ e.t()
        return d.argmin(-1)

    def lookup(self, idx: torch.Tensor) -> torch.Tensor:
        """Code vectors [B, C, H, W] for indices [B, H, W]."""
        return self.codebook()[idx].permute(0, 3, 1, 2)


class VQModel(nn.Module):
    def __init__(self, cfg: VQConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)
        self.quantize = VectorQuantizer(cfg)
        self.quant_conv = nn.Conv2d(cfg.z_channels, cfg.codebook_embed_dim, 1)
        self.post_quant_conv = nn.Conv2d(cfg.codebook_embed_dim, cfg.z_channels, 1)

    @property
    def downsample(self) -> int:
        return self.config.downsample

    def encode_latent(self, images: torch.Tensor) -> torch.Tensor:
        """Pre-quantisation latent [B, C, h, w] of images [B, 3, H, W] in [0, 1]."""
        x = images.to(self.quant_conv.weight.dtype) * 2 - 1
        return self.quant_conv(self.encoder(x))

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Token grid [B, h*w] (raster order) of images [B, 3, H, W] in [0, 1]."""
        h, w = images.shape[-2:]
        ds = self.downsample
        if h % ds or w % ds:
            raise ValueError(f"image size {h}x{w} is not a multiple of the tokenizer's downsampling {ds}")
        return self.quantize.nearest(self.encode_latent(images)).flatten(1)

    def decode_latent(self, z: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1] from quantised latents [B, C, h, w] (not clamped during training)."""
        return (self.decoder(self.post_quant_conv(z)) + 1) / 2

    def decode(self, tokens: torch.Tensor, h: int, w: int) -> torch.Tensor:
        """Images [B, 3, h*ds, w*ds] in [0, 1] from a token grid [B, h*w]."""
        if tokens.shape[-1] != h * w:
            raise ValueError(f"token grid has {tokens.shape[-1]} tokens, expected {h}x{w} = {h * w}")
        z = self.quantize.lookup(tokens.reshape(-1, h, w).long()).to(self.post_quant_conv.weight.dtype)
        return self.decode_latent(z).clamp(0, 1)
