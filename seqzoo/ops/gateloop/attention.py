"""GateLoop's surrogate-attention form (paper §3.3, eqs. 14-21), computed so that it cannot over/underflow.

The paper writes  π_n = Π_{j<=n} a_j,  Y = ((Q ⊙ Π)(K ⊙ Π⁻¹)ᵀ ⊙ M) V  with M causal (diagonal included).
1/π_n overflows after a few hundred tokens, so ``gateloop_attention`` uses relative quantities only:

    L_n = Σ_{j<=n} log|a_j|,  Φ_n = Σ_{j<=n} θ_j                 (fp64 cumulative sums)
    A_nm = Σ_d q_nd k_md · exp(L_n - L_m) · cos(Φ_n - Φ_m)       (m <= n; the exponent is -inf above the diagonal)
    y_n  = Σ_m A_nm v_m + Re((q_n ⊙ e^{L_n + iΦ_n})ᵀ S_0)

Every exponent is <= 0. The mask is applied to the exponent (before exp), never as a 0/1 product, so no
inf·0 = NaN appears in the backward pass. ``gateloop_attention_unsafe`` is the paper's literal form, kept
to document its failure (tests, T <= 32). Memory is O(B·T²·H·K).
"""

from __future__ import annotations

import torch

from .common import cexp, complex_dtype, prepare, transition


def _causal(T: int, device) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()  # [n, m]: m <= n


def relative_scores(q, k, log_mag, phase) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``A (B, H, T, T)`` of the surrogate form (compute dtype) and the fp64 cumulative sums ``L, Φ (B, T, H, K)``."""
    dt = q.dtype
    L = log_mag.double().cumsum(1)  # (B, T, H, K) fp64
    Phi = phase.double().cumsum(1)
    E = L[:, :, None] - L[:, None, :]  # (B, Tn, Tm, H, K): L_n - L_m, fp64
    dPhi = Phi[:, :, None] - Phi[:, None, :]
    causal = _causal(q.shape[1], q.device)[None, :, :, None, None]
    E = E.masked_fill(~causal, float("-inf"))  # mask the exponent, not the product
    W = torch.exp(E.to(dt)) * torch.cos(dPhi).to(dt)  # (B, Tn, Tm, H, K)
    A = torch.einsum("bnhk,bmhk,bnmhk->bhnm", q, k, W)  # (B, H, T, T)
    return A, L, Phi


def gateloop_attention(q, k, v, log_mag, phase=None, state=None):
    """Same inputs / outputs as ``gateloop_naive``."""
    q, k, v, log_mag, phase, state = prepare(q, k, v, log_mag, phase, state)
    cd = complex_dtype(q.dtype)
    A, L, Phi = relative_scores(q, k, log_mag, phase)
    y = torch.einsum("bhnm,bmhv->bnhv", A, v)  # (B, T, H, V)
    # final state: S_T = Σ_m diag(e^{(L_T - L_m) + i(Φ_T - Φ_m)}) k_m v_mᵀ  [+ diag(e^{L_T + iΦ_T}) S_0]
    to_end = cexp(L[:, -1:] - L, Phi[:, -1:] - Phi).to(cd)  # (B, T, H, K)
    S = torch.einsum("bmhk,bmhv->bhkv", k * to_end, v.to(cd))  # (B, H, K, V)
    if state is not None:
        from_start = cexp(L, Phi).to(cd)  # (B, T, H, K): Π_{j<=n} a_j, |.| <= 1
        y = y + torch.einsum("bnhk,bhkv->bnhv", q * from_start, state).real
        S = S + from_start[:, -1, :, :, None] * state
    return y, S


def gateloop_attention_unsafe(q, k, v, log_mag, phase=None, state=None):
    """The paper's literal form with π_n and 1/π_n (fp64 overflows near T ≈ 900, fp32 near T ≈ 110)."""
    q, k, v, log_mag, phase, state = prepare(q, k, v, log_mag, phase, state)
    a = transition(log_mag, phase)  # (B, T, H, K) complex
    pi = torch.cumprod(a, dim=1)  # Π_{j<=n} a_j
    Qt = q * pi  # Q ⊙ Π
    Kt = k / pi  # K ⊙ Π⁻¹
    A = torch.einsum("bnhk,bmhk->bhnm", Qt, Kt).real  # plain transpose, no conjugation
    A = A * _causal(q.shape[1], q.device).to(A.dtype)  # the 0/1 mask M of eq. 21
    y = torch.einsum("bhnm,bmhv->bnhv", A, v)
    S = pi[:, -1, :, :, None] * torch.einsum("bmhk,bmhv->bhkv", Kt, v.to(a.dtype))
    if state is not None:
        y = y + torch.einsum("bnhk,bhkv->bnhv", Qt, state).real
        S = S + pi[:, -1, :, :, None] * state
    return y, S
