"""The GateLoop recurrence as an obvious loop over time: the truth every other form is tested against.

    S_n = diag(a_n) S_{n-1} + k_n v_nᵀ,   a_n = exp(log|a_n| + i θ_n),   y_n = Re(q_nᵀ S_n)

O(T) steps; in fp64 (complex128) it is the reference, in fp32 it is the decode step (``mode="recurrent"``).
Packed documents: at a start (``segment_pos == 0``) the transition is a_t = 0, so S_t = k_t v_tᵀ restarts the state.
"""

from __future__ import annotations

import torch

from .common import complex_dtype, document_starts, prepare, transition, zero_at_starts


def gateloop_naive(q, k, v, log_mag, phase=None, state=None, segment_pos=None):
    """``q, k, log_mag, phase (B, T, H, K)``, ``v (B, T, H, V)``, ``state (B, H, K, V)`` complex or None,
    ``segment_pos (B, T)`` or None (0: a document starts, a_t = 0 there).

    Returns ``y (B, T, H, V)`` (real, compute dtype) and the final state ``(B, H, K, V)`` complex.
    """
    q, k, v, log_mag, phase, state = prepare(q, k, v, log_mag, phase, state)
    B, T, H, K = q.shape
    V = v.shape[-1]
    a = zero_at_starts(transition(log_mag, phase), document_starts(segment_pos, q.device))  # (B, T, H, K) complex
    S = state if state is not None else torch.zeros(B, H, K, V, dtype=complex_dtype(q.dtype), device=q.device)
    ys = []
    for t in range(T):
        kv = k[:, t, :, :, None] * v[:, t, :, None, :]  # (B, H, K, V) real outer product k_t v_tᵀ
        S = a[:, t, :, :, None] * S + kv  # a_t scales the key rows of S
        ys.append(torch.einsum("bhk,bhkv->bhv", q[:, t], S.real))  # Re(q_tᵀ S_t) = q_tᵀ Re S_t (q real)
    return torch.stack(ys, dim=1), S  # (B, T, H, V), (B, H, K, V)
