"""GateLoop in chunks (beyond the paper): matmuls inside chunks of C tokens, state passing between them.

Inside one chunk (local positions τ = 1..C, incoming state S), with λ_j = log|a_j| + iθ_j per key dim:

    F_τ  = Σ_{j<=τ} λ_j          G_σ = Σ_{σ<j<=C} λ_j          D_τσ = Σ_{σ<j<=τ} λ_j  (σ <= τ)
    y_τ   = Re((q_τ ⊙ e^{F_τ})ᵀ S) + Σ_{σ<=τ} [Σ_d q_τd k_σd e^{Re D_τσd} cos(Im D_τσd)] v_σ
    S_out = diag(e^{F_C}) S + Σ_σ (k_σ ⊙ e^{G_σ}) v_σᵀ

All exponents have real part <= 0 (no overflow). D is built as segment sums (cumsum down the rows of the
strictly-lower masked C×C matrix), never as differences of cumulative sums, and phases stay chunk-local
(θ wrapped into [-π, π) first), so fp32 keeps ~1e-6 relative accuracy at any T. Work is linear in T:
O(T·C·(K+V) + T·K·V) per head; memory O(B·T·C·H·K) for the intra-chunk decays.
Pad tokens (k = q = v = 0, log|a| = 0, θ = 0) write nothing and do not decay the state.
"""

from __future__ import annotations

import torch

from ...errors import InputError
from .common import cexp, complex_dtype, prepare, wrap_phase


def _segment_sums(x: torch.Tensor) -> torch.Tensor:
    """``x (B, N, C, H, K)`` -> ``D (B, N, C, C, H, K)`` with D[τ, σ] = Σ_{σ<j<=τ} x_j (0 for σ >= τ)."""
    C = x.shape[2]
    strict = torch.ones(C, C, dtype=torch.bool, device=x.device).tril(-1)[:, :, None, None]  # [τ, σ]: τ > σ
    X = x[:, :, :, None].expand(*x.shape[:3], C, *x.shape[3:])  # X[τ, σ] = x_τ
    X = X.masked_fill(~strict, 0.0)
    return X.cumsum(dim=2)  # sum over rows j <= τ of x_j [j > σ]


def _exclusive_reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    """G_σ = Σ_{σ<j<=C} x_j along dim 2: reverse cumsum of the sequence shifted by one (no subtraction)."""
    shifted = torch.cat([x[:, :, 1:], torch.zeros_like(x[:, :, :1])], dim=2)  # x_{σ+1}, ..., x_C, 0
    return shifted.flip(2).cumsum(2).flip(2)


def gateloop_chunkwise(q, k, v, log_mag, phase=None, state=None, chunk_size: int = 64):
    """Same inputs / outputs as ``gateloop_naive``; ``chunk_size`` is C."""
    if not isinstance(chunk_size, int) or chunk_size <= 0:
        raise InputError(f"gateloop chunkwise: chunk_size must be a positive int, got {chunk_size!r}")
    q, k, v, log_mag, phase, state = prepare(q, k, v, log_mag, phase, state)
    cd = complex_dtype(q.dtype)
    B, T, H, K = q.shape
    V = v.shape[-1]
    C = min(chunk_size, T)
    N = -(-T // C)
    pad = N * C - T
    phase = wrap_phase(phase)
    if pad:
        q, k, log_mag, phase = (torch.cat([t, t.new_zeros(B, pad, H, K)], dim=1) for t in (q, k, log_mag, phase))
        v = torch.cat([v, v.new_zeros(B, pad, H, V)], dim=1)
    # (B, N*C, H, X) -> (B, N, C, H, X)
    q, k, log_mag, phase = (t.reshape(B, N, C, H, K) for t in (q, k, log_mag, phase))
    v = v.reshape(B, N, C, H, V)

    # intra-chunk: A_τσ = Σ_d q_τd k_σd e^{Re D} cos(Im D), the exponent masked to -inf above the diagonal
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()[:, :, None, None]  # [τ, σ]: σ <= τ
    D_re = _segment_sums(log_mag).masked_fill(~causal, float("-inf"))  # (B, N, C, C, H, K)
    D_im = _segment_sums(phase)
    W = torch.exp(D_re) * torch.cos(D_im)
    A = torch.einsum("bnthk,bnshk,bntshk->bnhts", q, k, W)  # (B, N, H, C, C)
    y = torch.einsum("bnhts,bnshv->bnthv", A, v)  # (B, N, C, H, V)

    # chunk summaries: what a chunk writes (U) and how it decays an incoming state (P)
    G = cexp(_exclusive_reverse_cumsum(log_mag), _exclusive_reverse_cumsum(phase))  # (B,N,C,H,K)
    U = torch.einsum("bnshk,bnshv->bnhkv", k * G, v.to(cd))  # (B, N, H, K, V)
    F = cexp(log_mag.cumsum(2), phase.cumsum(2))  # (B, N, C, H, K): e^{F_τ}
    P = F[:, :, -1]  # (B, N, H, K)

    S = state if state is not None else torch.zeros(B, H, K, V, dtype=cd, device=q.device)
    starts = []
    for n in range(N):  # sequential state passing over the T/C chunks
        starts.append(S)
        S = P[:, n, :, :, None] * S + U[:, n]
    S_in = torch.stack(starts, dim=1)  # (B, N, H, K, V): state entering each chunk
    y = y + torch.einsum("bnthk,bnhkv->bnthv", q * F, S_in).real  # inter-chunk term Re((q ⊙ e^F)ᵀ S)
    return y.reshape(B, N * C, H, V)[:, :T], S
