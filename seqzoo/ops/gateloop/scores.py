"""Decayed scores of GateLoop (and of any gated linear attention with per-dimension decay) as matmuls.

For one block of P tokens (P a power of two) with real per-dimension decay exponents λ_j <= 0:

    A_τσ = Σ_d q_τd k_σd exp(Σ_{σ<j<=τ} λ_jd)      (σ <= τ; 0 above the diagonal)

``q, k`` carry an extra axis of size R that the decay does not touch (R = 2 holds the phase-rotated cos / sin
parts, ``rotating_frame`` in common.py), so the sum runs over R·K. A factorisation e^{b_τ}·e^{-b_σ} with
b = cumsum λ overflows for strong decay, and pairwise exponents cost O(P²·K) elementwise work. Here the matrix
is split hierarchically: a block of s tokens with midpoint m has its lower-left quadrant (σ < m <= τ) equal to

    Q = (q_τ ⊙ e^{b_τ - b_{m-1}}) (k_σ ⊙ e^{b_{m-1} - b_σ})ᵀ,      b_τ - b_{m-1} = Σ_{m<=j<=τ} λ_j <= 0,

a matmul whose two factors are both <= 1 (no overflow for any decay strength; a factor that underflows to 0
belongs to a product that is smaller still); the two diagonal halves recurse, down to the single-token diagonal
q_τ·k_τ. The prefix sums b are float64, so the differences carry ~1e-16·|b| absolute error (no cancellation
trouble in fp32 after resets, where |b| is large); they are cast to the compute dtype before ``exp``.
Work: log₂P batched matmuls with O(P²·R·K) flops in all, plus O(P·K·log₂P) exponentials; the entries are placed
by one scatter into a zero (P, P) matrix.
Reference: ``decayed_scores_naive`` (the pairwise exponents, built as segment sums).
"""

from __future__ import annotations

import functools

import torch

from ...errors import InputError

# quadrants up to this size are a broadcast multiply-and-sum: batched matmuls of tiny matrices cost more on CPU
_SMALL = 2


def decayed_scores(
    q: torch.Tensor, k: torch.Tensor, lam: torch.Tensor, b: torch.Tensor | None = None, upper: float = 0.0
):
    """``q, k (..., P, R, K)``, ``lam (..., P, K)`` (<= 0), P a power of two -> ``A (..., P, P)`` (see the module).

    ``b``: the float64 prefix sums ``lam.double().cumsum(-2)`` when the caller has them already. ``upper``: the
    value above the diagonal (``-inf`` hands a causal softmax its mask for free)."""
    *lead, P, R, K = q.shape
    if P & (P - 1):
        raise InputError(f"decayed_scores: the block length P must be a power of two, got {P}")
    if b is None:
        b = lam.double().cumsum(-2)
    parts = [(q * k).sum((-2, -1))]  # (..., P): the diagonal τ = σ, decay e^0
    s = 2
    while s <= P:
        h = s // 2
        # unbind / split rather than indexing: their backward stacks or concatenates, where the backward of an
        # index writes into a zero-filled full-size gradient (one per level and operand)
        first, second = b.reshape(*lead, P // s, 2, h, K).unbind(-3)
        ref = first.split([h - 1, 1], dim=-2)[1]  # b_{m-1}: the last prefix sum of the first half
        row = (second - ref).to(q.dtype).exp()  # e^{Σ_{m<=j<=τ} λ_j}, τ in the second half
        col = (ref - first).to(q.dtype).exp()  # e^{Σ_{σ<j<m} λ_j}, σ in the first half
        qs = q.reshape(*lead, P // s, 2, h, R, K).unbind(-4)[1] * row[..., None, :]  # (..., P/s, h, R, K)
        ks = k.reshape(*lead, P // s, 2, h, R, K).unbind(-4)[0] * col[..., None, :]
        if h <= _SMALL:
            quad = (qs[..., :, None, :, :] * ks[..., None, :, :, :]).sum((-2, -1))  # (..., P/s, h, h)
        else:
            quad = qs.flatten(-2) @ ks.flatten(-2).transpose(-1, -2)
        parts.append(quad.flatten(-3))
        s *= 2
    # every lower-triangle entry belongs to exactly one part: one scatter into zeros places them all (its backward
    # is one gather), where assembling the blocks level by level copied the growing matrix three times per level
    A = q.new_full((*lead, P * P), upper)
    A.index_copy_(-1, _lower_positions(P, q.device), torch.cat(parts, dim=-1))
    return A.view(*lead, P, P)


@functools.lru_cache(maxsize=64)
def _lower_positions(P: int, device: torch.device) -> torch.Tensor:
    """Flat indices ``τ·P + σ`` of the diagonal, then of each level's lower-left quadrants (block j, row a, column
    b: τ = j·s + h + a, σ = j·s + b), in the order ``decayed_scores`` concatenates their values."""
    idx = [torch.arange(P) * (P + 1)]
    s = 2
    while s <= P:
        h = s // 2
        j = torch.arange(P // s)[:, None, None] * s
        a, c = torch.arange(h)[None, :, None], torch.arange(h)[None, None, :]
        idx.append(((j + h + a) * P + j + c).flatten())
        s *= 2
    return torch.cat(idx).to(device)


def segment_sums(x: torch.Tensor) -> torch.Tensor:
    """``x (..., P, K)`` -> ``D (..., P, P, K)`` with D[τ, σ] = Σ_{σ<j<=τ} x_j (0 for σ >= τ), by cumsum down the
    rows of a strictly-lower masked matrix (no difference of cumulative sums)."""
    P = x.shape[-2]
    strict = torch.ones(P, P, dtype=torch.bool, device=x.device).tril(-1)[:, :, None]  # [τ, σ]: τ > σ
    X = x[..., :, None, :].expand(*x.shape[:-1], P, x.shape[-1]).masked_fill(~strict, 0.0)  # X[τ, σ] = x_τ
    return X.cumsum(dim=-3)


def decayed_scores_naive(q: torch.Tensor, k: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """The reference of ``decayed_scores``: pairwise exponents, O(P²·K) memory; any P."""
    P = q.shape[-3]
    causal = torch.ones(P, P, dtype=torch.bool, device=q.device).tril()[:, :, None]
    W = segment_sums(lam).masked_fill(~causal, float("-inf")).exp()  # (..., P, P, K); exponent masked, not W
    return torch.einsum("...trk,...srk,...tsk->...ts", q, k, W)
