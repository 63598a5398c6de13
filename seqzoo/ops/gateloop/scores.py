"""Decayed scores of GateLoop (and of any gated linear attention with per-dimension decay) as matmuls.

For one block of P tokens (P a power of two) with real per-dimension decay exponents λ_j <= 0:

    A_τσ = Σ_d q_τd k_σd exp(Σ_{σ<j<=τ} λ_jd)      (σ <= τ; 0 above the diagonal)

``q, k`` carry an extra axis of size R that the decay does not touch (R = 2 holds the phase-rotated cos / sin
parts, ``rotating_frame`` in common.py), so the sum runs over R·K. A factorisation e^{b_τ}·e^{-b_σ} with
b = cumsum λ overflows for strong decay, and pairwise exponents cost O(P²·K) elementwise work. Here the matrix
is split hierarchically: a block of s = 2h tokens with midpoint m has its lower-left quadrant (σ < m <= τ) equal to

    Q = (q_τ ⊙ e^{Σ_{m<=j<=τ} λ_j}) (k_σ ⊙ e^{Σ_{σ<j<m} λ_j})ᵀ,

a matmul whose two factors are both <= 1 (no overflow for any decay strength; a factor that underflows to 0
belongs to a product that is smaller still); the two diagonal halves recurse, down to the single-token diagonal
q_τ·k_τ. The exponents are sums inside one half-block: an inclusive prefix sum of the second half and an exclusive
suffix sum of the first (``prefix_sums`` / ``suffix_sums``). Every term has the same sign, so they are summed
directly in the compute dtype (no difference of two large cumulative sums, hence no cancellation after resets,
where log|a| ≈ -1e4): up to ``_MATMUL_SUMS`` tokens as a matmul with a triangle of ones, beyond that (the
surrogate-attention form over thousands of tokens, where fp32 summation error would grow with the length) as a
difference of float64 prefix sums.
Work: log₂P batched matmuls with O(P²·R·K) flops in all, plus O(P·K·log₂P) exponentials; the entries are placed
by one scatter into a zero (P, P) matrix.
On CPU, blocks of up to ``NATIVE_UP_TO`` tokens take a C loop instead (``scores_native.py``: a running product of
the factors per row, the same flops without the levels' small passes); ``decayed_scores(native=False)`` keeps this
construction.
Reference: ``decayed_scores_naive`` (the pairwise exponents, built as segment sums).

Packed documents (``starts (..., P)``, True where a document starts): a pair (τ, σ) with a start in (σ, τ] belongs to
two documents and its score is ``upper`` (0 for the linear forms, -inf for the softmax). In a quadrant that is
exactly "a start in [mid, τ]" (the whole row) or "a start in (σ, mid)" (the whole column), so the split stays two
masked factors, ``row ⊙ [no start in mid..τ]`` and ``col ⊙ [no start in σ+1..mid-1]``; the C loop gets a = 0 at
each start, which zeroes every running product that reaches across it. The decay exponents themselves are not
touched (the callers pass λ = 0 at starts): no -inf or huge value is ever summed.
"""

from __future__ import annotations

import functools

import torch
from torch.autograd.function import once_differentiable

from ...errors import InputError
from . import scores_native
from .sums import _FLUSH_BELOW, _MATMUL_SUMS, _dlam_from, flushed_exp, prefix_sums, suffix_sums

# quadrants up to this size are a broadcast multiply-and-sum: batched matmuls of tiny matrices cost more on CPU
_SMALL = 2


# blocks up to this length take the C loop where it fits (scores_native.py); longer ones the matmul construction
NATIVE_UP_TO = 128


def decayed_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    lam: torch.Tensor,
    upper: float = 0.0,
    native: bool | None = None,
    starts: torch.Tensor | None = None,
):
    """``q, k (..., P, R, K)``, ``lam (..., P, K)`` (<= 0), P a power of two -> ``A (..., P, P)`` (see the module).

    ``upper``: the value above the diagonal (``-inf`` hands a causal softmax its mask for free) and, with ``starts``
    (bool ``(..., P)`` broadcastable to q's leading dims, True where a document starts), of every pair across a
    start. Differentiable in ``q``, ``k`` and ``lam`` through ``_DecayedScores``' own backward. ``native``: None
    picks the C loop of ``scores_native.py`` for CPU float32 / float64 blocks of up to ``NATIVE_UP_TO`` tokens where
    it builds, True requires it, False keeps the matmul construction."""
    P = q.shape[-3]
    if P & (P - 1):
        raise InputError(f"decayed_scores: the block length P must be a power of two, got {P}")
    if native not in (None, True, False):
        raise InputError(f"decayed_scores: native must be None, True or False, got {native!r}")
    lam = lam.to(q.dtype)
    if native is not False and (native or P <= NATIVE_UP_TO):
        if scores_native.fits(q, k, lam):
            return _cross_documents(scores_native.decayed_scores_native(q, k, lam, upper, starts), starts, upper)
        if native:
            raise InputError(
                "decayed_scores: native=True needs CPU float32 / float64 operands of one dtype and the built C "
                f"library ({scores_native.unavailable() or 'autocast or torch.compile is active'})"
            )
    return _cross_documents(_DecayedScores.apply(q, k, lam, upper, starts), starts, upper)


def _cross_documents(A: torch.Tensor, starts: torch.Tensor | None, upper: float) -> torch.Tensor:
    """``upper`` at the pairs across a document start, which the factors left at 0 (nothing to do for upper = 0)."""
    if starts is None or upper == 0.0:
        return A
    return A.masked_fill(~same_document(starts), upper)


def same_document(starts: torch.Tensor) -> torch.Tensor:
    """``starts (..., P)`` bool -> ``(..., P, P)`` bool, [τ, σ] True when no document starts in (min, max] of the
    two (document ids = running count of starts)."""
    doc = starts.long().cumsum(-1)
    return doc[..., :, None] == doc[..., None, :]


def _decay(x: torch.Tensor, h: int) -> torch.Tensor:
    """e^x (x <= 0) for sums over half-blocks of h tokens; see ``_FLUSH_BELOW``."""
    if h <= _MATMUL_SUMS // 2 or x.dtype == torch.float64:
        return x.exp()
    return flushed_exp(x, _FLUSH_BELOW)


def _levels(q, k, lam, start: int = 1, starts: torch.Tensor | None = None):
    """Per level (half-block size h = start, 2 start, ..., P/2; ``start`` a power of two): the second halves of q,
    the first halves of k (views) and their decay factors e^{Σ_{m<=j<=τ} λ_j}, e^{Σ_{σ<j<m} λ_j} (``None`` for
    h = 1: e^0), with ``starts (..., P)``: times 0 where a document starts in m..τ (row) or in σ+1..m-1 (column)."""
    *lead, P, R, K = q.shape
    h = start
    while h < P:
        n = P // (2 * h)
        first, second = lam.reshape(*lead, n, 2, h, K).unbind(-3)
        q2 = q.reshape(*lead, n, 2, h, R, K).select(-4, 1)  # (..., n, h, R, K): τ in the second half
        k1 = k.reshape(*lead, n, 2, h, R, K).select(-4, 0)  # σ in the first half
        row = _decay(prefix_sums(second), h)[..., None, :]
        col = _decay(suffix_sums(first), h)[..., None, :] if h > 1 else None
        if starts is not None:
            row, col = _masked_factors(starts, n, h, row, col)
        yield h, q2, k1, row, col
        h *= 2


def level_masks(starts: torch.Tensor, h: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``starts (..., P)`` bool -> which rows and columns of the level of half-blocks of h tokens stay in one
    document, ``(..., P/2h, h)`` bool each: row τ (second half) has no start in mid..τ; column σ (first half) has
    none in σ+1..mid-1 (always true for σ = mid-1)."""
    first, second = starts.reshape(*starts.shape[:-1], -1, 2, h).long().unbind(-2)  # (..., n, h)
    return second.cumsum(-1) == 0, first.flip(-1).cumsum(-1).flip(-1) == first


def _masked_factors(starts: torch.Tensor, n: int, h: int, row: torch.Tensor, col: torch.Tensor | None):
    """One level's factors ``row, col (..., n, h, 1, K)`` times 0 where the pair would reach across a document
    start (``level_masks``; h = 1 has no column factor and needs no column mask)."""
    rows, cols = level_masks(starts, h)
    row = row * rows.to(row.dtype)[..., None, None]
    return row, None if col is None else col * cols.to(col.dtype)[..., None, None]


def _quad(qs, ks, h):
    """The lower-left quadrants ``(..., n, h, h)`` of one level from its scaled operands ``(..., n, h, R, K)``."""
    if h <= _SMALL:  # batched matmuls of tiny matrices cost more on CPU than a broadcast multiply-and-sum
        return (qs[..., :, None, :, :] * ks[..., None, :, :, :]).sum((-2, -1))
    return qs.flatten(-2) @ ks.flatten(-2).transpose(-1, -2)


class _DecayedScores(torch.autograd.Function):
    """The hierarchical construction with a backward written per level: each level's gradients are added in place
    into the halves of dq and dk they belong to (autograd would build a zero-filled full-size gradient per level and
    operand, then stack and add them: about a fifth of the chunkwise step's CPU profile before this Function), and
    dλ_j = Σ_{τ>=j} Σ_R (q_τ dq_τ - k_τ dk_τ) from them at the end (README.md §4.2)."""

    @staticmethod
    def forward(ctx, q, k, lam, upper, starts):
        *lead, P, R, K = q.shape
        parts = [(q * k).sum((-2, -1))]  # (..., P): the diagonal τ = σ, decay e^0
        for h, q2, k1, row, col in _levels(q, k, lam, starts=starts):
            parts.append(_quad(q2 * row, k1 if col is None else k1 * col, h).flatten(-3))
        # every lower-triangle entry belongs to exactly one part: one scatter into `upper` places them all
        A = q.new_full((*lead, P * P), upper)
        A.index_copy_(-1, _lower_positions(P, q.device), torch.cat(parts, dim=-1))
        ctx.save_for_backward(q, k, lam)
        ctx.starts = starts
        return A.view(*lead, P, P)

    @staticmethod
    @once_differentiable
    def backward(ctx, dA):
        q, k, lam = ctx.saved_tensors
        *lead, P, R, K = q.shape
        dparts = dA.reshape(*lead, P * P).index_select(-1, _lower_positions(P, q.device))
        dparts = dparts.split([P] + [P * (1 << i) // 2 for i in range(P.bit_length() - 1)], dim=-1)
        ddiag = dparts[0][..., None, None]
        dq, dk = (ddiag * k).contiguous(), (ddiag * q).contiguous()  # written through views below
        for (h, q2, k1, row, col), dquad in zip(_levels(q, k, lam, starts=ctx.starts), dparts[1:]):
            n = P // (2 * h)
            dquad = dquad.reshape(*lead, n, h, h)
            ks = k1 if col is None else k1 * col
            qs = q2 * row
            if h <= _SMALL:
                dqs = (dquad[..., None, None] * ks[..., None, :, :, :]).sum(-3)
                dks = (dquad[..., None, None] * qs[..., :, None, :, :]).sum(-4)
            else:
                dqs = (dquad @ ks.flatten(-2)).view(qs.shape)
                dks = (dquad.transpose(-1, -2) @ qs.flatten(-2)).view(ks.shape)
            dq.view(*lead, n, 2, h, R, K).select(-4, 1).addcmul_(dqs, row)
            dk1 = dk.view(*lead, n, 2, h, R, K).select(-4, 0)
            if col is None:
                dk1.add_(dks)
            else:
                dk1.addcmul_(dks, col)
        return dq, dk, _dlam_from(q, k, dq, dk), None, None  # dλ from dq and dk, not per level


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


def decayed_scores_naive(q: torch.Tensor, k: torch.Tensor, lam: torch.Tensor, starts=None) -> torch.Tensor:
    """The reference of ``decayed_scores``: pairwise exponents, O(P²·K) memory; any P; ``starts (..., P)``: pairs
    across a document start are 0."""
    P = q.shape[-3]
    keep = torch.ones(P, P, dtype=torch.bool, device=q.device).tril()
    if starts is not None:
        keep = keep & same_document(starts)
    W = segment_sums(lam).masked_fill(~keep[..., None], float("-inf")).exp()  # (..., P, P, K); exponent masked
    return torch.einsum("...trk,...srk,...tsk->...ts", q, k, W)
