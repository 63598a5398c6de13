"""``decayed_scores`` of short blocks through ``scores.c``: a running product of the decay factors per row.

    A_τσ = Σ_{r,d} q_τrd k_σrd w_τσd,   w_τσd = Π_{σ<j<=τ} e^{λ_jd}      (σ <= τ)

The hierarchical matmuls of ``scores.py`` need no exponent of a long sum either, but on CPU their log₂P levels of
small matmuls, decay factors and one scatter are many passes over small tensors (its forward and backward were 28 %
of a ``gateloop_softmax`` training step at T = 1,024 with 32-token blocks). The C loop makes one pass per block:
O(P²·R·K) multiply-adds, as many as the matmuls, without their bookkeeping. Factors and products below e^-30
(float32; e^-340 in float64) are set to 0 (``_LOG_FLUSH``). The backward writes dq, dk in C and takes dλ from them
(``sums._dlam_from``). For contiguous-able float32 / float64 CPU tensors where the library builds (not under
autocast or ``torch.compile``); ``scores.decayed_scores`` picks it.
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path

import torch
from torch.autograd.function import once_differentiable

from ...errors import InputError
from ..native_build import SUFFIX, NativeLibrary, cpu_floats_for, pointer, run_rows
from .sums import _FLUSH_BELOW, _dlam_from, flushed_exp

_i64, _ptr, _f64 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
_LIB = NativeLibrary(
    Path(__file__).with_name("scores.c"),
    "gateloop-scores",
    {
        **{f"gateloop_scores_forward_{s}": [_i64] * 4 + [_ptr] * 3 + [_f64, _f64, _ptr] for s in SUFFIX.values()},
        **{f"gateloop_scores_backward_{s}": [_i64] * 4 + [_ptr] * 3 + [_f64] + [_ptr] * 3 for s in SUFFIX.values()},
    },
)
library, unavailable = _LIB.library, _LIB.unavailable
_WHAT = "gateloop decayed scores (scores.c)"

# factors and products below e^FLUSH are set to 0: float32 uses the matmul construction's threshold (e^-30 ≈ 1e-13,
# far below a float32 score's rounding); the threshold's square must be a normal number, so that no product of two
# kept factors is subnormal (~100x slower)
_LOG_FLUSH = {torch.float32: _FLUSH_BELOW, torch.float64: -340.0}


def _factors(lam: torch.Tensor) -> torch.Tensor:
    """e^λ, 0 below the flush threshold."""
    return flushed_exp(lam, _LOG_FLUSH[lam.dtype]).contiguous()


def shapes_fit(q: torch.Tensor, k: torch.Tensor, lam: torch.Tensor) -> bool:
    """``q, k (..., P, R, K)`` of one shape and ``lam (..., P, K)``: the C loop reads exactly these many elements of
    each (a k or lam that broadcasts in PyTorch would be read past its end)."""
    return q.dim() >= 3 and k.shape == q.shape and lam.shape == (*q.shape[:-2], q.shape[-1])


def fits(q: torch.Tensor, k: torch.Tensor, lam: torch.Tensor) -> bool:
    """Whether ``decayed_scores_native`` can take these operands (else the matmul construction)."""
    return shapes_fit(q, k, lam) and cpu_floats_for(_LIB, q, k, lam)


class _NativeScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, lam, upper, starts):
        *lead, P, R, K = q.shape
        q, k, a = q.contiguous(), k.contiguous(), _factors(lam)
        if starts is not None:  # a = 0 into a document start: every running product across it is 0 from there on
            a = a.masked_fill(starts[..., None], 0.0)
        N = math.prod(lead)
        A = q.new_empty(*lead, P, P)
        flush, fn = math.exp(_LOG_FLUSH[q.dtype]), getattr(library(), f"gateloop_scores_forward_{SUFFIX[q.dtype]}")
        qf, kf, af, Af = (t.view(N, -1) if N else None for t in (q, k, a, A))
        run_rows(N, lambda n0, n1: fn(n1 - n0, P, R, K, *(pointer(t[n0]) for t in (qf, kf, af)), flush, float(upper),
                                      pointer(Af[n0])), _WHAT)  # fmt: skip
        ctx.save_for_backward(q, k, a)
        return A

    @staticmethod
    @once_differentiable
    def backward(ctx, dA):
        q, k, a = ctx.saved_tensors
        *lead, P, R, K = q.shape
        dA = dA.to(q.dtype).contiguous()
        dq, dk = torch.empty_like(q), torch.empty_like(k)
        N = math.prod(lead)
        flush, fn = math.exp(_LOG_FLUSH[q.dtype]), getattr(library(), f"gateloop_scores_backward_{SUFFIX[q.dtype]}")
        qf, kf, af, dAf, dqf, dkf = (t.view(N, -1) if N else None for t in (q, k, a, dA, dq, dk))
        run_rows(N, lambda n0, n1: fn(n1 - n0, P, R, K, *(pointer(t[n0]) for t in (qf, kf, af)), flush,
                                      *(pointer(t[n0]) for t in (dAf, dqf, dkf))), _WHAT)  # fmt: skip
        return dq, dk, _dlam_from(q, k, dq, dk), None, None


def decayed_scores_native(
    q: torch.Tensor, k: torch.Tensor, lam: torch.Tensor, upper: float = 0.0, starts: torch.Tensor | None = None
) -> torch.Tensor:
    """``q, k (..., P, R, K)``, ``lam (..., P, K)`` (<= 0, one dtype, CPU; ``fits``) -> ``A (..., P, P)`` with
    ``upper`` above the diagonal; any P. ``starts (..., P)`` bool: pairs across a document start are 0 (the
    caller writes ``upper`` there)."""
    if not shapes_fit(q, k, lam):
        raise InputError(
            f"decayed_scores_native: q, k must have one shape (..., P, R, K) and lam (..., P, K), got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(lam.shape)}"
        )
    return _NativeScores.apply(q, k, lam, upper, starts)
