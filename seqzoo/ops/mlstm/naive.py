"""The obvious mLSTM references: a per-step loop (the truth) and the direct double-sum parallel form.

Every other implementation is tested against these. Autograd flows through everything, the stabiliser m
included. See README.md for the equations. A document start (``reset[:, t]``) replaces the state entering step t by
the fresh ``C = n = 0, m = 0``: from there on the step loop is exactly a new stream (README.md §6).
"""

from __future__ import annotations

import torch

from .common import check_inputs, compute_dtype, log_forget, zero_state


def mlstm_naive_recurrent(q, k, v, i, f, state=None, eps: float = 1e-6, forget_gate: str = "sigmoid", reset=None):
    """Loop over t of the recurrent form (arXiv:2405.04517 §2.3). Returns ``h (B, T, H, V)`` and the final ``(C, n, m)``.
    ``reset (B, T)`` bool: True where a document starts (the state entering that step is the zero state)."""
    B, T, H, K, V = check_inputs(q, k, v, i, f, state, forget_gate, eps, reset)
    ct = compute_dtype(q.dtype)
    C, n, m = zero_state(B, H, K, V, ct, q.device) if state is None else (s.to(ct) for s in state)
    scale = K**-0.5
    hs = []
    for t in range(T):
        qt = q[:, t].to(ct) * scale  # (B, H, K)
        kt, vt = k[:, t].to(ct), v[:, t].to(ct)
        it = i[:, t].to(ct)  # (B, H)
        phi = log_forget(f[:, t].to(ct), forget_gate)
        if reset is not None:  # a document starts: forget everything, stabiliser included
            keep = ~reset[:, t, None]  # (B, 1)
            C = torch.where(keep[..., None, None], C, torch.zeros_like(C))
            n = torch.where(keep[..., None], n, torch.zeros_like(n))
            m = torch.where(keep, m, torch.zeros_like(m))
        m_new = torch.maximum(phi + m, it)
        fp = torch.exp(phi + m - m_new)
        ip = torch.exp(it - m_new)
        C = fp[..., None, None] * C + ip[..., None, None] * kt[..., :, None] * vt[..., None, :]
        n = fp[..., None] * n + ip[..., None] * kt
        num = torch.einsum("bhk,bhkv->bhv", qt, C)
        qn = torch.einsum("bhk,bhk->bh", qt, n)
        den = torch.maximum(qn.abs(), torch.exp(-m_new)) + eps
        hs.append(num / den[..., None])
        m = m_new
    return torch.stack(hs, dim=1).to(v.dtype), (C, n, m)


def mlstm_naive_parallel(q, k, v, i, f, eps: float = 1e-6, forget_gate: str = "sigmoid", reset=None):
    """The parallel form (arXiv:2405.04517, appendix) from a zero state, with F_ij written as a double sum (O(T^3), tiny T only). Output only.
    ``reset (B, T)``: a pair (a, b) whose span (b, a] holds a document start gets weight 0 (log-weight -inf)."""
    B, T, H, K, V = check_inputs(q, k, v, i, f, None, forget_gate, eps, reset)
    ct = compute_dtype(q.dtype)
    phi = log_forget(f.to(ct), forget_gate).transpose(1, 2)  # (B, H, T)
    ig = i.to(ct).transpose(1, 2)  # (B, H, T)
    rows = []
    for a in range(T):
        cols = []
        for b in range(T):
            if b > a:
                cols.append(torch.full_like(ig[..., 0], float("-inf")))
            else:
                col = phi[..., b + 1 : a + 1].sum(-1) + ig[..., b]  # F_ab + i_b
                if reset is not None:  # another document: no weight
                    crossed = reset[:, b + 1 : a + 1].any(-1)[:, None]  # (B, 1)
                    col = col.masked_fill(crossed, float("-inf"))
                cols.append(col)
        rows.append(torch.stack(cols, -1))
    Dt = torch.stack(rows, -2)  # (B, H, T, T)
    m = Dt.max(-1, keepdim=True).values
    D = torch.exp(Dt - m)
    qs = q.to(ct).transpose(1, 2) * K**-0.5  # (B, H, T, K)
    Ct = (qs @ k.to(ct).transpose(1, 2).transpose(-1, -2)) * D  # (B, H, T, T)
    b = Ct.sum(-1, keepdim=True)
    h = (Ct / (torch.maximum(b.abs(), torch.exp(-m)) + eps)) @ v.to(ct).transpose(1, 2)  # (B, H, T, V)
    return h.transpose(1, 2).to(v.dtype)
