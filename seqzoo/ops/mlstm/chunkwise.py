"""mLSTM chunkwise form (TFLA, arXiv:2503.14376): linear in T, inter-chunk state passing, any T.

Within chunk c (local index tau = 1..L), with b_tau = sum_{l<=tau} phi_l, g = b_L and
a_tau = sum_{l>tau} phi_l + i_tau (a suffix sum, never g - b_tau):

    inter-chunk:  m_c = max(g + m_{c-1}, max_tau a_tau)
                  C_c = e^{g+m_{c-1}-m_c} C_{c-1} + sum_tau e^{a_tau-m_c} k_tau v_tau^T   (n_c alike)
    intra-chunk:  D~ = F + i_sigma (stable F, see parallel.py);  M = max(b + m_{c-1}, max_sigma D~)
                  h = [e^{b+m_{c-1}-M} (s q)^T C_{c-1} + sum_sigma e^{D~-M} (s q.k_sigma) v_sigma] / (max(|den|, e^{-M}) + eps)

The m_c come first (a loop over (B, H) scalars), the C_c from ``ops/chunk_states.py`` (one fused multiply-add per
chunk, own backward); the normaliser scales S and the state weight before the output matmuls (README.md §3).
T that is not a multiple of L: the whole chunks run first, then the tail runs as one shorter chunk from the
carried state, which is exact (no padding). Autograd flows through the stabilisers (README.md).

Packed documents (``reset (B, T)``, README.md §6), with r the count of starts inside the chunk up to tau: pairs
with r_tau != r_sigma are masked (-inf); the carried state reaches only the rows before the chunk's first start
(r = 0), and for the other rows the state column is a new document's fresh state (weight 0, log-weight the
within-document prefix b'_tau, m = 0), so M is what a fresh stream would use; the chunk's end state gathers only
the keys after its last start (a_tau = -inf before it), and a chunk holding a start drops C_{c-1} (decay 0) and
restarts its stabiliser: m_c = max(b'_L, max_tau a_tau). Every log-decay sum restarts at a start; none is a
difference of sums that cross one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from ...errors import InputError
from ..chunk_states import chunk_states
from .common import check_inputs, compute_dtype, doc_index, log_forget, lower_bound, within_doc_prefix, zero_state
from .parallel import stable_forget_matrix


def _chunks(qq, kk, vv, ig, phi, state, L: int, eps: float, scale: float, reset=None):
    """Inputs already in the compute dtype, ``qq, kk (B, T, H, K)`` (q not yet scaled: ``scale`` is applied to the
    (L, L) scores and the per-row weights instead of a pass over q and its gradient), ``vv (B, T, H, V)``,
    ``ig, phi (B, T, H)``, ``reset (B, T)`` bool or None; T is a multiple of L."""
    # one contiguous copy each: every matmul below then takes a view, where the strided rearrange made each
    # matmul copy its operand again (q three times, k and v twice), and autograd kept every copy
    q = rearrange(qq, "b (n l) h k -> b h n l k", l=L).contiguous()
    k = rearrange(kk, "b (n l) h k -> b h n l k", l=L).contiguous()
    v = rearrange(vv, "b (n l) h v -> b h n l v", l=L).contiguous()
    ig = rearrange(ig, "b (n l) h -> b h n l", l=L)
    phi = rearrange(phi, "b (n l) h -> b h n l", l=L)

    suffix = phi.flip(-1).cumsum(-1).flip(-1)  # sum_{l>=tau} phi_l
    a = F.pad(suffix[..., 1:], (0, 1)) + ig  # sum_{l>tau} phi_l + i_tau
    Fm = stable_forget_matrix(phi)  # (B, H, NC, L, L)
    if reset is None:
        before = has_start = None
        b = phi.cumsum(-1)  # (B, H, NC, L) local prefix sums
    else:
        seen = doc_index(rearrange(reset, "b (n l) -> b 1 n l", l=L))  # (B, 1, NC, L): starts in the chunk up to tau
        before, has_start = seen == 0, seen[..., -1] > 0  # rows reading C_{c-1}; chunks that drop it
        a = a.masked_fill(seen != seen[..., -1:], float("-inf"))  # the end state holds only the last document's keys
        Fm = Fm.masked_fill(seen[..., :, None] != seen[..., None, :], float("-inf"))
        b = within_doc_prefix(phi, seen)  # b'_tau: restarts at each start
    g = b[..., -1]  # (B, H, NC) log decay from the chunk's (last document's) start to its end
    amax = a.max(-1).values  # (B, H, NC)

    C0, n0, m0 = state
    # the stabilisers first (a loop over (B, H) scalars, the same ops as the per-chunk recurrence), so that each
    # chunk's write weights e^{a - m_c} and decay e^{g + m_{c-1} - m_c} are known before any matrix is touched
    m, ms = m0, []
    for c, (gc, ac) in enumerate(zip(g.unbind(-1), amax.unbind(-1))):
        if has_start is not None:  # a new document: the stabiliser restarts from the fresh state's m = 0
            m = m.masked_fill(has_start[..., c], 0.0)
        m = torch.maximum(gc + m, ac)
        ms.append(m)
    m_after = torch.stack(ms, -1)  # (B, H, NC): m_c
    m_prev = torch.cat([m0[..., None], m_after[..., :-1]], -1)  # m_{c-1}: stabiliser entering each chunk
    w = torch.exp(a - m_after[..., None])  # (B, H, NC, L) <= 1
    wk = w[..., None] * k
    kv_c = wk.transpose(-1, -2) @ v  # (B, H, NC, K, V)
    kn_c = (w[..., None, :] @ k).transpose(-1, -2)  # (B, H, NC, K, 1); a matmul, as bench/flops.py counts it
    decay = torch.exp(g + m_prev - m_after)
    if has_start is not None:  # C_{c-1} belongs to an earlier document: dropped (its exponent above is unused)
        decay = decay.masked_fill(has_start, 0.0)
    decay = decay[..., None, None]  # (B, H, NC, 1, 1)
    C_in, C = chunk_states(decay, kv_c, C0)  # (B, H, NC, K, V): the state each chunk's queries read
    n_in, n = chunk_states(decay, kn_c, n0[..., None])
    m = m_after[..., -1]

    Dt = Fm + ig[..., None, :]  # (B, H, NC, L, L)
    # (B, H, NC, L): log-weight of the state entering the row; rows after a start see a new document's fresh
    # state (m = 0, weight 0 below), which keeps M what a fresh stream would take
    init = b + (m_prev[..., None] if before is None else torch.where(before, m_prev[..., None], 0.0))
    M = torch.maximum(Dt.max(-1).values, init)
    D = torch.exp(Dt - M[..., None])
    S = (q @ k.transpose(-1, -2)) * D  # (B, H, NC, L, L)
    w0 = torch.exp(init - M)
    if before is not None:
        w0 = w0.masked_fill(~before, 0.0)
    den = scale * (S.sum(-1) + w0 * (q @ n_in).squeeze(-1))  # the scale s of s q, applied to the row sums
    # normalise S and the state weight before the matmuls: the division then touches (L, L) and (L, K) tensors,
    # not the (L, V) output, and the intra- and inter-chunk terms sum inside one baddbmm
    r = scale / (torch.maximum(den.abs(), lower_bound(M)) + eps)  # (B, H, NC, L): s / normaliser
    qC = (q * (w0 * r)[..., None]) @ C_in  # (B, H, NC, L, V)
    Sr = S * r[..., None]
    h = qC.flatten(0, 2).baddbmm_(Sr.flatten(0, 2), v.flatten(0, 2)).view(qC.shape)  # in place: bmm keeps no output
    return rearrange(h, "b h n l v -> b (n l) h v"), (C, n.squeeze(-1), m)


def mlstm_chunkwise(
    q, k, v, i, f, state=None, chunk_size: int = 64, eps: float = 1e-6, forget_gate: str = "sigmoid", reset=None
):
    """``q, k (B, T, H, K)``, ``v (B, T, H, V)``, ``i, f (B, T, H)``, ``reset (B, T)`` bool or None -> ``h (B, T, H,
    V)``, final ``(C, n, m)``."""
    B, T, H, K, V = check_inputs(q, k, v, i, f, state, forget_gate, eps, reset)
    if not isinstance(chunk_size, int) or chunk_size <= 0:
        raise InputError(f"mlstm: chunk_size must be a positive int, got {chunk_size!r}")
    ct = compute_dtype(q.dtype)
    st = zero_state(B, H, K, V, ct, q.device) if state is None else tuple(s.to(ct) for s in state)
    qq = q.to(ct)
    kk, vv, ig = k.to(ct), v.to(ct), i.to(ct)
    phi = log_forget(f.to(ct), forget_gate)
    L = min(chunk_size, T)
    T_main = (T // L) * L
    outs = []
    inputs, s = (qq, kk, vv, ig, phi), K**-0.5
    # unsliced when T is whole chunks: a slice would make autograd build each input's gradient in a fresh
    # (B, T, H, .) tensor, losing the layout q, k, v may come in (ops/mlstm/headwise.py writes them per head)
    rs = (None, None) if reset is None else (reset[:, :T_main], reset[:, T_main:])
    h, st = _chunks(*(inputs if T_main == T else (t[:, :T_main] for t in inputs)), st, L, eps, s, rs[0])
    outs.append(h)
    if T_main < T:  # the tail: one shorter chunk from the carried state
        h, st = _chunks(*(t[:, T_main:] for t in inputs), st, T - T_main, eps, s, rs[1])
        outs.append(h)
    h = outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
    return h.to(v.dtype), st
