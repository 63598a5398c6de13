"""GateLoop's surrogate-attention form (paper §3.3, eqs. 14-21), computed so that it cannot over/underflow.

The paper writes  π_n = Π_{j<=n} a_j,  Y = ((Q ⊙ Π)(K ⊙ Π⁻¹)ᵀ ⊙ M) V  with M causal (diagonal included).
1/π_n overflows after a few hundred tokens, so ``gateloop_attention`` uses relative quantities only:

    A_nm = Σ_d q_nd k_md · exp(Σ_{m<j<=n} log|a_jd|) · cos(Φ_nd - Φ_md)     (m <= n, 0 above),  Φ_n = Σ_{j<=n} θ_j
    y_n  = Σ_m A_nm v_m + Re((q_n ⊙ e^{L_n + iΦ_n})ᵀ S_0),   L_n = Σ_{j<=n} log|a_j|

The cosine is split by the rotating frame (``common.rotating_frame``: cos(Φ_n - Φ_m) = cos Φ_n cos Φ_m + sin Φ_n
sin Φ_m, Φ summed in fp64 and wrapped), and the decays by ``scores.decayed_scores`` (hierarchical matmuls, every
factor e^{sum of log|a|} <= 1), so A is built from matmuls of q, k of width 2K: O(T²·K) flops, O(T²) memory,
no T×T×K intermediate. It is the chunkwise algorithm with one chunk of T tokens, its sums of log|a| in fp64
(fp32 cumulative sums over thousands of tokens lose ~1e-4 relative accuracy). ``gateloop_attention_unsafe`` is the
paper's literal form, kept to document its failure (tests, T <= 32).
"""

from __future__ import annotations

import torch

from .chunkwise import frame_form
from .common import document_cumsum, prepare, rotating_frame, transition
from .scores import decayed_scores


def _causal(T: int, device) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()  # [n, m]: m <= n


def _pow2_pad(x: torch.Tensor, P: int) -> torch.Tensor:
    """Zero-pad the time axis (dim 2 of a heads-first tensor) to P tokens (pad tokens neither write nor decay)."""
    T = x.shape[2]
    return x if P == T else torch.cat([x, x.new_zeros(*x.shape[:2], P - T, *x.shape[3:])], dim=2)


def relative_scores(
    q, k, log_mag, phase, upper: float = 0.0, starts=None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``A (B, H, T, T)`` of the surrogate form (compute dtype; ``upper`` above the diagonal and, with ``starts (B,
    T)`` bool, across document starts, where log|a| and θ must be 0) and the fp64 cumulative sums ``L, Φ (B, T, H,
    K)``, restarted at each document start."""
    T = q.shape[1]
    L, Phi = document_cumsum(log_mag, starts), document_cumsum(phase, starts)  # (B, T, H, K) fp64
    q, k, log_mag, phase = (t.transpose(1, 2) for t in (q, k, log_mag, phase))  # heads first
    qh, kh, _ = rotating_frame(q, k, phase)  # (B, H, T, 2, K)
    P = 1 << (T - 1).bit_length()
    sp = None if starts is None else torch.nn.functional.pad(starts, (0, P - T))[:, None]  # (B, 1, P)
    A = decayed_scores(_pow2_pad(qh, P), _pow2_pad(kh, P), _pow2_pad(log_mag, P), upper=upper, starts=sp)
    return A[..., :T, :T], L, Phi


def gateloop_attention(q, k, v, log_mag, phase=None, state=None, segment_pos=None):
    """Same inputs / outputs as ``gateloop_naive`` (one chunk of T tokens; document starts as in chunkwise)."""
    return frame_form(q, k, v, log_mag, phase, state, None, segment_pos)


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
