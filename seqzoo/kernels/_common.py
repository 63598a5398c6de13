"""Helpers shared by the kernels in ``ops/<op>/triton.py`` (imports triton; only imported by those modules)."""

from __future__ import annotations

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
