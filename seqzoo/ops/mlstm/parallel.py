"""mLSTM parallel (quadratic) form (arXiv:2405.04517, appendix), with the cancellation-free ("stablef") forget matrix.

    F_ij = sum_{l=j+1..i} phi_l (j <= i, else -inf);  D~_ij = F_ij + i_j;  m_i = max_j D~_ij
    C~ = (s Q K^T) o exp(D~ - m);  h = C~ V / (max(|rowsum C~|, exp(-m)) + eps)

F is built by a cumsum down the rows of a matrix holding phi_i left of the diagonal, so each entry sums
only its own terms (no difference of two large prefix sums). Unlike the reference cell this form also
takes an initial state (C0, n0, m0) and returns the final one: the state enters as one extra "column"
with log-weight ``sum_{l<=i} phi_l + m0``. With no state the stabiliser is the reference's max_j D~_ij.
"""

from __future__ import annotations

import torch
from einops import rearrange

from .common import check_inputs, compute_dtype, log_forget, lower_bound, zero_state


def stable_forget_matrix(phi: torch.Tensor) -> torch.Tensor:
    """``phi (..., T)`` -> ``F (..., T, T)`` with ``F[i, j] = sum_{j<l<=i} phi_l`` for j <= i, -inf above."""
    T = phi.shape[-1]
    strict = torch.ones(T, T, dtype=torch.bool, device=phi.device).tril(-1)  # l > j
    A = torch.where(strict, phi[..., :, None], phi.new_zeros(()))  # (..., T, T): row l holds phi_l left of diag
    Fm = A.cumsum(-2)  # F[i, j] = sum_{l<=i, l>j} phi_l
    causal = torch.ones(T, T, dtype=torch.bool, device=phi.device).tril()
    return Fm.masked_fill(~causal, float("-inf"))


def mlstm_parallel(q, k, v, i, f, state=None, eps: float = 1e-6, forget_gate: str = "sigmoid"):
    """``q, k (B, T, H, K)``, ``v (B, T, H, V)``, ``i, f (B, T, H)`` -> ``h (B, T, H, V)``, final ``(C, n, m)``."""
    B, T, H, K, V = check_inputs(q, k, v, i, f, state, forget_gate, eps)
    ct = compute_dtype(q.dtype)
    C0, n0, m0 = zero_state(B, H, K, V, ct, q.device) if state is None else (s.to(ct) for s in state)
    qs = rearrange(q.to(ct), "b t h k -> b h t k") * K**-0.5
    kk = rearrange(k.to(ct), "b t h k -> b h t k")
    vv = rearrange(v.to(ct), "b t h v -> b h t v")
    ig = rearrange(i.to(ct), "b t h -> b h t")
    phi = rearrange(log_forget(f.to(ct), forget_gate), "b t h -> b h t")

    Dt = stable_forget_matrix(phi) + ig[..., None, :]  # (B, H, T, T): D~_ij
    init = phi.cumsum(-1) + m0[..., None]  # (B, H, T): log-weight of the carried state at row i
    m = Dt.max(-1).values  # (B, H, T)
    m_state = torch.maximum(m, init)
    if state is not None:
        m = m_state
    D = torch.exp(Dt - m[..., None])
    S = (qs @ kk.transpose(-1, -2)) * D  # (B, H, T, T)
    num = S @ vv  # (B, H, T, V)
    den = S.sum(-1)  # (B, H, T)
    if state is not None:
        w0 = torch.exp(init - m)  # (B, H, T)
        num = num + w0[..., None] * (qs @ C0)
        den = den + w0 * torch.einsum("bhtk,bhk->bht", qs, n0)
    h = num / (torch.maximum(den.abs(), lower_bound(m)) + eps)[..., None]

    # final state from the last row, always stabilised with the state term included (as the recurrence does)
    mT = m_state[..., -1]  # (B, H)
    wT = torch.exp(Dt[..., -1, :] - mT[..., None])  # (B, H, T)
    w0T = torch.exp(init[..., -1] - mT)  # (B, H)
    C = w0T[..., None, None] * C0 + torch.einsum("bht,bhtk,bhtv->bhkv", wT, kk, vv)
    n = w0T[..., None] * n0 + torch.einsum("bht,bhtk->bhk", wT, kk)
    return rearrange(h, "b h t v -> b t h v").to(v.dtype), (C, n, mT)
