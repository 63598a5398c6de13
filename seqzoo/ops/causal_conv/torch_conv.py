"""The ``mode="torch"`` causal conv: k shifted multiply-adds on the (B, T, C) layout, with its own backward; with
``segment_pos``, k-1 masked multiply-adds (autograd)."""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from .common import check, new_state, starts_cumsum, tap_keep, with_history


class _ShiftedTaps(torch.autograd.Function):
    """``y_t = bias + Σ_j weight[:, j] ⊙ xs_{t+j}`` over ``xs (B, k-1+T, C)`` (history then x), in place on the
    (B, T, C) layout. ``F.conv1d`` with groups = C needs (B, C, T) copies both ways, and its CPU backward for a
    depthwise kernel was 2.5x this one at (4, 1024, 512), k = 4, fp32 (fwd+bwd 51 against 21 ms, one thread)."""

    @staticmethod
    def forward(ctx, xs, weight, bias):
        k = weight.shape[1]
        T = xs.shape[1] - k + 1
        y = xs[:, k - 1 :] * weight[:, k - 1] if bias is None else torch.addcmul(bias, xs[:, k - 1 :], weight[:, k - 1])
        for j in range(k - 1):
            y.addcmul_(xs[:, j : j + T], weight[:, j])
        ctx.save_for_backward(xs, weight)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        xs, weight = ctx.saved_tensors
        k = weight.shape[1]
        T = gy.shape[1]
        gxs = gw = gb = None
        if ctx.needs_input_grad[0]:
            gxs = xs.new_zeros(xs.shape)
            for j in range(k):
                gxs[:, j : j + T].addcmul_(gy, weight[:, j])
        if ctx.needs_input_grad[1]:
            gw = torch.stack([(gy * xs[:, j : j + T]).sum((0, 1)) for j in range(k)], dim=1).to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = gy.sum((0, 1))
        return gxs, gw, gb


def causal_conv1d_torch(x, weight, bias, state, segment_pos):
    k = check(x, weight, state, segment_pos, bias)
    xs = with_history(x, state, k)
    if segment_pos is None and x.shape[1] == 1:  # a decoded token: k multiply-adds, not a oneDNN conv call
        y = (xs * weight.t().to(x.dtype)).sum(1, keepdim=True)  # xs (B, k, C): the buffer then x
        return (y if bias is None else y + bias.to(x.dtype)), new_state(xs, k, None)
    if segment_pos is None:
        b = None if bias is None else bias.to(x.dtype)  # as the weight (fp32 parameters, 16-bit x)
        return _ShiftedTaps.apply(xs, weight.to(x.dtype), b), new_state(xs, k, None)
    csum = starts_cumsum(segment_pos, k)
    T = x.shape[1]
    w = weight.to(x.dtype)
    y = x * w[:, k - 1]  # lag 0 is always kept
    for s in range(1, k):  # k-1 masked taps, each a (B, T, C) multiply-add
        keep = tap_keep(csum, s, T, k).to(x.dtype)[..., None]  # (B, T, 1)
        y = y + xs[:, k - 1 - s : k - 1 - s + T] * w[:, k - 1 - s] * keep
    if bias is not None:
        y = y + bias
    return y, new_state(xs, k, csum)
