"""A block of GateLoop tokens reduced to its effect on the state: what context parallelism gathers from each rank.

GateLoop's recurrence S_n = diag(a_n) S_{n-1} + k_n v_nᵀ (Katsch, arXiv:2311.01927, §3) is linear in S, so a block
of tokens n = 1..L acts on the state entering it as

    S_L = diag(A) S_0 + S_L⁰,     A = Π_n a_n,     S_L⁰ = Σ_σ (Π_{σ<n<=L} a_n) k_σ v_σᵀ   (the state from S_0 = 0)

and the ranks' summaries (A, S_L⁰) combine with ``context_parallel.linear_combine`` (LASP-2, arXiv:2502.07563).
S_L⁰ is the chunkwise form's outgoing state of one chunk holding the whole block (``chunkwise.py``: keys weighted
by e^{G_σ}, G_σ = Σ_{σ<n<=L} log|a_n|, in the rotating frame, then ``unframe_state``): no output is computed. A
document start in the block (``segment_pos == 0``) makes a_n = 0 there, so A = 0 and S_L⁰ holds only the keys from
the last start on.
"""

from __future__ import annotations

import torch

from .common import cexp, document_starts, prepare, rotating_frame, unframe_state, zero_at_starts
from .sums import suffix_sums


def gateloop_summary(k, v, log_mag, phase=None, segment_pos=None):
    """``k, log_mag, phase (B, T, H, K)`` (phase None: real transitions), ``v (B, T, H, V)``, ``segment_pos (B, T)``
    or None -> ``A (B, H, K, 1)`` (the block's total transition, broadcast against the state) and ``S (B, H, K,
    V)``, the state after the block from a zero state; both complex (complex128 for float64 inputs)."""
    with torch.autocast(device_type=k.device.type, enabled=False):  # the complex state is kept in fp32 / fp64
        return _summary(k, v, log_mag, phase, segment_pos)


def _summary(k, v, log_mag, phase, segment_pos):
    real = phase is None
    _, k, v, log_mag, phase, _ = prepare(k, k, v, log_mag, phase, None)
    starts = document_starts(segment_pos, k.device)
    lam, phase = zero_at_starts(log_mag, starts), zero_at_starts(phase, starts)
    k, v, lam, phase = (t.transpose(1, 2) for t in (k, v, lam, phase))  # (B, H, T, .)
    # the rotating frame needs a query beside the key; k stands in (the rotated copy is not used)
    _, kh, theta_T = rotating_frame(k, k, None if real else phase)  # kh (B, H, T, R, K)
    write = suffix_sums(lam).exp()  # e^{G_σ} <= 1: a sum of log|a| <= 0 inside the block
    total = lam.sum(2)  # (B, H, K): log|A|
    if starts is not None:
        seen = starts.long().cumsum(-1)[:, None]  # (B, 1, T): starts up to each token
        write = write * (seen == seen[..., -1:]).to(write.dtype)[..., None]  # keys before the last start are gone
        total = total.masked_fill((seen[..., -1] > 0)[..., None], float("-inf"))  # A = 0 across a start
    Z = (kh * write[..., None, :]).flatten(-2).transpose(-1, -2) @ v  # (B, H, R·K, V) frame state
    S = unframe_state(Z, theta_T, None, None)
    A = cexp(total, torch.zeros_like(total) if theta_T is None else theta_T)
    return A[..., None], S
