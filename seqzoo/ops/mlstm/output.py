"""The NeurIPS mLSTM layer's output path (arXiv:2405.04517 §2.4, Fig. 10), between the cell and the down-projection:

    u = (LayerNorm_V(h) * w + skip * x_c) * SiLU(z)        (LayerNorm per head over its V features, no bias)

``output_reference`` is the composite of PyTorch ops the layer ran before (and runs off CPU, in 16-bit, or without
a C compiler); ``output_native`` runs ``output.c``: one pass forward and one backward over the (B, T, E) tensors
where the composite makes about five forward and twelve backward, with ``h`` read through its strides (the
chunkwise cell's (B, T, H, V) view of its (B, H, T, V) buffer, which LayerNorm would first copy). SiLU(z) and its
gradient stay in PyTorch. ``mlstm_output`` picks: the C path for CPU float32 / float64 where it builds (not under
autocast or torch.compile, which fuses the composite itself).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ..native_build import SUFFIX, NativeLibrary, pointer

_i64, _ptr, _f64 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double
_LIB = NativeLibrary(
    Path(__file__).with_name("output.c"),
    "mlstm-output",
    {
        **{f"mlstm_out_forward_{s}": [_i64] * 4 + [_ptr, _i64, _i64, _i64] + [_ptr] * 4 + [_f64] + [_ptr] * 3
           for s in SUFFIX.values()},
        **{f"mlstm_out_backward_{s}": [_i64] * 4 + [_ptr, _ptr, _i64, _i64, _i64] + [_ptr] * 11
           for s in SUFFIX.values()},
    },
)  # fmt: skip
library, unavailable = _LIB.library, _LIB.unavailable


def head_norm(h: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-head LayerNorm with a weight and no bias: ``h (..., H, V)`` -> ``(..., H*V)`` (16-bit h normalised in
    float32)."""
    hn = F.layer_norm(h.float() if h.dtype in (torch.float16, torch.bfloat16) else h, (h.shape[-1],), eps=eps)
    return hn.to(h.dtype).flatten(-2) * weight


def output_reference(h, x_c, z, weight, skip, eps: float):
    """``h (B, T, H, V)``, ``x_c, z (B, T, E = H V)``, ``weight, skip (E)`` -> ``u (B, T, E)`` (the composite)."""
    return (head_norm(h, weight, eps) + skip * x_c) * F.silu(z)


def _fits(h, x_c, z, weight, skip) -> bool:
    """Whether ``output.c`` can take these tensors; else the composite runs (and broadcasts or refuses as PyTorch
    does). The C loops read E = H·V values of x_c, z, the weight and the skip per token, so the shapes must be
    exact: a weight of shape (1,) broadcasts in the composite, and the C loop read past it (non-finite output)."""
    ts = (h, x_c, z, weight, skip)
    E = h.shape[-2] * h.shape[-1] if h.dim() == 4 else -1
    return (
        h.dim() == 4
        and x_c.shape == z.shape == (*h.shape[:2], E)
        and weight.shape == skip.shape == (E,)
        and h.dtype in SUFFIX
        and all(t.device.type == "cpu" and t.dtype == h.dtype for t in ts)
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()  # torch.compile fuses the composite; a C call would break its graph
        and library() is not None
    )


class _Output(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, x_c, s, weight, skip, eps):
        B, T, H, V = h.shape
        if h.stride(-1) != 1:
            h = h.contiguous()
        x_c, s, w, k = x_c.contiguous(), s.contiguous(), weight.contiguous(), skip.contiguous()
        u = torch.empty_like(x_c)
        mean, rstd = h.new_empty(B, T, H), h.new_empty(B, T, H)
        fn = getattr(library(), f"mlstm_out_forward_{SUFFIX[h.dtype]}")
        sb, st, sh, _ = h.stride()
        rc = fn(B, T, H, V, pointer(h), sb, st, sh, pointer(x_c), pointer(s), pointer(w), pointer(k), float(eps),
                pointer(u), pointer(mean), pointer(rstd))  # fmt: skip
        if rc != 0:
            raise MemoryError("mlstm output native forward: cannot allocate its row buffer")
        ctx.save_for_backward(h, x_c, s, w, k, mean, rstd)
        return u

    @staticmethod
    @once_differentiable
    def backward(ctx, du):
        h, x_c, s, w, k, mean, rstd = ctx.saved_tensors
        B, T, H, V = h.shape
        du = du.contiguous()
        dh = h.new_empty(B, T, H, V)
        dx, ds = torch.empty_like(x_c), torch.empty_like(x_c)
        dw, dk = torch.empty_like(w), torch.empty_like(k)
        fn = getattr(library(), f"mlstm_out_backward_{SUFFIX[h.dtype]}")
        sb, st, sh, _ = h.stride()
        rc = fn(B, T, H, V, pointer(du), pointer(h), sb, st, sh, pointer(x_c), pointer(s), pointer(w), pointer(k),
                pointer(mean), pointer(rstd), pointer(dh), pointer(dx), pointer(ds), pointer(dw), pointer(dk))  # fmt: skip
        if rc != 0:
            raise MemoryError("mlstm output native backward: cannot allocate its accumulators")
        return dh, dx, ds, dw, dk, None


def output_native(h, x_c, z, weight, skip, eps: float):
    """``output_reference`` through ``output.c`` (CPU float32 / float64, one dtype)."""
    return _Output.apply(h, x_c, F.silu(z), weight, skip, eps)


def mlstm_output(h, x_c, z, weight, skip, eps: float):
    """``u = (LayerNorm_V(h) w + skip x_c) SiLU(z)``: the C path where it fits (module docstring), else the
    composite."""
    if _fits(h, x_c, z, weight, skip):
        return output_native(h, x_c, z, weight, skip, eps)
    return output_reference(h, x_c, z, weight, skip, eps)
