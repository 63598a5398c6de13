"""The per-level passes of ``softmax.py``'s blocked form through ``levels.c`` (CPU): one C pass each.

At the level of half-blocks of h tokens (block j, midpoint m), the fused attention kernel multiplies

    q_j[τ] = q̂_τ ⊙ Π_{m<=i<=τ} a_i   and   k_j[σ] = k̂_σ ⊙ Π_{σ<i<m} a_i        (a = e^λ, per dimension)

and its outputs merge into the running output by log-sum-exp. In PyTorch each level took about fifteen passes
over small tensors: prefix and suffix sums of λ, flushed exponentials, the products with q̂ and k̂ (broadcast over
the cos / sin parts), the padding copies, the merge's exponentials and products, and in the backward the scaled
output gradient and the gradients' ``addcmul_`` (≈ 97 ms of a 300 ms step at T = 1,024, docs/gateloop.md). Here:
``operands`` (q_j, k_j, padded), ``merge_``, ``scaled_dy``, ``grads_`` (dq̂, dk̂, dv) and ``dlam`` are one loop
each, with the factors as float64 running products from the midpoint outwards (``levels.c``). ``factors`` gives
a = e^λ in float64 with the flush threshold of ``scores_native`` (products below it are 0, never subnormal). For CPU
float32 / float64 operands where the library builds, outside autocast and ``torch.compile`` (``fits``);
``softmax.py`` keeps the PyTorch passes otherwise, and the tests compare the two.
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path

import torch

from ..native_build import SUFFIX, NativeLibrary, cpu_floats_for, run_rows
from ..native_build import pointer_at as _at  # short: the C calls below pass many addresses
from .scores_native import _LOG_FLUSH
from .sums import flushed_exp

_i64, _ptr, _f64 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
_LIB = NativeLibrary(
    Path(__file__).with_name("levels.c"),
    "gateloop-levels",
    {
        **{f"gateloop_level_operands_{s}": [_i64] * 6 + [_ptr] * 3 + [_f64] + [_ptr] * 2 for s in SUFFIX.values()},
        **{
            f"gateloop_level_merge_{s}": [_i64] * 5 + [_ptr] * 3 + [_i64] * 3 + [_ptr] + [_i64] * 3
            for s in SUFFIX.values()
        },
        **{
            f"gateloop_level_dy_{s}": [_i64] * 5 + [_ptr, _i64, _ptr, _ptr] + [_i64] * 3 + [_ptr]
            for s in SUFFIX.values()
        },
        **{
            f"gateloop_level_grads_{s}": [_i64] * 6 + [_ptr, _f64] + [_ptr] * 3 + [_i64] * 3 + [_ptr] * 3
            for s in SUFFIX.values()
        },
        **{f"gateloop_level_dlam_{s}": [_i64] * 4 + [_ptr] * 5 for s in SUFFIX.values()},
    },
)
library, unavailable = _LIB.library, _LIB.unavailable
_WHAT = "gateloop softmax levels (levels.c)"


def fits(*tensors: torch.Tensor) -> bool:
    """Whether the level passes can run in C for these operands (else the PyTorch passes of ``softmax.py``)."""
    return cpu_floats_for(_LIB, *tensors)


def factors(lam: torch.Tensor) -> torch.Tensor:
    """``lam (..., P, K)`` -> a = e^λ in float64, 0 below the flush threshold of ``lam``'s dtype, contiguous."""
    return flushed_exp(lam.double(), _LOG_FLUSH[lam.dtype]).contiguous()


def _fn(name: str, dtype: torch.dtype):
    return getattr(library(), f"gateloop_level_{name}_{SUFFIX[dtype]}")


def _level(t: torch.Tensor) -> torch.Tensor:
    """A level tensor ``(N, nb, h, W)`` as the C loops read it: any strides over (N, nb, h), the last axis
    contiguous (the fused kernel returns transposed views, which need no copy)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def operands(qh: torch.Tensor, kh: torch.Tensor, a: torch.Tensor, h: int, W: int):
    """``qh, kh (N, P, R, K)`` contiguous, ``a (N, P, K)`` float64 -> the level's ``q_j, k_j (N, P/2h, h, W)``."""
    N, P, R, K = qh.shape
    nb, RK = P // (2 * h), R * K
    qj, kj = qh.new_empty(N, nb, h, W), kh.new_empty(N, nb, h, W)
    fn, flush = _fn("operands", qh.dtype), math.exp(_LOG_FLUSH[qh.dtype])
    run_rows(
        N,
        lambda n0, n1: fn(
            n1 - n0, P, h, R, K, W, _at(qh, n0 * P * RK), _at(kh, n0 * P * RK), _at(a, n0 * P * K), flush,
            _at(qj, n0 * nb * h * W), _at(kj, n0 * nb * h * W),
        ),
        _WHAT,
    )  # fmt: skip
    return qj, kj


def merge_(y: torch.Tensor, lse: torch.Tensor, o: torch.Tensor, lse_j: torch.Tensor, h: int, V: int) -> None:
    """``y (N, P, W)``, ``lse (N, P)`` contiguous, merged in place with the level's ``o (N, nb, h, W)``,
    ``lse_j (N, nb, h)`` over the first ``V`` columns."""
    N, P, W = y.shape
    o = _level(o)
    (o0, o1, o2, _), (l0, l1, l2) = o.stride(), lse_j.stride()
    fn = _fn("merge", y.dtype)
    run_rows(
        N,
        lambda n0, n1: fn(
            n1 - n0, P, h, W, V, _at(y, n0 * P * W), _at(lse, n0 * P), _at(o, n0 * o0), o0, o1, o2,
            _at(lse_j, n0 * l0), l0, l1, l2,
        ),
        _WHAT,
    )  # fmt: skip


def scaled_dy(dy: torch.Tensor, lse: torch.Tensor, lse_j: torch.Tensor, h: int, W: int, V: int) -> torch.Tensor:
    """``dy (N, P, ldy)`` contiguous, the final ``lse (N, P)`` -> the level's output gradient ``dy_j (N, nb, h, W)``
    = e^{lse_j - lse} dy over the second halves (first ``V`` columns, zeros after)."""
    N, P, ldy = dy.shape
    nb = P // (2 * h)
    dyj = dy.new_empty(N, nb, h, W)
    l0, l1, l2 = lse_j.stride()
    fn = _fn("dy", dy.dtype)
    run_rows(
        N,
        lambda n0, n1: fn(
            n1 - n0, P, h, W, V, _at(dy, n0 * P * ldy), ldy, _at(lse, n0 * P), _at(lse_j, n0 * l0), l0, l1, l2,
            _at(dyj, n0 * nb * h * W),
        ),
        _WHAT,
    )  # fmt: skip
    return dyj


def grads_(dqh, dkh, dv, dq, dk, dv_j, a: torch.Tensor, h: int, V: int) -> None:
    """``dqh, dkh (N, P, R, K)``, ``dv (N, P, V)`` contiguous, accumulated in place from the kernel's ``dq, dk,
    dv_j (N, nb, h, W)`` (one set of strides; dv_j's first V columns) and the factors ``a (N, P, K)`` float64."""
    N, P, R, K = dqh.shape
    dq, dk, dv_j = (_level(t) for t in (dq, dk, dv_j))
    if not dq.stride() == dk.stride() == dv_j.stride():  # one set of strides for the three
        dq, dk, dv_j = dq.contiguous(), dk.contiguous(), dv_j.contiguous()
    s0, s1, s2, _ = dq.stride()
    RK = R * K
    fn, flush = _fn("grads", dqh.dtype), math.exp(_LOG_FLUSH[dqh.dtype])
    run_rows(
        N,
        lambda n0, n1: fn(
            n1 - n0, P, h, R, K, V, _at(a, n0 * P * K), flush, _at(dq, n0 * s0), _at(dk, n0 * s0),
            _at(dv_j, n0 * s0), s0, s1, s2, _at(dqh, n0 * P * RK), _at(dkh, n0 * P * RK), _at(dv, n0 * P * V),
        ),
        _WHAT,
    )  # fmt: skip


def dlam(qh: torch.Tensor, kh: torch.Tensor, dqh: torch.Tensor, dkh: torch.Tensor) -> torch.Tensor:
    """``qh, kh, dqh, dkh (N, P, R, K)`` contiguous -> dλ ``(N, P, K)``: ``sums._dlam_from`` in one pass, the
    reverse sum over the tokens in float64."""
    N, P, R, K = qh.shape
    out = qh.new_empty(N, P, K)
    fn = _fn("dlam", qh.dtype)
    run_rows(N, lambda n0, n1: fn(n1 - n0, P, R, K, *(_at(t, n0 * P * R * K) for t in (qh, kh, dqh, dkh)),
                                  _at(out, n0 * P * K)), _WHAT)  # fmt: skip
    return out
