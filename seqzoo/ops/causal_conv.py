"""Depthwise causal 1-D convolution with a carried buffer (xLSTM's and Griffin's k=4 short conv).

    y_t[c] = bias[c] + sum_{i=0}^{k-1} weight[c, i] * x_{t-k+1+i}[c]       (weight[:, k-1] hits the current token)

The state is the last k-1 inputs ``(B, k-1, C)``; prepending it makes a split sequence equal the whole.
``causal_conv1d`` uses ``F.conv1d``; ``causal_conv1d_naive`` is the loop it is tested against.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _check(x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor | None) -> int:
    if x.dim() != 3:
        raise ValueError(f"x must have shape (B, T, C), got {tuple(x.shape)}")
    if weight.dim() != 2 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must have shape (C={x.shape[-1]}, k), got {tuple(weight.shape)}")
    k = weight.shape[1]
    if state is not None and state.shape != (x.shape[0], k - 1, x.shape[-1]):
        raise ValueError(f"conv state must have shape ({x.shape[0]}, {k - 1}, {x.shape[-1]}), got {tuple(state.shape)}")
    return k


def _with_history(x: torch.Tensor, state: torch.Tensor | None, k: int) -> torch.Tensor:
    if state is None:
        state = x.new_zeros(x.shape[0], k - 1, x.shape[-1])
    return torch.cat([state.to(x.dtype), x], dim=1)  # (B, k-1+T, C)


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                  state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``x (B, T, C)``, ``weight (C, k)`` -> ``y (B, T, C)``, new state ``(B, k-1, C)``."""
    k = _check(x, weight, state)
    xs = _with_history(x, state, k)
    y = F.conv1d(xs.transpose(1, 2), weight.unsqueeze(1).to(x.dtype), bias, groups=x.shape[-1])  # (B, C, T)
    return y.transpose(1, 2), xs[:, xs.shape[1] - (k - 1):]


def causal_conv1d_naive(x, weight, bias=None, state=None):
    """Reference loop over taps."""
    k = _check(x, weight, state)
    xs = _with_history(x, state, k)
    T = x.shape[1]
    y = sum(xs[:, i:i + T] * weight[:, i] for i in range(k))
    if bias is not None:
        y = y + bias
    return y, xs[:, xs.shape[1] - (k - 1):]
