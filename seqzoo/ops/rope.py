"""Rotary position embedding (Su et al., arXiv:2104.09864), rotate-half layout.

For a rotary width rho (the first ``rho`` dims of each head; the rest pass through), split those dims
into halves (x1, x2) and rotate by angle pos * base^(-2j/rho), j < rho/2:
    [x1 cos - x2 sin, x2 cos + x1 sin, x_pass]
``rope_fraction=0.5`` is Griffin's "RoPE on half the head dims"; 1.0 is the usual full RoPE.
"""

from __future__ import annotations

import torch

from ..errors import InputError


def rotary_dim(head_dim: int, rope_fraction: float) -> int:
    if not 0.0 <= rope_fraction <= 1.0:
        raise InputError(f"rope_fraction must be in [0, 1], got {rope_fraction}")
    rho = int(head_dim * rope_fraction)
    return rho - rho % 2


def apply_rope(
    x: torch.Tensor, positions: torch.Tensor, rope_fraction: float = 1.0, base: float = 10000.0
) -> torch.Tensor:
    """Rotate ``x (B, T, H, hd)`` at integer ``positions (B, T)`` (or ``(T,)``)."""
    hd = x.shape[-1]
    rho = rotary_dim(hd, rope_fraction)
    if rho == 0:
        return x
    half = rho // 2
    inv_freq = base ** (-torch.arange(half, device=x.device, dtype=torch.float64) * 2.0 / rho)  # (half,)
    if positions.dim() == 1:
        positions = positions.unsqueeze(0)
    # angles in fp64 then cast: positions up to 1e6 keep full accuracy
    angles = positions.to(torch.float64).unsqueeze(-1) * inv_freq  # (B|1, T, half)
    cos = angles.cos().to(x.dtype).unsqueeze(2)  # (B|1, T, 1, half)
    sin = angles.sin().to(x.dtype).unsqueeze(2)
    x1, x2, rest = x[..., :half], x[..., half:rho], x[..., rho:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)
