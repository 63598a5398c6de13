"""Helpers shared by the kernels in ``ops/<op>/triton.py`` (imports triton; only imported by those modules)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar

import torch
import triton
import triton.language as tl

from ..errors import InputError
from .device import interpreting

_TL = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}


def dot_dtype(dtype: torch.dtype):
    """Operand dtype of ``tl.dot``: the input's own 16-bit type on the GPU (fp32 accumulation), fp32 for fp32
    inputs and always under the interpreter (which cannot multiply bf16 tiles)."""
    if interpreting() or dtype == torch.float32:
        return tl.float32
    if dtype not in _TL:
        raise InputError(f"triton kernels take float32/float16/bfloat16 inputs, got {dtype}")
    return _TL[dtype]


def check_float(name: str, t: torch.Tensor) -> None:
    if t.dtype not in _TL:
        raise InputError(
            f"{name}: triton kernels take float32/float16/bfloat16 tensors, got {t.dtype} "
            f"(use the torch reference for float64)"
        )


def configs(full: list, small) -> list:
    """All autotune configs on a GPU; just ``small`` under the interpreter."""
    return [small] if interpreting() else full


def next_pow2(n: int, lo: int = 16) -> int:
    return max(lo, triton.next_power_of_2(n))


# launches recorded instead of run while ``probe_launches`` is active (None: launch for real)
_probing: ContextVar[list | None] = ContextVar("seqzoo_kernel_probe", default=None)


def launch(kernel, grid, *args, **kwargs):
    """``kernel[grid](*args, **kwargs)``; under ``probe_launches`` the launch is recorded and not run."""
    rec = _probing.get()
    if rec is None:
        return kernel[grid](*args, **kwargs)
    rec.append((kernel, args, kwargs))
    return None


@contextmanager
def _recording():
    rec: list = []
    token = _probing.set(rec)
    try:
        yield rec
    finally:
        _probing.reset(token)


def probe_launches(run: Callable[[], object]) -> list[tuple]:
    """The (kernel, args, constexpr kwargs) of every launch ``run()`` makes, no kernel run. ``run`` calls an op's
    real entry point (forward, and backward through autograd) on tiny inputs with the shape's dtypes, head dims and
    chunk: outputs are left unwritten, so only the launch code runs (the same idea as ``kernels/aot_capture.py``)."""
    with _recording() as rec:
        run()
    return rec
