"""GateLoop's rotating frame (``common.rotating_frame``) through ``rotation.c`` on CPU: one pass forward, one back.

    q̂_t = [q_t cos Θ_t, q_t sin Θ_t],  k̂_t alike;   backward: dq = dq̂_0 cos + dq̂_1 sin,
    dθ_t = dΘ_T + Σ_{j>=t} (cos Θ_j (q_j dq̂_1j + k_j dk̂_1j) - sin Θ_j (q_j dq̂_0j + k_j dk̂_0j))

The angles' cos / sin come from ``common._angles`` (float64); the reverse sum runs in float64. For CPU float32 /
float64 operands of one dtype where the library builds, outside autocast and ``torch.compile`` (``fits``);
``common.rotating_frame`` keeps the PyTorch formulas otherwise, and the tests compare the two.
"""

from __future__ import annotations

import ctypes
import math
from pathlib import Path

import torch

from ..native_build import SUFFIX, NativeLibrary, cpu_floats_for, pointer_at, run_rows

_i64, _ptr = ctypes.c_int64, ctypes.c_void_p
_LIB = NativeLibrary(
    Path(__file__).with_name("rotation.c"),
    "gateloop-rotation",
    {
        **{f"gateloop_rotate_forward_{s}": [_i64] * 3 + [_ptr] * 5 for s in SUFFIX.values()},
        **{f"gateloop_rotate_backward_{s}": [_i64] * 3 + [_ptr] * 9 for s in SUFFIX.values()},
    },
)
library, unavailable = _LIB.library, _LIB.unavailable


def fits(q: torch.Tensor, k: torch.Tensor, rot: torch.Tensor) -> bool:
    """Whether the rotation can run in C for these operands (else the PyTorch formulas): ``q, k (..., T, K)`` of
    one shape and ``rot (..., T, 2, K)`` (the C loop reads exactly these many elements; a broadcasting operand would
    be read past its end), CPU floats of one dtype, the library built."""
    shapes = q.dim() >= 1 and k.shape == q.shape and rot.shape == (*q.shape[:-1], 2, q.shape[-1])
    return shapes and cpu_floats_for(_LIB, q, k, rot)


def rotate(q: torch.Tensor, k: torch.Tensor, rot: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``q, k (..., T, K)``, ``rot (..., T, 2, K)`` -> ``q̂, k̂ (..., T, 2, K)`` contiguous."""
    *lead, T, K = q.shape
    M = math.prod(lead)
    q, k, rot = q.contiguous(), k.contiguous(), rot.contiguous()
    qh, kh = torch.empty_like(rot), torch.empty_like(rot)
    fn = getattr(library(), f"gateloop_rotate_forward_{SUFFIX[q.dtype]}")

    def call(m0, m1):
        ins = [pointer_at(t, m0 * T * K) for t in (q, k)] + [pointer_at(rot, m0 * T * 2 * K)]
        return fn(m1 - m0, T, K, *ins, *(pointer_at(t, m0 * T * 2 * K) for t in (qh, kh)))

    run_rows(M, call, "gateloop rotation (rotation.c)")
    return qh, kh


def rotate_backward(q, k, rot, dqh, dkh, dlast):
    """The gradients ``dq, dk, dθ (..., T, K)`` from ``dq̂, dk̂ (..., T, 2, K)`` and ``dΘ_T (..., K)`` (or None)."""
    *lead, T, K = q.shape
    M = math.prod(lead)
    q, k, rot, dqh, dkh = (t.contiguous() for t in (q, k, rot, dqh, dkh))
    dlast = None if dlast is None else dlast.to(q.dtype).contiguous()
    dq, dk, dtheta = (torch.empty_like(q) for _ in range(3))
    fn = getattr(library(), f"gateloop_rotate_backward_{SUFFIX[q.dtype]}")

    def call(m0, m1):
        ins = [pointer_at(t, m0 * T * K) for t in (q, k)] + [pointer_at(t, m0 * T * 2 * K) for t in (rot, dqh, dkh)]
        outs = (pointer_at(t, m0 * T * K) for t in (dq, dk, dtheta))
        return fn(m1 - m0, T, K, *ins, pointer_at(dlast, m0 * K), *outs)

    run_rows(M, call, "gateloop rotation (rotation.c)")
    return dq, dk, dtheta
