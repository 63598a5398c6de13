"""Reference loops of the causal conv (over taps; with ``segment_pos`` over time steps and lags)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...errors import InputError
from .common import ACTIVATIONS, check, with_history


def causal_conv1d_naive(x, weight, bias=None, state=None, segment_pos=None, activation=None):
    """Reference loop over taps (and, with ``segment_pos``, over time steps and lags); ``activation``: None | "silu"."""
    if activation not in ACTIVATIONS:
        raise InputError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    y, buf = _causal_conv1d_naive(x, weight, bias, state, segment_pos)
    return (F.silu(y) if activation == "silu" else y), buf


def _causal_conv1d_naive(x, weight, bias, state, segment_pos):
    k = check(x, weight, state, segment_pos, bias)
    xs = with_history(x, state, k)
    T = x.shape[1]
    if segment_pos is None:
        y = sum(xs[:, i : i + T] * weight[:, i] for i in range(k))
        if bias is not None:
            y = y + bias
        return y, xs[:, xs.shape[1] - (k - 1) :]
    starts = segment_pos == 0  # (B, T)
    B = x.shape[0]
    y = torch.zeros_like(x)
    for b in range(B):
        for t in range(T):
            acc = weight[:, k - 1] * x[b, t]
            for s in range(1, k):
                if bool(starts[b, max(0, t - s + 1) : t + 1].any()):
                    break  # a document starts in (t-s, t]: this and every longer lag are dropped
                acc = acc + weight[:, k - 1 - s] * xs[b, k - 1 + t - s]
            y[b, t] = acc if bias is None else acc + bias
    buf = xs[:, xs.shape[1] - (k - 1) :].clone()
    for b in range(B):
        for j in range(k - 1):  # buffer entry j is stream position T-(k-1)+j
            p = T - (k - 1) + j
            if bool(starts[b, max(0, p + 1) :].any()):
                buf[b, j] = 0
    return y, buf
