"""RG-LRU op (Griffin, arXiv:2402.19427): gates -> linear scan ``h_t = a_t h_{t-1} + b_t``.

``rglru(x, gate_x, gate_a, a_param, reset=None, state=None, mode="auto")`` with ``mode``:
  * ``"naive"``: the Python loop over t (the truth; the T = 1 decode path);
  * ``"scan"``: the two-level chunked scan with a reverse-scan custom backward (training / prefill);
  * ``"triton"``: the fused Triton kernel (``triton.py: rglru_fused_triton``; CUDA, fp32/bf16/fp16);
  * ``"auto"``: ``"naive"`` for T == 1, ``"triton"`` when the kernels switch allows it
    (``seqzoo.kernels.kernel_verdict``: CUDA with triton installed by default), else ``"scan"``;
  * ``"scan"`` with ``follow_switch=True`` (the mixer's scan mode): ``"triton"`` on the same terms, at any T.
``choose_implementation`` is the one place that decides, for both ops of this folder.
``linear_scan`` exposes the bare scan with the same ``mode`` switch. ``state`` is h_0 ``(B, R)``; ``chunk_size`` the
scan's chunk length (default ≈ √T).
"""

from __future__ import annotations

import torch

from ...errors import InputError, require
from ...kernels import Choice, float_unfit, kernel_verdict, note_kernel, require_triton
from .gates import SqrtBoundDerivative, check_rglru_inputs, rglru_gates, sqrt_bound_derivative
from .naive import acc_dtype, linear_scan_naive, rglru_naive
from .scan import default_chunk, linear_scan_chunked

MODES = ("auto", "naive", "scan", "triton")


def choose_implementation(op: str, mode: str, *tensors: torch.Tensor | None, follow_switch: bool = False) -> Choice:
    """Which implementation ``op`` ("rglru" or "linear_scan") runs on ``tensors`` (the first is ``(B, T, R)``), and
    why a faster one was passed over.

    ``mode="auto"``: ``naive`` for T = 1, else the Triton kernel where the kernels switch allows it
    (``seqzoo.kernels.kernel_verdict``: the switch, the device, float32/float16/bfloat16 inputs) and ``scan``
    (PyTorch) with the reason when not. ``mode="scan"`` with ``follow_switch`` takes the kernel on the same terms at
    any T (the mixer's scan mode). ``mode="triton"`` is refused with an ``InputError`` when the kernel cannot run
    here (triton missing, tensors off CUDA outside the interpreter). Any other mode is run as asked.
    """
    require(mode in MODES, f"{op}: mode must be one of {MODES}, got {mode!r}")
    x = tensors[0]
    if mode == "triton":
        require_triton(op, x.device)
        return Choice("triton")
    if mode == "auto" and x.shape[1] == 1:
        return Choice("naive")
    if mode == "auto" or (mode == "scan" and follow_switch):
        why = kernel_verdict(op, x.device, float_unfit(*tensors))
        return Choice("scan", why) if why is not None else Choice("triton")
    return Choice(mode)


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
    mode = choose_implementation("linear_scan", mode, b, a).name
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
    follow_switch: bool = False,
):
    """RG-LRU over ``x (B, T, R)`` given gate pre-activations ``(B, T, R)``, ``a_param (R)``, ``reset (B, T)`` bool.

    Returns ``y (B, T, R)`` in x's dtype and the final state ``h (B, R)`` in fp32 (fp64 for fp64 input). ``mode`` and
    ``follow_switch``: ``choose_implementation``.
    """
    check_rglru_inputs(x, gate_x, gate_a, a_param, reset)
    if mode not in MODES:
        raise InputError(f"rglru: mode must be one of {MODES}, got {mode!r}")
    mode = choose_implementation("rglru", mode, x, gate_x, gate_a, follow_switch=follow_switch).name
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
    "choose_implementation",
    "default_chunk",
    "linear_scan",
    "linear_scan_chunked",
    "linear_scan_naive",
    "rglru",
    "rglru_gates",
    "rglru_naive",
    "sqrt_bound_derivative",
]
