"""Shared pieces of the causal conv implementations: argument checks, the carried history, document starts."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...errors import InputError

ACTIVATIONS = (None, "silu")


def check(
    x: torch.Tensor,
    weight: torch.Tensor,
    state: torch.Tensor | None,
    segment_pos: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> int:
    if x.dim() != 3:
        raise InputError(f"x must have shape (B, T, C), got {tuple(x.shape)}")
    if weight.dim() != 2 or weight.shape[0] != x.shape[-1]:
        raise InputError(f"weight must have shape (C={x.shape[-1]}, k), got {tuple(weight.shape)}")
    # one bias per channel: the C loop reads bias[c] for every channel (a shorter bias read past its end), and a
    # length-1 bias broadcast on the PyTorch paths only, so every path takes exactly (C,)
    if bias is not None and tuple(bias.shape) != (x.shape[-1],):
        raise InputError(f"bias must have shape (C={x.shape[-1]},), got {tuple(bias.shape)}")
    k = weight.shape[1]
    if state is not None and state.shape != (x.shape[0], k - 1, x.shape[-1]):
        raise InputError(f"conv state must have shape ({x.shape[0]}, {k - 1}, {x.shape[-1]}), got {tuple(state.shape)}")
    if segment_pos is not None and tuple(segment_pos.shape) != tuple(x.shape[:2]):
        raise InputError(f"segment_pos must have shape {tuple(x.shape[:2])} (B, T), got {tuple(segment_pos.shape)}")
    return k


def with_history(x: torch.Tensor, state: torch.Tensor | None, k: int) -> torch.Tensor:
    if state is None:
        state = x.new_zeros(x.shape[0], k - 1, x.shape[-1])
    return torch.cat([state.to(x.dtype), x], dim=1)  # (B, k-1+T, C)


def starts_cumsum(segment_pos: torch.Tensor, k: int) -> torch.Tensor:
    """``(B, k-1+T)`` count of document starts up to each position of ``[history, x]`` (history: none)."""
    starts = (segment_pos == 0).long()  # (B, T)
    starts = F.pad(starts, (k - 1, 0))  # (B, k-1+T)
    return starts.cumsum(dim=1)


def new_state(xs: torch.Tensor, k: int, csum: torch.Tensor | None) -> torch.Tensor:
    """Last k-1 inputs; with document starts, zero the entries that lie before the latest start."""
    buf = xs[:, xs.shape[1] - (k - 1) :]  # (B, k-1, C)
    if csum is None:
        return buf
    keep = csum[:, -1:] == csum[:, csum.shape[1] - (k - 1) :]  # (B, k-1): no start after this entry
    return buf * keep[..., None].to(buf.dtype)


def tap_keep(csum: torch.Tensor, s: int, T: int, k: int) -> torch.Tensor:
    """``(B, T)`` True where the lag-s tap is kept: no document start in ``(t-s, t]``."""
    cur = csum[:, k - 1 :]  # (B, T) starts up to t
    lag = csum[:, k - 1 - s : k - 1 - s + T]  # starts up to t-s
    return cur == lag
