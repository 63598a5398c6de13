"""Reference loops for the RG-LRU (the truth the fast paths are tested against).

* ``linear_scan_naive``: ``h_t = a_t * h_{t-1} + b_t`` one step at a time, accumulated in fp32 (fp64 for fp64 input).
* ``rglru_naive``: the whole RG-LRU straight from the equations (Griffin, arXiv:2402.19427, §2.4), with the
  log-space decay, the plain ``sqrt`` and the document reset, one time step per loop iteration.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype: fp32, or fp64 when the input is fp64."""
    return torch.promote_types(dtype, torch.float32)


def linear_scan_naive(a: torch.Tensor, b: torch.Tensor, state: torch.Tensor | None = None):
    """``a, b (B, T, R)``, ``state (B, R)`` (h_0) or None -> ``h (B, T, R)`` and ``h_T (B, R)``, both in the accumulation dtype."""
    acc = acc_dtype(b.dtype)
    h = b.new_zeros(b.shape[0], b.shape[2], dtype=acc) if state is None else state.to(acc)
    out = []
    # unbind: one view per step whose backward is a single stack (indexing a[:, t] would scatter into a
    # full-size zero tensor at every step, making the backward O(T^2))
    for a_t, b_t in zip(a.unbind(1), b.unbind(1)):
        h = a_t.to(acc) * h + b_t.to(acc)
        out.append(h)
    return torch.stack(out, dim=1), h


def rglru_naive(x, gate_x, gate_a, a_param, reset=None, state=None, c: float = 8.0):
    """One loop over t of the RG-LRU.

    ``x (B, T, R)`` conv output; ``gate_x, gate_a (B, T, R)`` input / recurrence gate pre-activations;
    ``a_param (R)`` (the stored Λ̃, a = σ(−Λ̃)); ``reset (B, T)`` bool (segment_pos == 0) or None;
    ``state (B, R)`` (h_0) or None. Returns ``y (B, T, R)`` in x's dtype and ``h_T (B, R)`` in the accumulation dtype.
    """
    acc = acc_dtype(x.dtype)
    B, T, R = x.shape
    h = x.new_zeros(B, R, dtype=acc) if state is None else state.to(acc)
    ys = []
    for t in range(T):
        i_t = torch.sigmoid(gate_x[:, t])
        r_t = torch.sigmoid(gate_a[:, t])
        log_a = -c * r_t * F.softplus(a_param)
        a_t = torch.exp(log_a)
        beta = torch.sqrt(1 - torch.exp(2 * log_a))
        if reset is not None:
            rs = reset[:, t, None]
            a_t = torch.where(rs, torch.zeros_like(a_t), a_t)
            beta = torch.where(rs, torch.ones_like(beta), beta)
        h = a_t.to(acc) * h + (beta * i_t * x[:, t]).to(acc)
        ys.append(h.to(x.dtype))
    return torch.stack(ys, dim=1), h
