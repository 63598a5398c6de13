"""mLSTM chunkwise form (TFLA, arXiv:2503.14376): linear in T, inter-chunk state passing, any T.

Within chunk c (local index tau = 1..L), with b_tau = sum_{l<=tau} phi_l, g = b_L and
a_tau = sum_{l>tau} phi_l + i_tau (a suffix sum, never g - b_tau):

    inter-chunk:  m_c = max(g + m_{c-1}, max_tau a_tau)
                  C_c = e^{g+m_{c-1}-m_c} C_{c-1} + sum_tau e^{a_tau-m_c} k_tau v_tau^T   (n_c alike)
    intra-chunk:  D~ = F + i_sigma (stable F, see parallel.py);  M = max(b + m_{c-1}, max_sigma D~)
                  h = [e^{b+m_{c-1}-M} (s q)^T C_{c-1} + sum_sigma e^{D~-M} (s q.k_sigma) v_sigma] / (max(|den|, e^{-M}) + eps)

T that is not a multiple of L: the whole chunks run first, then the tail runs as one shorter chunk from the
carried state, which is exact (no padding). Autograd flows through the stabilisers (README.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from ...errors import InputError
from .common import check_inputs, compute_dtype, log_forget, lower_bound, zero_state
from .parallel import stable_forget_matrix


def _chunks(qs, kk, vv, ig, phi, state, L: int, eps: float):
    """Inputs already in the compute dtype, ``qs, kk (B, T, H, K)`` (q scaled), ``vv (B, T, H, V)``,
    ``ig, phi (B, T, H)``; T is a multiple of L."""
    # one contiguous copy each: every matmul below then takes a view, where the strided rearrange made each
    # matmul copy its operand again (q three times, k and v twice), and autograd kept every copy
    q = rearrange(qs, "b (n l) h k -> b h n l k", l=L).contiguous()
    k = rearrange(kk, "b (n l) h k -> b h n l k", l=L).contiguous()
    v = rearrange(vv, "b (n l) h v -> b h n l v", l=L).contiguous()
    ig = rearrange(ig, "b (n l) h -> b h n l", l=L)
    phi = rearrange(phi, "b (n l) h -> b h n l", l=L)

    b = phi.cumsum(-1)  # (B, H, NC, L) local prefix sums
    g = b[..., -1]  # (B, H, NC) whole-chunk log decay
    suffix = phi.flip(-1).cumsum(-1).flip(-1)  # sum_{l>=tau} phi_l
    a = F.pad(suffix[..., 1:], (0, 1)) + ig  # sum_{l>tau} phi_l + i_tau
    amax = a.max(-1).values  # (B, H, NC)
    w = torch.exp(a - amax[..., None])  # (B, H, NC, L) <= 1
    wk = w[..., None] * k
    kv_c = wk.transpose(-1, -2) @ v  # (B, H, NC, K, V)
    kn_c = (w[..., None, :] @ k).squeeze(-2)  # (B, H, NC, K); a matmul, as bench/flops.py counts it

    C, n, m = state
    qC, qn, ms = [], [], []
    # unbind, not kv_c[:, :, c]: the backward of an index builds a zero tensor of the whole (B, H, NC, K, V) per
    # chunk (NC of them: 20 % of an mLSTM layer's fwd+bwd on CPU), unbind's backward stacks the NC grads once.
    # Each chunk's queries read the entering state here, so no stacked copy of the NC states is kept for backward.
    steps = zip(q.unbind(2), g.unbind(2), amax.unbind(2), kv_c.unbind(2), kn_c.unbind(2))
    for q_c, gc, ac, kvc, knc in steps:  # sequential inter-chunk recurrence: the only loop, T/L steps
        qC.append(q_c @ C)  # (B, H, L, V)
        qn.append((q_c @ n[..., None]).squeeze(-1))  # (B, H, L)
        ms.append(m)
        m_new = torch.maximum(gc + m, ac)
        fC = torch.exp(gc + m - m_new)
        fa = torch.exp(ac - m_new)
        C = fC[..., None, None] * C + fa[..., None, None] * kvc
        n = fC[..., None] * n + fa[..., None] * knc
        m = m_new
    m_prev = torch.stack(ms, 2)  # (B, H, NC): stabiliser entering each chunk

    Dt = stable_forget_matrix(phi) + ig[..., None, :]  # (B, H, NC, L, L)
    init = b + m_prev[..., None]  # (B, H, NC, L)
    M = torch.maximum(Dt.max(-1).values, init)
    D = torch.exp(Dt - M[..., None])
    S = (q @ k.transpose(-1, -2)) * D  # (B, H, NC, L, L)
    w0 = torch.exp(init - M)
    num = S @ v + w0[..., None] * torch.stack(qC, 2)  # (B, H, NC, L, V)
    den = S.sum(-1) + w0 * torch.stack(qn, 2)
    h = num / (torch.maximum(den.abs(), lower_bound(M)) + eps)[..., None]
    return rearrange(h, "b h n l v -> b (n l) h v"), (C, n, m)


def mlstm_chunkwise(q, k, v, i, f, state=None, chunk_size: int = 64, eps: float = 1e-6, forget_gate: str = "sigmoid"):
    """``q, k (B, T, H, K)``, ``v (B, T, H, V)``, ``i, f (B, T, H)`` -> ``h (B, T, H, V)``, final ``(C, n, m)``."""
    B, T, H, K, V = check_inputs(q, k, v, i, f, state, forget_gate, eps)
    if not isinstance(chunk_size, int) or chunk_size <= 0:
        raise InputError(f"mlstm: chunk_size must be a positive int, got {chunk_size!r}")
    ct = compute_dtype(q.dtype)
    st = zero_state(B, H, K, V, ct, q.device) if state is None else tuple(s.to(ct) for s in state)
    qs = q.to(ct) * K**-0.5
    kk, vv, ig = k.to(ct), v.to(ct), i.to(ct)
    phi = log_forget(f.to(ct), forget_gate)
    L = min(chunk_size, T)
    T_main = (T // L) * L
    outs = []
    h, st = _chunks(qs[:, :T_main], kk[:, :T_main], vv[:, :T_main], ig[:, :T_main], phi[:, :T_main], st, L, eps)
    outs.append(h)
    if T_main < T:  # the tail: one shorter chunk from the carried state
        tail = T - T_main
        h, st = _chunks(qs[:, T_main:], kk[:, T_main:], vv[:, T_main:], ig[:, T_main:], phi[:, T_main:], st, tail, eps)
        outs.append(h)
    h = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
    return h.to(v.dtype), st
