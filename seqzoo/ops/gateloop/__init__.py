"""GateLoop operator: S_n = diag(a_n) S_{n-1} + k_n v_nᵀ,  y_n = Re(q_nᵀ S_n),  a_n = exp(log|a_n| + iθ_n).

Shapes: ``q, k, log_mag, phase (B, T, H, K)`` real, ``v (B, T, H, V)`` real, ``state (B, H, K, V)`` complex.
``gateloop_op(..., impl=...)`` returns ``y (B, T, H, V)`` (fp32 or fp64) and the final state (complex64/128).

Implementations (all equal up to rounding; see README.md for the derivations):

| impl | file | cost |
|---|---|---|
| ``naive`` | naive.py | the loop, O(T) sequential steps (the reference; the recurrent mode) |
| ``hillis_steele`` / ``blelloch`` / ``two_level`` / ``torch_hop`` | scan.py | associative scan |
| ``attention`` | attention.py | surrogate attention, relative exponents, O(T²) |
| ``naive_unsafe`` | attention.py | the paper's literal π / π⁻¹ form (overflows; tests only) |
| ``chunkwise`` | chunkwise.py | chunks of ``chunk_size``, linear in T |
| ``triton`` | triton.py | chunked GLA kernel (complex: phase-rotated q, k of width 2K), chunks of ``chunk_size`` |

``impl="auto"``: ``naive`` for T = 1, ``blelloch`` when K = V = 1 (fastest fwd+bwd on CPU in our measurement),
otherwise ``triton`` when the kernels switch allows it (``seqzoo.kernels.want_triton``: CUDA by default) and
``chunkwise`` when not. On the Triton path ``chunk_size`` must be a power of two >= 16 (an ``InputError`` otherwise).
Autocast is disabled inside: the complex op always runs in fp32 or fp64.
"""

from __future__ import annotations

import torch

from ...errors import InputError, require
from ...kernels import chunk_unfit, float_unfit, note_kernel, want_triton
from .attention import gateloop_attention, gateloop_attention_unsafe
from .chunkwise import gateloop_chunkwise
from .common import check_inputs
from .naive import gateloop_naive
from .scan import SCANS, gateloop_scan

IMPLS = (
    "auto",
    "naive",
    "hillis_steele",
    "blelloch",
    "two_level",
    "torch_hop",
    "attention",
    "naive_unsafe",
    "chunkwise",
    "triton",
)


def resolve_impl(T: int, K: int, V: int, impl: str = "auto") -> str:
    if impl not in IMPLS:
        raise InputError(f"gateloop_op: impl must be one of {IMPLS}, got {impl!r}")
    if impl != "auto":
        return impl
    if T == 1:
        return "naive"
    return "blelloch" if K == 1 and V == 1 else "chunkwise"


def gateloop_op(q, k, v, log_mag, phase=None, state=None, impl: str = "auto", chunk_size: int = 64):
    """Dispatch to one implementation after validating every argument (see the module docstring)."""
    if impl not in IMPLS:
        raise InputError(f"gateloop_op: impl must be one of {IMPLS}, got {impl!r}")
    B, T, H, K, V = check_inputs(q, k, v, log_mag, phase, state)
    auto = impl == "auto"
    impl = resolve_impl(T, K, V, impl)
    if impl == "chunkwise" and auto and triton_fits(q, k, v, log_mag, phase, chunk_size):
        impl = "triton"
    note_kernel("gateloop", impl, q.device)
    with torch.autocast(device_type=q.device.type, enabled=False):
        if impl == "naive":
            return gateloop_naive(q, k, v, log_mag, phase, state)
        if impl in SCANS:
            return gateloop_scan(q, k, v, log_mag, phase, state, impl=impl)
        if impl == "attention":
            return gateloop_attention(q, k, v, log_mag, phase, state)
        if impl == "naive_unsafe":
            return gateloop_attention_unsafe(q, k, v, log_mag, phase, state)
        if impl == "triton":  # triton.py: chunked GLA, complex via phase rotation (fp32/bf16/fp16)
            from .triton import gateloop_triton

            unfit = chunk_unfit(chunk_size)
            require(unfit is None, f"gateloop_op: {unfit}")
            return gateloop_triton(q, k, v, log_mag, phase, state, chunk_size=chunk_size)
        return gateloop_chunkwise(q, k, v, log_mag, phase, state, chunk_size=chunk_size)


def triton_fits(q, k, v, log_mag, phase=None, chunk_size: int = 64) -> bool:
    """Should the chunkwise GateLoop run the Triton kernel (``seqzoo.kernels.want_triton``: the kernels switch,
    the device, float32/float16/bfloat16 inputs, a power-of-two chunk >= 16)."""
    return want_triton("gateloop", q.device, float_unfit(q, k, v, log_mag, phase) or chunk_unfit(chunk_size))


__all__ = [
    "IMPLS",
    "SCANS",
    "gateloop_attention",
    "gateloop_attention_unsafe",
    "gateloop_chunkwise",
    "gateloop_naive",
    "gateloop_op",
    "gateloop_scan",
    "resolve_impl",
    "triton_fits",
]
