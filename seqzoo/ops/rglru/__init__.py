"""RG-LRU op (Griffin, arXiv:2402.19427): gates -> linear scan ``h_t = a_t h_{t-1} + b_t``.

``rglru(x, gate_x, gate_a, a_param, reset=None, state=None, mode="auto")`` with ``mode``:
  * ``"naive"``: the Python loop over t (the truth; the T = 1 decode path);
  * ``"scan"``: the two-level chunked scan with a reverse-scan custom backward (training / prefill);
  * ``"triton"``: the fused Triton kernel (``triton.py: rglru_fused_triton``; CUDA, fp32/bf16/fp16);
  * ``"auto"``: ``"naive"`` for T == 1, ``"triton"`` when the kernels switch allows it
    (``seqzoo.kernels.want_triton``: CUDA with triton installed by default), else ``"scan"``.
``linear_scan`` exposes the bare scan with the same ``mode`` switch. ``state`` is h_0 ``(B, R)``; ``chunk_size`` the
scan's chunk length (default ≈ √T).
"""

from __future__ import annotations

import torch

from ...errors import InputError
from ...kernels import float_unfit, note_kernel, want_triton
from .gates import SqrtBoundDerivative, check_rglru_inputs, rglru_gates, sqrt_bound_derivative
from .naive import acc_dtype, linear_scan_naive, rglru_naive
from .scan import default_chunk, linear_scan_chunked

MODES = ("auto", "naive", "scan", "triton")


def triton_fits(op: str, *tensors: torch.Tensor | None) -> bool:
    """Should ``op`` ("rglru" or "linear_scan") run its Triton kernel (``seqzoo.kernels.want_triton``: the kernels
    switch, the device, float32/float16/bfloat16 inputs)."""
    return want_triton(op, tensors[0].device, float_unfit(*tensors))


def linear_scan(
    a: torch.Tensor,
    b: torch.Tensor,
    state: torch.Tensor | None = None,
    mode: str = "auto",
    chunk_size: int | None = None,
):
    """``a, b (B, T, R)``, ``state (B, R)`` (h_0) -> ``h (B, T, R)``, ``h_T (B, R)`` (accumulation dtype)."""
    if mode not in MODES:
        raise InputError(f"linear_scan: mode must be one of {MODES}, got {mode!r}")
    if a.shape != b.shape or b.dim() != 3:
        raise InputError(f"a and b must both have shape (B, T, R), got {tuple(a.shape)} and {tuple(b.shape)}")
    if state is not None and state.shape != (b.shape[0], b.shape[2]):
        raise InputError(f"state must have shape ({b.shape[0]}, {b.shape[2]}), got {tuple(state.shape)}")
    if mode == "auto":
        mode = "naive" if b.shape[1] == 1 else ("triton" if triton_fits("linear_scan", b, a) else "scan")
    note_kernel("linear_scan", mode, b.device)
    if mode == "naive":
        return linear_scan_naive(a, b, state)
    if mode == "triton":
        from .triton import linear_scan_triton

        return linear_scan_triton(a, b, state)
    return linear_scan_chunked(a, b, state, chunk_size)


def rglru(
    x,
    gate_x,
    gate_a,
    a_param,
    reset=None,
    state=None,
    c: float = 8.0,
    mode: str = "auto",
    chunk_size: int | None = None,
):
    """RG-LRU over ``x (B, T, R)`` given gate pre-activations ``(B, T, R)``, ``a_param (R)``, ``reset (B, T)`` bool.

    Returns ``y (B, T, R)`` in x's dtype and the final state ``h (B, R)`` in fp32 (fp64 for fp64 input).
    """
    check_rglru_inputs(x, gate_x, gate_a, a_param, reset)
    if mode not in MODES:
        raise InputError(f"rglru: mode must be one of {MODES}, got {mode!r}")
    if mode == "auto":
        mode = "naive" if x.shape[1] == 1 else ("triton" if triton_fits("rglru", x, gate_x, gate_a) else "scan")
    note_kernel("rglru", mode, x.device)
    if mode == "triton":
        from .triton import rglru_fused_triton

        return rglru_fused_triton(x, gate_x, gate_a, a_param, reset, state, c)
    a, b = rglru_gates(x, gate_x, gate_a, a_param, reset, c)
    h, h_last = linear_scan(a, b, state, mode=mode, chunk_size=chunk_size)
    return h.to(x.dtype), h_last


__all__ = [
    "MODES",
    "SqrtBoundDerivative",
    "acc_dtype",
    "default_chunk",
    "linear_scan",
    "linear_scan_chunked",
    "linear_scan_naive",
    "rglru",
    "rglru_gates",
    "rglru_naive",
    "sqrt_bound_derivative",
    "triton_fits",
]
