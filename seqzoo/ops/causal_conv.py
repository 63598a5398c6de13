"""Depthwise causal 1-D convolution with a carried buffer (xLSTM's and Griffin's k=4 short conv).

    y_t[c] = bias[c] + sum_{i=0}^{k-1} weight[c, i] * x_{t-k+1+i}[c]       (weight[:, k-1] hits the current token)

The state is the last k-1 inputs ``(B, k-1, C)``; prepending it makes a split sequence equal the whole.
``causal_conv1d`` uses ``F.conv1d``; ``causal_conv1d_naive`` is the loop it is tested against.

Implementations (``impl=``): ``"torch"`` (``F.conv1d``; with ``segment_pos`` k-1 masked multiply-adds),
``"naive"`` (the reference loop), ``"triton"`` (``seqzoo/kernels/conv.py: causal_conv1d_triton``: one fwd and one
bwd Triton kernel, document masking exact in-kernel, fp32 accumulation) and ``"auto"`` (the default: Triton for
CUDA tensors of float32/float16/bfloat16 when triton is importable, torch otherwise; the interpreter is never
chosen by "auto"). triton is imported only when the Triton path runs. ``activation="silu"`` applies SiLU to y
(fused into the kernel on the Triton path).

Document masking (Griffin, spec/griffin.md §3.1): with ``segment_pos (B, T)`` (0 where a document starts),
the tap at lag s (input x_{t-s}) is dropped when a document starts in ``(t-s, t]``, so no information crosses
a document start. The returned buffer has entries from before a document start inside it zeroed, which
keeps the rule exact across calls without carrying positions (a later call cannot see past that start).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IMPLS = ("auto", "torch", "naive", "triton")
ACTIVATIONS = (None, "silu")


def _check(
    x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor | None, segment_pos: torch.Tensor | None = None
) -> int:
    if x.dim() != 3:
        raise ValueError(f"x must have shape (B, T, C), got {tuple(x.shape)}")
    if weight.dim() != 2 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must have shape (C={x.shape[-1]}, k), got {tuple(weight.shape)}")
    k = weight.shape[1]
    if state is not None and state.shape != (x.shape[0], k - 1, x.shape[-1]):
        raise ValueError(f"conv state must have shape ({x.shape[0]}, {k - 1}, {x.shape[-1]}), got {tuple(state.shape)}")
    if segment_pos is not None and tuple(segment_pos.shape) != tuple(x.shape[:2]):
        raise ValueError(f"segment_pos must have shape {tuple(x.shape[:2])} (B, T), got {tuple(segment_pos.shape)}")
    return k


def _with_history(x: torch.Tensor, state: torch.Tensor | None, k: int) -> torch.Tensor:
    if state is None:
        state = x.new_zeros(x.shape[0], k - 1, x.shape[-1])
    return torch.cat([state.to(x.dtype), x], dim=1)  # (B, k-1+T, C)


def _starts_cumsum(segment_pos: torch.Tensor, k: int) -> torch.Tensor:
    """``(B, k-1+T)`` count of document starts up to each position of ``[history, x]`` (history: none)."""
    starts = (segment_pos == 0).long()  # (B, T)
    starts = F.pad(starts, (k - 1, 0))  # (B, k-1+T)
    return starts.cumsum(dim=1)


def _new_state(xs: torch.Tensor, k: int, csum: torch.Tensor | None) -> torch.Tensor:
    """Last k-1 inputs; with document starts, zero the entries that lie before the latest start."""
    buf = xs[:, xs.shape[1] - (k - 1) :]  # (B, k-1, C)
    if csum is None:
        return buf
    keep = csum[:, -1:] == csum[:, csum.shape[1] - (k - 1) :]  # (B, k-1): no start after this entry
    return buf * keep[..., None].to(buf.dtype)


def _tap_keep(csum: torch.Tensor, s: int, T: int, k: int) -> torch.Tensor:
    """``(B, T)`` True where the lag-s tap is kept: no document start in ``(t-s, t]``."""
    cur = csum[:, k - 1 :]  # (B, T) starts up to t
    lag = csum[:, k - 1 - s : k - 1 - s + T]  # starts up to t-s
    return cur == lag


def _auto_triton(x: torch.Tensor, *others: torch.Tensor | None) -> bool:
    """ "auto" picks Triton for CUDA float32/float16/bfloat16 tensors when triton is importable (not interpreted)."""
    floats = (torch.float32, torch.float16, torch.bfloat16)
    if not x.is_cuda or any(t is not None and (t.dtype not in floats or t.device != x.device) for t in (x, *others)):
        return False
    from ..kernels import usable_on

    return usable_on(x.device)


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    segment_pos: torch.Tensor | None = None,
    impl: str = "auto",
    activation: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x (B, T, C)``, ``weight (C, k)`` -> ``y (B, T, C)``, new state ``(B, k-1, C)``.

    ``segment_pos (B, T)`` (optional) masks taps across document starts (see the module docstring).
    ``impl``: "auto" | "torch" | "naive" | "triton" (module docstring); ``activation``: None | "silu".
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if impl == "triton" or (impl == "auto" and _auto_triton(x, weight, bias, state)):
        from ..kernels.conv import causal_conv1d_triton

        return causal_conv1d_triton(x, weight, bias, state, segment_pos, activation=activation)
    if impl == "naive":
        return causal_conv1d_naive(x, weight, bias, state, segment_pos, activation=activation)
    y, new_state = _causal_conv1d_torch(x, weight, bias, state, segment_pos)
    return (F.silu(y) if activation == "silu" else y), new_state


def _causal_conv1d_torch(x, weight, bias, state, segment_pos):
    k = _check(x, weight, state, segment_pos)
    xs = _with_history(x, state, k)
    if segment_pos is None:
        b = None if bias is None else bias.to(x.dtype)  # as the weight (fp32 parameters, 16-bit x)
        y = F.conv1d(xs.transpose(1, 2), weight.unsqueeze(1).to(x.dtype), b, groups=x.shape[-1])  # (B, C, T)
        return y.transpose(1, 2), _new_state(xs, k, None)
    csum = _starts_cumsum(segment_pos, k)
    T = x.shape[1]
    w = weight.to(x.dtype)
    y = x * w[:, k - 1]  # lag 0 is always kept
    for s in range(1, k):  # k-1 masked taps, each a (B, T, C) multiply-add
        keep = _tap_keep(csum, s, T, k).to(x.dtype)[..., None]  # (B, T, 1)
        y = y + xs[:, k - 1 - s : k - 1 - s + T] * w[:, k - 1 - s] * keep
    if bias is not None:
        y = y + bias
    return y, _new_state(xs, k, csum)


def causal_conv1d_naive(x, weight, bias=None, state=None, segment_pos=None, activation=None):
    """Reference loop over taps (and, with ``segment_pos``, over time steps and lags); ``activation``: None | "silu"."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    y, buf = _causal_conv1d_naive(x, weight, bias, state, segment_pos)
    return (F.silu(y) if activation == "silu" else y), buf


def _causal_conv1d_naive(x, weight, bias, state, segment_pos):
    k = _check(x, weight, state, segment_pos)
    xs = _with_history(x, state, k)
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
