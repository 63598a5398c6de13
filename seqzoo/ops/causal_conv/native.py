"""The ``mode="native"`` causal conv: ``native.c``'s one-pass forward and backward on CPU (float32 / float64).

The CPU default through ``"auto"`` where the C compiler builds ``native.c`` (``ops/native_build.py``), document
masking (``segment_pos``) included; ``torch_conv.py`` otherwise. The PyTorch path makes k passes over the (B, T, C)
tensors forward and ~3k backward (plus a copy of the input with its history prepended, which it keeps for the
backward); these loops make one each, and keep x and the history as they are.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch
from torch.autograd.function import once_differentiable

from ...errors import InputError
from ..native_build import SUFFIX, NativeLibrary, pointer
from .common import check, new_state, starts_cumsum, with_history

_i64, _ptr = ctypes.c_int64, ctypes.c_void_p
_LIB = NativeLibrary(
    Path(__file__).with_name("native.c"),
    "causal-conv",
    {
        **{f"conv_forward_{s}": [_i64] * 4 + [_ptr] * 6 for s in SUFFIX.values()},
        **{f"conv_backward_{s}": [_i64] * 4 + [_ptr] * 9 for s in SUFFIX.values()},
    },
)
library, unavailable = _LIB.library, _LIB.unavailable


def native_unfit(x: torch.Tensor, *others: torch.Tensor | None) -> str | None:
    """Why the C loops cannot take these tensors (None when they can): they need CPU float32 / float64 ``x`` (the
    weight, bias and state are cast to its dtype, as on the PyTorch path) and a library that builds."""
    if x.dtype not in SUFFIX:
        return f"the C loops take float32 / float64 tensors, got {x.dtype}"
    if any(t is not None and t.device.type != "cpu" for t in (x, *others)):
        return "the C loops take CPU tensors"
    why = unavailable()
    return None if why is None else f"the C library is unavailable: {why}"


class _NativeConv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, hist, weight, bias, csum):
        B, T, C = x.shape
        K = weight.shape[1]
        x = x.contiguous()
        hist = None if hist is None else hist.contiguous()
        wt = weight.t().contiguous()  # (K, C): the channel loop reads each tap contiguously
        b = None if bias is None else bias.contiguous()
        y = torch.empty_like(x)
        fn = getattr(library(), f"conv_forward_{SUFFIX[x.dtype]}")
        fn(B, T, C, K, pointer(x), pointer(hist), pointer(wt), pointer(b), pointer(csum), pointer(y))
        ctx.save_for_backward(x, hist, wt, csum)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy):
        x, hist, wt, csum = ctx.saved_tensors
        B, T, C = x.shape
        K = wt.shape[0]
        gy = gy.contiguous()
        gx = torch.empty_like(x)
        ghist = torch.empty_like(hist) if hist is not None and ctx.needs_input_grad[1] else None
        gwt = x.new_empty(K, C)
        gb = x.new_empty(C) if ctx.has_bias else None
        fn = getattr(library(), f"conv_backward_{SUFFIX[x.dtype]}")
        rc = fn(B, T, C, K, pointer(gy), pointer(x), pointer(hist), pointer(wt), pointer(csum), pointer(gx),
                pointer(ghist), pointer(gwt), pointer(gb))  # fmt: skip
        if rc != 0:
            raise MemoryError("causal_conv1d native backward: cannot allocate its weight-gradient accumulators")
        return gx, ghist, gwt.t(), gb, None


def causal_conv1d_native(x, weight, bias=None, state=None, segment_pos=None):
    """``x (B, T, C)``, ``weight (C, k)``, ``bias (C)``, ``state (B, k-1, C)``, ``segment_pos (B, T)`` -> ``y``,
    new state; the results of ``causal_conv1d_torch``, from one pass forward and one backward."""
    k = check(x, weight, state, segment_pos, bias)
    why = native_unfit(x, weight, bias, state)
    if why is not None:
        raise InputError(f"causal_conv1d mode='native': {why}")
    csum = None if segment_pos is None else starts_cumsum(segment_pos.to(x.device), k).contiguous()
    w = weight.to(x.dtype)
    b = None if bias is None else bias.to(x.dtype)
    s = None if state is None else state.to(x.dtype)
    y = _NativeConv.apply(x, s, w, b, csum)
    if x.shape[1] >= k - 1 and csum is None:  # the last k-1 inputs (a copy: it keeps no view of x alive)
        return y, x[:, x.shape[1] - (k - 1) :].clone()
    return y, new_state(with_history(x, s, k), k, csum)
