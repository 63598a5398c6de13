"""GateLoop in chunks (beyond the paper): matmuls inside chunks of C tokens, state passing between them.

The complex decay a = e^{log|a| + iθ} on K key dims is a real decay |a| on 2K dims in the rotating frame
(``common.rotating_frame``: q̂ = [q cos Θ, q sin Θ], k̂ alike, Θ = Σθ; Z = [Re; -Im](e^{-iΘ} S)), so GateLoop is a
gated linear attention with per-dimension real decay λ_j = log|a_j| <= 0. Inside one chunk (local positions
τ = 1..C, incoming frame state Z):

    b_τ = Σ_{j<=τ} λ_j           G_σ = Σ_{σ<j<=C} λ_j
    y_τ   = (q̂_τ ⊙ e^{b_τ})ᵀ Z + Σ_{σ<=τ} [Σ_d q̂_τd k̂_σd e^{Σ_{σ<j<=τ} λ_jd}] v_σ
    Z_out = e^{b_C} ⊙ Z + Σ_σ (k̂_σ ⊙ e^{G_σ}) v_σᵀ

The intra-chunk scores are ``scores.decayed_scores`` (hierarchical matmuls, every factor <= 1); each chunk is
padded to the next power of two P >= C with tokens that neither write nor decay. Every exponent is a sum of
λ <= 0 inside one chunk (no overflow for any decay strength), summed directly rather than as a difference of
cumulative sums (``sums.prefix_sums`` / ``suffix_sums``: same-sign terms, so no cancellation at any T, also after
resets with log|a| ≈ -1e4, and no float64 pass). Work per head: O(T·C·K) matmul flops + O(T·K·V) for the states,
O(T·K·log C) exponentials; the states entering the chunks come from one sequential loop over the T/C chunks.

Packed documents (``segment_pos``, 0 where a document starts; README.md §4.4): log|a| and θ are set to 0 at each
start, and every term that would reach across one is masked instead: the intra-chunk pairs (``decayed_scores`` with
``starts``), the incoming state for the tokens from the chunk's first start on, the chunk decay e^{b_C} of a chunk
that holds a start, and the keys before the chunk's last start in Z_out. So every kept exponent is a sum inside one
document, and no huge or infinite value is summed.
"""

from __future__ import annotations

import torch

from ...errors import InputError
from ..chunk_states import chunk_states
from .common import document_starts, frame_state, prepare, rotating_frame, unframe_state, zero_at_starts
from .scores import decayed_scores
from .sums import prefix_sums, suffix_sums


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _to_blocks(x: torch.Tensor, N: int, C: int, P: int) -> torch.Tensor:
    """``(B, H, T, *rest)`` -> ``(B, H, N, P, *rest)``: zero-pad T to N·C, cut into chunks of C, zero-pad each to P
    (a view when T = N·C and C = P)."""
    B, H, T = x.shape[:3]
    rest = x.shape[3:]
    if N * C > T:
        x = torch.cat([x, x.new_zeros(B, H, N * C - T, *rest)], dim=2)
    x = x.reshape(B, H, N, C, *rest)
    if P > C:
        x = torch.cat([x, x.new_zeros(B, H, N, P - C, *rest)], dim=3)
    return x


def frame_chunkwise(qh, kh, v, lam, Z0=None, chunk_size: int = 64, starts=None):
    """The real chunkwise core, heads first: ``qh, kh (B, H, T, R, K)``, ``v (B, H, T, V)``, ``lam (B, H, T, K)``
    (<= 0; 0 at document starts), frame state ``Z0 (B, H, R·K, V)`` or None, ``starts (B, 1, T)`` bool or None ->
    ``y (B, H, T, V)`` and ``Z (B, H, R·K, V)`` (equations in the module docstring)."""
    B, H, T, R, K = qh.shape
    V = v.shape[-1]
    C = min(chunk_size, T)
    N = -(-T // C)
    P = _next_pow2(C)
    qb, kb = _to_blocks(qh, N, C, P), _to_blocks(kh, N, C, P)  # (B, H, N, P, R, K)
    vb, lb = _to_blocks(v, N, C, P), _to_blocks(lam, N, C, P)  # (B, H, N, P, V), (B, H, N, P, K)

    sb = None if starts is None else _to_blocks(starts, N, C, P)  # (B, 1, N, P); pad tokens start nothing
    A = decayed_scores(qb, kb, lb, starts=sb)  # (B, H, N, P, P)

    b = prefix_sums(lb)  # (B, H, N, P, K) b_τ, summed inside the chunk
    b_end = b[..., -1:, :]  # the whole chunk's decay exponent
    read, write = b.exp(), suffix_sums(lb).exp()  # e^{b_τ}, e^{G_σ}
    chunk_decay = b_end.to(vb.dtype).exp()
    if sb is not None:  # the state reaches the tokens before the chunk's first start; Z_out keeps its last document
        seen = sb.long().cumsum(-1)  # starts in 0..τ
        read = read * (seen == 0).to(read.dtype)[..., None]
        write = write * (seen == seen[..., -1:]).to(write.dtype)[..., None]  # no start in σ+1..P-1
        chunk_decay = chunk_decay * (seen[..., -1:] == 0).to(vb.dtype)[..., None]
    q_in = (qb * read[..., None, :]).flatten(-2)  # (B, H, N, P, R·K): reads the incoming state
    k_out = (kb * write[..., None, :]).flatten(-2)  # e^{G_σ}: writes the outgoing state
    U = k_out.transpose(-1, -2) @ vb  # (B, H, N, R·K, V)
    decay = chunk_decay.expand(B, H, N, R, K).reshape(B, H, N, R * K, 1)
    Z0 = Z0 if Z0 is not None else vb.new_zeros(B, H, R * K, V)
    starts, Z = chunk_states(decay, U, Z0)  # sequential state passing over the T/C chunks (ops/chunk_states.py)
    y = q_in @ starts  # inter-chunk part (B, H, N, P, V)
    y.flatten(0, 2).baddbmm_(A.flatten(0, 2), vb.flatten(0, 2))  # + the intra-chunk part, in place (no sum tensor)
    return y[:, :, :, :C].reshape(B, H, N * C, V)[:, :, :T], Z


def gateloop_chunkwise(q, k, v, log_mag, phase=None, state=None, chunk_size: int = 64, segment_pos=None):
    """Same inputs / outputs as ``gateloop_naive``; ``chunk_size`` is C (any positive int)."""
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size <= 0:
        raise InputError(f"gateloop chunkwise: chunk_size must be a positive int, got {chunk_size!r}")
    return frame_form(q, k, v, log_mag, phase, state, chunk_size, segment_pos)


def frame_form(q, k, v, log_mag, phase, state, chunk_size: int | None, segment_pos=None):
    """``gateloop_chunkwise`` (chunks of ``chunk_size``) and the surrogate-attention form (``None``: one chunk of T
    tokens): the rotating frame around ``frame_chunkwise``, with document starts."""
    real = phase is None
    q, k, v, log_mag, phase, state = prepare(q, k, v, log_mag, phase, state)
    starts = document_starts(segment_pos, q.device)
    log_mag, phase = zero_at_starts(log_mag, starts), zero_at_starts(phase, starts)
    # heads first, (B, H, T, ·): time-axis cumsums and the chunk reshapes then work on contiguous memory
    q, k, v, log_mag, phase = (t.transpose(1, 2).contiguous() for t in (q, k, v, log_mag, phase))
    qh, kh, theta_T = rotating_frame(q, k, None if real else phase)
    R, T = qh.shape[-2], q.shape[2]
    frame_starts = None if starts is None else starts[:, None]  # (B, 1, T): the same for every head
    y, Z = frame_chunkwise(qh, kh, v, log_mag, frame_state(state, R), chunk_size or T, frame_starts)
    total = None
    if state is not None and real:  # (B, H, K): decays Im S_0 (R = 1 only); a start anywhere in the row ends it
        total = log_mag.double().sum(2) if chunk_size is None else log_mag.sum(2)
        if starts is not None:
            total = total.masked_fill(starts.any(1)[:, None, None], float("-inf"))
    return y.transpose(1, 2), unframe_state(Z, theta_T, state, total.to(q.dtype) if total is not None else None)
