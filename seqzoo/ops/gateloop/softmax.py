"""GateLoop's softmax form (paper §3.4) without a T×T score matrix: the hierarchical blocks as flash attention.

    y_n = Σ_{m<=n} softmax_m(A_n·) v_m,   A_nm = Σ_d q_nd k_md e^{L_n - L_m} cos(Φ_n - Φ_m)

``scores.decayed_scores`` builds A from log₂P levels: at the level of half-blocks of h tokens, the queries τ of
each block's second half meet the keys σ of its first half through one matmul of factors that are both <= 1,

    A_τσ = (q̂_τ ⊙ e^{Σ_{mid<=j<=τ} λ_j}) · (k̂_σ ⊙ e^{Σ_{σ<j<mid} λ_j})      (q̂, k̂ phase-rotated, width 2K).

So every level from ``base`` tokens up is plain dot-product attention between the two halves of each block, with
no mask: PyTorch's fused CPU attention kernel (``_scaled_dot_product_flash_attention_for_cpu``) computes its
softmax-weighted values and log-sum-exp without storing the scores. The rest (the diagonal blocks of ``base``
tokens, with their lower levels) is materialised by ``decayed_scores``: T·base scores, not T². A query meets its
keys in the diagonal block and in at most one block per level, and the parts merge by their log-sum-exps:

    y_n = Σ_p e^{lse_p(n) - LSE(n)} y_p(n),   LSE(n) = log Σ_p e^{lse_p(n)}.

Packed documents (``starts``): the diagonal blocks get -inf at pairs across a start (``decayed_scores``). In a
level, a pair crosses a start exactly when its row has one in mid..τ or its column one in σ+1..mid-1
(``scores.level_masks``): the factors of such rows and columns are 0 (the C loops get a = 0 at starts), the
columns are cut from the softmax by one more operand column (1 for every query, -``_FAR`` for a cut key: e^{-1e30}
is 0; every row keeps the key σ = mid-1), and a cut row's part enters the merge and the backward with weight 0
(lse_p = -inf there; the kernel's backward gets its own lse and a zero dy_p).

Backward (``_SoftmaxParts``): part p's scores get dS = P_p ⊙ (dy_p v_pᵀ - rowsum(dy_p ⊙ y)) with dy_p = w_p dy and
the merged y (the gradient through lse_p folds into the row sum), which is the fused kernel's own backward called
with the merged output in place of the part's. Reference: the materialised scores (``attention.relative_scores``)
and a softmax, which the tests compare in float64.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ...errors import InputError
from . import levels_native
from .common import document_cumsum, rotating_frame
from .scores import _levels, decayed_scores, level_masks
from .sums import _dlam_from

# the diagonal blocks materialised below the flash levels; levels of half-blocks >= BASE go through the fused kernel
BASE = 32
# the levels' operands, merges and gradients as C loops where they build (levels_native.py); False: PyTorch passes
_NATIVE_LEVELS = True

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_flash_backward = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def _pad_last(x: torch.Tensor, W: int) -> torch.Tensor:
    return x if x.shape[-1] == W else F.pad(x, (0, W - x.shape[-1]))


def _halves(x: torch.Tensor, h: int, which: int) -> torch.Tensor:
    """``(B, H, P, ...)`` -> the first (0) or second (1) half of every block of 2h tokens, ``(B, H, P/2h, h, ...)``
    (a view)."""
    B, H, P = x.shape[:3]
    return x.view(B, H, P // (2 * h), 2, h, *x.shape[3:]).select(3, which)


# the score given to a key cut off by a document start: e^{-1e30 - lse} is 0 in float32 and float64
_FAR = 1e30


def _cut_columns(q_j: torch.Tensor, k_j: torch.Tensor, cols: torch.Tensor, RK: int) -> None:
    """In place: column RK of the level operands ``q_j, k_j (N, n, h, W)`` (zero padding so far) becomes 1 for every
    query and -_FAR for every key that ``cols (N, n, h)`` cuts, so those keys leave the softmax."""
    q_j[..., RK] = 1.0
    k_j[..., RK] = (~cols).to(k_j.dtype) * -_FAR


def _heads(x: torch.Tensor) -> torch.Tensor:
    """``(B, H, n, h, W)`` -> ``(B·H, n, h, W)``, the fused kernel's (batch, heads, tokens, width); a view where
    the strides allow."""
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


class _SoftmaxParts(torch.autograd.Function):
    """The softmax over the diagonal blocks' materialised scores ``A0 (B, H, P/b, b, b)`` (-inf above the diagonal)
    and over the flash levels h = b, 2b, ..., P/2 of ``qh, kh (B, H, P, R, K)`` with decays ``lam (B, H, P, K)``,
    merged: ``y (B, H, P, V)``. The backward returns the levels' gradients of qh, kh and lam (dλ from dq̂, dk̂ as
    in ``scores._DecayedScores``); autograd adds the diagonal blocks' through ``A0``."""

    @staticmethod
    def forward(ctx, v, A0, qh, kh, lam, starts):
        B, H, P, V = v.shape
        R, K = qh.shape[-2:]
        nb, b = A0.shape[2], A0.shape[-1]
        # the fused kernel wants one head size for q, k and v: the narrower side is zero-padded (with starts, one
        # more column cuts the keys of other documents: _cut_columns)
        W = max(R * K + (starts is not None), V)
        vW = _pad_last(v, W).contiguous()
        # softmax, then lse = max - log(max probability) (>= 1/b: no cancellation): exp and logsumexp of the -inf
        # above the diagonal take CPU's slow path for underflowing results, softmax's own exp does not (4x)
        P0 = A0.softmax(-1)
        lse0 = A0.amax(-1) - P0.amax(-1).log()  # (B, H, P/b, b)
        # the diagonal blocks' values at width V; y is W wide (zero padding), the fused kernel's `out` width
        y = _pad_last((P0 @ v.contiguous().view(B, H, nb, b, V)).view(B, H, P, V), W).contiguous()  # merged in place
        lse = lse0.reshape(B, H, P).clone()
        native = _NATIVE_LEVELS and levels_native.fits(qh, kh, lam, v)
        a = levels_native.factors(lam) if native else None  # e^λ, float64, for the C loops
        if native and starts is not None:  # a = 0 into a start: every running product across it is 0
            a = a.masked_fill(starts[..., None], 0.0)
        N = B * H
        saved = []
        for h in (b << i for i in range((P // b).bit_length() - 1)):  # the half-blocks h = b, 2b, ..., P/2
            masks = (
                None if starts is None else [m.expand(B, H, -1, -1).reshape(N, -1, h) for m in level_masks(starts, h)]
            )
            if native:  # one C pass for the operands and one for the merge per level (levels_native.py)
                q_j, k_j = levels_native.operands(qh.view(N, P, R, K), kh.view(N, P, R, K), a.view(N, P, K), h, W)
            else:
                q2, k1, row, col = next(_levels(qh, kh, lam, start=h, starts=starts))[1:]
                q_j = _heads(_pad_last((q2 * row).flatten(-2), W))  # (B·H, n, h, W)
                k_j = _heads(_pad_last((k1 * col).flatten(-2), W))
            if masks is not None:
                _cut_columns(q_j, k_j, masks[1], R * K)
            o_j, lse_j = _flash(q_j, k_j, _heads(_halves(vW, h, 0)), scale=1.0)
            rows = None if masks is None else masks[0]
            merge_lse = lse_j if rows is None else lse_j.masked_fill(~rows, float("-inf"))  # a cut row: weight 0
            if native:
                levels_native.merge_(y.view(N, P, W), lse.view(N, P), o_j, merge_lse, h, V)
                saved += [q_j, k_j, lse_j, rows]
                continue
            n = q_j.shape[1]
            merge_lse = merge_lse.view(B, H, n, h)
            ys, ls = _halves(y, h, 1), _halves(lse, h, 1)  # views: merged in place
            new = torch.logaddexp(ls, merge_lse)
            ys.mul_(torch.exp(ls - new)[..., None]).addcmul_(
                o_j.view(B, H, n, h, W), torch.exp(merge_lse - new)[..., None]
            )
            ls.copy_(new)
            saved += [q_j, k_j, lse_j, rows, row, col]
        ctx.save_for_backward(vW, P0, lse0, y, lse, qh, kh, a if native else lam, *saved)
        ctx.V, ctx.native = V, native
        return y[..., :V]

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        vW, P0, lse0, y, lse, qh, kh, a, *saved = ctx.saved_tensors
        B, H, P, W = vW.shape
        R, K = qh.shape[-2:]
        nb, b = P0.shape[2], P0.shape[-1]
        N, V = B * H, ctx.V
        dy = dy.contiguous()
        # the diagonal blocks (width V), weight e^{lse0 - LSE}: dA0 = P0 ⊙ (dy0 v0ᵀ - rowsum(dy0 ⊙ y))
        dy0 = dy.view(B, H, nb, b, V) * torch.exp(lse0 - lse.view(B, H, nb, b))[..., None]
        rows = (dy0 * y[..., :V].view(B, H, nb, b, V)).sum(-1, keepdim=True)
        dA0 = P0 * (dy0 @ vW[..., :V].view(B, H, nb, b, V).transpose(-1, -2) - rows)
        dv = (P0.transpose(-1, -2) @ dy0).view(B, H, P, V)  # the levels add theirs in place
        dyW = None if ctx.native else _pad_last(dy, W)
        dqh, dkh = torch.zeros_like(qh), torch.zeros_like(kh)
        step = 4 if ctx.native else 6
        for j in range(0, len(saved), step):
            q_j, k_j, lse_j, rows = saved[j : j + 4]
            n, h = q_j.shape[1:3]
            # the part's weight e^{lse_j - LSE}: 0 on rows a document start cuts (the kernel keeps its own lse_j)
            merge_lse = lse_j if rows is None else lse_j.masked_fill(~rows, float("-inf"))
            if ctx.native:
                dy_j = levels_native.scaled_dy(dy.view(N, P, V), lse.view(N, P), merge_lse, h, W, V)
            else:
                dy_j = _heads(
                    _halves(dyW, h, 1) * torch.exp(merge_lse.view(B, H, n, h) - _halves(lse, h, 1))[..., None]
                )
            dq, dk, dv_j = _flash_backward(
                dy_j, q_j, k_j, _heads(_halves(vW, h, 0)), _heads(_halves(y, h, 1)), lse_j, 0.0, False, scale=1.0,
            )  # fmt: skip
            if ctx.native:  # dq̂, dk̂ (times the recomputed factors) and dv in one C pass
                levels_native.grads_(dqh.view(N, P, R, K), dkh.view(N, P, R, K), dv.view(N, P, V), dq, dk, dv_j,
                                     a.view(N, P, K), h, V)  # fmt: skip
                continue
            row, col = saved[j + 4 : j + 6]
            _halves(dqh, h, 1).addcmul_(dq[..., : R * K].reshape(B, H, n, h, R, K), row)
            _halves(dkh, h, 0).addcmul_(dk[..., : R * K].reshape(B, H, n, h, R, K), col)
            _halves(dv, h, 0).add_(dv_j.view(B, H, n, h, W)[..., :V])
        if ctx.native:
            dlam = levels_native.dlam(*(t.view(N, P, R, K) for t in (qh, kh, dqh, dkh))).view(B, H, P, K)
        else:
            dlam = _dlam_from(qh, kh, dqh, dkh)
        return dv, dA0, dqh, dkh, dlam, None


def softmax_relative_attention(q, k, v, log_mag, phase, base: int = BASE, starts=None):
    """``q, k, log_mag, phase (B, T, H, K)`` (q already scaled), ``v (B, T, H, V)``, compute dtype -> ``y (B, T,
    H, V)`` and the float64 cumulative sums ``L, Φ (B, T, H, K)`` (the mixer's cache). ``base``: the diagonal
    blocks' length (a power of two). ``starts (B, T)`` bool: document starts (log|a|, θ already 0 there); no
    score crosses one, and L, Φ restart at each."""
    if not isinstance(base, int) or base < 2 or base & (base - 1):
        raise InputError(f"softmax_relative_attention: base must be a power of two >= 2, got {base!r}")
    B, T, H, K = q.shape
    L, Phi = document_cumsum(log_mag, starts), document_cumsum(phase, starts)
    q, k, v, log_mag, phase = (t.transpose(1, 2) for t in (q, k, v, log_mag, phase))  # heads first
    qh, kh, _ = rotating_frame(q, k, phase)  # (B, H, T, R, K)
    P = 1 << max(T - 1, 0).bit_length()
    if starts is not None:
        starts = F.pad(starts, (0, P - T))[:, None]  # (B, 1, P): the same for every head; padding starts nothing
    if P != T:  # padded tokens come after every real one: no real query sees them
        qh, kh = (F.pad(t, (0, 0, 0, 0, 0, P - T)) for t in (qh, kh))
        v, log_mag = (F.pad(t, (0, 0, 0, P - T)) for t in (v, log_mag))
    qh, kh, log_mag = qh.contiguous(), kh.contiguous(), log_mag.contiguous()
    b = min(base, P)
    R = qh.shape[-2]
    blocks = (B, H, P // b, b)
    A0 = decayed_scores(
        qh.view(*blocks, R, K),
        kh.view(*blocks, R, K),
        log_mag.view(*blocks, K),
        upper=float("-inf"),
        starts=None if starts is None else starts.view(B, 1, P // b, b),
    )  # (B, H, P/b, b, b)
    y = _SoftmaxParts.apply(v.contiguous(), A0, qh, kh, log_mag, starts)
    return y[:, :, :T].transpose(1, 2), L, Phi
