"""``F.conv1d`` causal conv (the ``mode="torch"`` path); with ``segment_pos``, k-1 masked multiply-adds."""

from __future__ import annotations

import torch.nn.functional as F

from .common import check, new_state, starts_cumsum, tap_keep, with_history


def causal_conv1d_torch(x, weight, bias, state, segment_pos):
    k = check(x, weight, state, segment_pos)
    xs = with_history(x, state, k)
    if segment_pos is None and x.shape[1] == 1:  # a decoded token: k multiply-adds, not a oneDNN conv call
        y = (xs * weight.t().to(x.dtype)).sum(1, keepdim=True)  # xs (B, k, C): the buffer then x
        return (y if bias is None else y + bias.to(x.dtype)), new_state(xs, k, None)
    if segment_pos is None:
        b = None if bias is None else bias.to(x.dtype)  # as the weight (fp32 parameters, 16-bit x)
        y = F.conv1d(xs.transpose(1, 2), weight.unsqueeze(1).to(x.dtype), b, groups=x.shape[-1])  # (B, C, T)
        return y.transpose(1, 2), new_state(xs, k, None)
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
