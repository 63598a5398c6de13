"""Sums over the tokens of a block that the GateLoop score constructions share (``scores.py``, its C path
``scores_native.py``, the blocked softmax ``softmax.py`` / ``levels_native.py``): triangle sums along the token axis,
the flushed exponential of log-decays, and dλ from the gradients of the decayed q and k.

Kept apart from ``scores.py`` so that the C path can use them while ``scores.py`` dispatches to the C path: neither
imports the other back.
"""

from __future__ import annotations

import functools

import torch

# sums over at most this many tokens are a matmul with a triangle of ones (compute dtype); longer ones use float64
_MATMUL_SUMS = 64


@functools.lru_cache(maxsize=64)
def _triangle(n: int, upper: bool, strict: bool, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``(n, n)`` ones on and below the diagonal (``upper``: on and above it); ``strict`` leaves the diagonal out."""
    ones = torch.ones(n, n, device=device, dtype=dtype)
    return ones.triu(int(strict)) if upper else ones.tril(-int(strict))


def _triangle_sums(x: torch.Tensor, upper: bool, strict: bool) -> torch.Tensor:
    """``x (..., n, K)`` -> ``y_i = Σ_j x_j`` along ``-2`` over j <= i (``upper``: j >= i), j != i when ``strict``.

    Up to ``_MATMUL_SUMS`` tokens a matmul with the triangle of ones in ``x``'s dtype (same-sign terms sum without
    cancellation); beyond, float64 cumulative sums and their differences (~1e-16·|Σ| absolute error), cast back. For
    n <= 4 the matmul is an einsum, which folds the batch into one matmul: a batched matmul of (n, n) blocks that
    small is several times slower on CPU."""
    n = x.shape[-2]
    if n == 1 and not strict:
        return x
    if n <= _MATMUL_SUMS:
        tri = _triangle(n, upper, strict, x.device, x.dtype)
        return torch.einsum("ij,...jk->...ik", tri, x) if n <= 4 else tri @ x
    xd = x.double()
    pre = xd.cumsum(-2)  # Σ_{j<=i}
    if upper:
        out = pre[..., -1:, :] - pre + (0 if strict else xd)  # Σ_{j>i} (+ x_i)
    else:
        out = pre - xd if strict else pre
    return out.to(x.dtype)


def prefix_sums(x: torch.Tensor) -> torch.Tensor:
    """``x (..., n, K)`` -> ``y_i = Σ_{j<=i} x_j`` along ``-2``, in ``x``'s dtype (same-sign terms: no cancellation)."""
    return _triangle_sums(x, upper=False, strict=False)


def suffix_sums(x: torch.Tensor) -> torch.Tensor:
    """``x (..., n, K)`` -> ``y_i = Σ_{j>i} x_j`` (exclusive) along ``-2``, in ``x``'s dtype."""
    return _triangle_sums(x, upper=True, strict=True)


def _dlam_from(q: torch.Tensor, k: torch.Tensor, dq: torch.Tensor, dk: torch.Tensor) -> torch.Tensor:
    """dλ_j = Σ_{τ>=j} Σ_R (q_τ dq_τ - k_τ dk_τ) for scores that depend on λ only through Σ_{σ<j<=τ} λ_j: a pair
    on one side of j enters both terms and cancels, so exactly the pairs with σ < j <= τ remain."""
    return _triangle_sums((q * dq).addcmul_(k, dk, value=-1.0).sum(-2), upper=True, strict=False)


# in half-blocks longer than _MATMUL_SUMS / 2 tokens (the surrogate-attention and softmax forms, one block of T
# tokens), a decay factor below e^_FLUSH_BELOW is set to 0 outside float64: e^-30 ≈ 1e-13 is far below a float32
# score's rounding, and products of smaller factors land in the subnormal range, where CPU arithmetic is ~100x
# slower (a float32 gateloop_softmax step over 512 tokens took 1.8x as long with them). Chunks of up to 64 tokens
# skip the extra pass: it cost 8 % of the chunkwise step, whose sums over at most 32 tokens showed no such slowdown.
_FLUSH_BELOW = -30.0


def flushed_exp(x: torch.Tensor, below: float) -> torch.Tensor:
    """e^x with 0 where x < ``below``; clamped first: an exp whose result underflows takes a slow path on CPU (~40x
    the time of one that does not)."""
    return x.clamp_min(below - 1.0).exp_().masked_fill_(x < below, 0.0)
