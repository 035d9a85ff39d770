"""2D rotary position embedding exactly as LlamaGen lays it out (docs/DESIGN.md section 7.4).

The table has one row per sequence position. Condition positions get all-zero rows
(cos = sin = 0, not the identity), so their q and k vanish; LlamaGen was trained that
way and a faithful port must reproduce it. Image token n uses row = n // grid for the
first half of the rotation pairs and col = n % grid for the second half.
"""
from __future__ import annotations

import torch


def rope_table_2d(grid: int, head_dim: int, cond_len: int, base: float = 10000.0) -> torch.Tensor:
    """Return float32 [cond_len + grid*grid, head_dim // 2, 2] holding (cos, sin) per pair."""
    if head_dim % 4:
        raise ValueError(f"2D RoPE needs head_dim divisible by 4, got {head_dim}")
    quarter = head_dim // 4
    freqs = 1.0 / (base ** (torch.arange(0, quarter, dtype=torch.float32) * 4.0 / head_dim))
    t = torch.arange(grid, dtype=torch.float32)
    axis = torch.outer(t, freqs)  # [grid, quarter]
    rows = axis[:, None, :].expand(grid, grid, quarter)
    cols = axis[None, :, :].expand(grid, grid, quarter)
    angles = torch.cat([rows, cols], dim=-1).reshape(grid * grid, head_dim // 2)
    table = torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1)
    return torch.cat([torch.zeros(cond_len, head_dim // 2, 2), table], dim=0)


def apply_rope(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs of x [B, S, H, D] by table [S, D/2, 2]; computed in float32."""
    xf = x.float().reshape(*x.shape[:-1], -1, 2)
    cos = table[None, :, None, :, 0]
    sin = table[None, :, None, :, 1]
    x0, x1 = xf[..., 0], xf[..., 1]
    out = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)
    return out.flatten(3).type_as(x)
