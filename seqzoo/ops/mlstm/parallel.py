"""mLSTM parallel (quadratic) form (arXiv:2405.04517, appendix), with the cancellation-free ("stablef") forget matrix.

    F_ij = sum_{l=j+1..i} phi_l (j <= i, else -inf);  D~_ij = F_ij + i_j;  m_i = max_j D~_ij
    C~ = (s Q K^T) o exp(D~ - m);  h = C~ V / (max(|rowsum C~|, exp(-m)) + eps)

F is built by a cumsum down the rows of a matrix holding phi_i left of the diagonal, so each entry sums
only its own terms (no difference of two large prefix sums). Unlike the reference cell this form also
takes an initial state (C0, n0, m0) and returns the final one: the state enters as one extra "column"
with log-weight ``sum_{l<=i} phi_l + m0``. With no state the stabiliser is the reference's max_j D~_ij.

Packed documents (``reset (B, T)``, README.md §6): with d = cumsum(reset) the document index, pairs with d_i != d_j
get D~_ij = -inf; the state column reaches only rows with d_i = 0 (before the first start), and its log-weight
restarts too: ``sum_{l<=i, d_l = d_i} phi_l + (m0 if d_i = 0 else 0)`` (the fresh state of a new document has
m = 0). Rows of later documents are stabilised as a call without state, so a packed row equals its documents run
alone in this mode.
"""

from __future__ import annotations

import torch
from einops import rearrange

from .common import check_inputs, compute_dtype, doc_index, log_forget, lower_bound, within_doc_prefix, zero_state


def stable_forget_matrix(phi: torch.Tensor) -> torch.Tensor:
    """``phi (..., T)`` -> ``F (..., T, T)`` with ``F[i, j] = sum_{j<l<=i} phi_l`` for j <= i, -inf above."""
    T = phi.shape[-1]
    strict = torch.ones(T, T, dtype=torch.bool, device=phi.device).tril(-1)  # l > j
    A = torch.where(strict, phi[..., :, None], phi.new_zeros(()))  # (..., T, T): row l holds phi_l left of diag
    Fm = A.cumsum(-2)  # F[i, j] = sum_{l<=i, l>j} phi_l
    causal = torch.ones(T, T, dtype=torch.bool, device=phi.device).tril()
    return Fm.masked_fill(~causal, float("-inf"))


def mlstm_parallel(q, k, v, i, f, state=None, eps: float = 1e-6, forget_gate: str = "sigmoid", reset=None):
    """``q, k (B, T, H, K)``, ``v (B, T, H, V)``, ``i, f (B, T, H)``, ``reset (B, T)`` bool or None -> ``h (B, T, H,
    V)``, final ``(C, n, m)``."""
    B, T, H, K, V = check_inputs(q, k, v, i, f, state, forget_gate, eps, reset)
    ct = compute_dtype(q.dtype)
    C0, n0, m0 = zero_state(B, H, K, V, ct, q.device) if state is None else (s.to(ct) for s in state)
    qs = rearrange(q.to(ct), "b t h k -> b h t k") * K**-0.5
    kk = rearrange(k.to(ct), "b t h k -> b h t k")
    vv = rearrange(v.to(ct), "b t h v -> b h t v")
    ig = rearrange(i.to(ct), "b t h -> b h t")
    phi = rearrange(log_forget(f.to(ct), forget_gate), "b t h -> b h t")

    Fm = stable_forget_matrix(phi)  # (B, H, T, T)
    if reset is None:
        before = None  # every row continues the carried state
        init = phi.cumsum(-1) + m0[..., None]  # (B, H, T): log-weight of the carried state at row i
    else:
        doc = doc_index(reset)[:, None]  # (B, 1, T)
        Fm = Fm.masked_fill(doc[..., :, None] != doc[..., None, :], float("-inf"))  # no pair across a start
        before = doc == 0  # (B, 1, T): rows that still read the carried state
        init = within_doc_prefix(phi, doc) + torch.where(before, m0[..., None], 0.0)
    Dt = Fm + ig[..., None, :]  # (B, H, T, T): D~_ij
    m = Dt.max(-1).values  # (B, H, T)
    m_state = torch.maximum(m, init)
    if state is not None:  # rows of a document started in this call are stabilised as a call without state
        m = m_state if before is None else torch.where(before, m_state, m)
    D = torch.exp(Dt - m[..., None])
    S = (qs @ kk.transpose(-1, -2)) * D  # (B, H, T, T)
    num = S @ vv  # (B, H, T, V)
    den = S.sum(-1)  # (B, H, T)
    if state is not None:
        w0 = torch.exp(init - m)  # (B, H, T)
        if before is not None:
            w0 = w0.masked_fill(~before, 0.0)
        num = num + w0[..., None] * (qs @ C0)
        den = den + w0 * torch.einsum("bhtk,bhk->bht", qs, n0)
    h = num / (torch.maximum(den.abs(), lower_bound(m)) + eps)[..., None]

    # final state from the last row, always stabilised with the state term included (as the recurrence does; for a
    # document started in this call that term is the fresh state, m = 0, whose weight is 0)
    mT = m_state[..., -1]  # (B, H)
    wT = torch.exp(Dt[..., -1, :] - mT[..., None])  # (B, H, T)
    w0T = torch.exp(init[..., -1] - mT)  # (B, H)
    if before is not None:
        w0T = w0T.masked_fill(~before[..., -1], 0.0)
    C = w0T[..., None, None] * C0 + torch.einsum("bht,bhtk,bhtv->bhkv", wT, kk, vv)
    n = w0T[..., None] * n0 + torch.einsum("bht,bhtk->bhk", wT, kk)
    return rearrange(h, "b h t v -> b t h v").to(v.dtype), (C, n, mT)
