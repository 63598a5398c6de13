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
_gpu_operands = [False]  # set by gpu_operand_dtypes(): answer dot_dtype as on a GPU even under the interpreter


@contextmanager
def gpu_operand_dtypes():
    """Inside this block ``dot_dtype`` gives the GPU's operand dtypes under the interpreter too, so that launches
    captured on a CPU (``bench/aot_capture.py``) carry the 16-bit operands a GPU compiles. Not thread-scoped: the
    capture's backward runs on autograd's threads."""
    _gpu_operands[0] = True
    try:
        yield
    finally:
        _gpu_operands[0] = False


def dot_dtype(dtype: torch.dtype):
    """Operand dtype of ``tl.dot``: the input's own 16-bit type on the GPU (fp32 accumulation), fp32 for fp32
    inputs and always under the interpreter (which cannot multiply bf16 tiles), unless ``gpu_operand_dtypes``."""
    if (interpreting() and not _gpu_operands[0]) or dtype == torch.float32:
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
    real entry point on tiny inputs with the shape's dtypes, head dims and chunk, with inputs that require grad
    where training would: ``apply`` then runs the op's backward too. Outputs are left unwritten, so only the launch
    code runs (the same idea as ``bench/aot_capture.py``)."""
    with _recording() as rec:
        run()
    return rec


class _ProbeCtx:
    """Stands in for autograd's ``ctx`` when ``apply`` calls a Function's forward and backward itself."""

    def __init__(self, needs_input_grad: tuple[bool, ...]) -> None:
        self.needs_input_grad = needs_input_grad
        self.saved_tensors: tuple = ()

    def save_for_backward(self, *tensors) -> None:
        self.saved_tensors = tensors


def apply(fn: type[torch.autograd.Function], *args):
    """``fn.apply(*args)``; under ``probe_launches``, ``fn.forward`` and, when an input requires grad, ``fn.backward``
    (zero output gradients) called directly in this thread, so that the backward's launches are recorded too.

    Why not autograd: the engine runs the backward of CUDA tensors on its own device thread, which does not see
    the recording (a ``ContextVar`` of the probing thread). On the first GPU run (H200) the backward kernels of a
    probe were therefore launched for real, and where none of their configs fit, the probe raised from the autotune
    hook instead of returning the reason."""
    if _probing.get() is None:
        return fn.apply(*args)
    ctx = _ProbeCtx(tuple(isinstance(a, torch.Tensor) and a.requires_grad for a in args))
    with torch.no_grad():
        outs = fn.forward(ctx, *args)
        if any(ctx.needs_input_grad):
            fn.backward(ctx, *(torch.zeros_like(o) if isinstance(o, torch.Tensor) else None for o in outs))
    return outs
