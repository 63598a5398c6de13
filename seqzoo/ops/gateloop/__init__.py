"""GateLoop operator: S_n = diag(a_n) S_{n-1} + k_n v_nᵀ,  y_n = Re(q_nᵀ S_n),  a_n = exp(log|a_n| + iθ_n).

Shapes: ``q, k, log_mag, phase (B, T, H, K)`` real, ``v (B, T, H, V)`` real, ``state (B, H, K, V)`` complex.
``gateloop(..., mode=...)`` returns ``y (B, T, H, V)`` (fp32 or fp64) and the final state (complex64/128).

Implementations (all equal up to rounding; see README.md for the derivations):

| mode | file | cost |
|---|---|---|
| ``naive`` | naive.py | the loop, O(T) sequential steps (the reference; the recurrent mode) |
| ``hillis_steele`` / ``blelloch`` / ``two_level`` / ``torch_hop`` | scan.py | associative scan |
| ``attention`` | attention.py | surrogate attention, relative exponents, O(T²) |
| ``naive_unsafe`` | attention.py | the paper's literal π / π⁻¹ form (overflows; tests only) |
| ``chunkwise`` | chunkwise.py | chunks of ``chunk_size``, linear in T |
| ``triton`` | triton.py | chunked GLA kernel (complex: phase-rotated q, k of width 2K), chunks of ``chunk_size`` |

``choose_implementation`` is the one place that decides. ``mode="auto"``: ``naive`` for T = 1, ``blelloch`` when
K = V = 1 (fastest fwd+bwd on CPU in our measurement), otherwise ``triton`` when the kernels switch allows it
(``seqzoo.kernels.kernel_verdict``: CUDA by default) and ``chunkwise`` when not; ``mode="chunkwise"`` with
``follow_switch=True`` (the mixer's chunkwise mode) takes the kernel on the same terms. On the Triton path ``chunk_size`` must be a power of two >= 16 (an ``InputError`` otherwise).
Autocast is disabled inside: the complex op always runs in fp32 or fp64.

Packed documents: ``segment_pos (B, T)`` (0 where a document starts) is taken by every mode except
``naive_unsafe``: the transition into a start is 0, so no output, final state or gradient crosses a start, a
carried state reaches only the tokens before the row's first start, and the final state is that of the last
document (README.md §4.4).
"""

from __future__ import annotations

import torch

from ...errors import InputError
from ...kernels import Choice, chunk_unfit, float_unfit, kernel_verdict, note_kernel, require_triton
from .attention import gateloop_attention, gateloop_attention_unsafe
from .chunkwise import gateloop_chunkwise
from .common import check_inputs
from .naive import gateloop_naive
from .scan import SCANS, gateloop_scan

MODES = (
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


def resolve_mode(T: int, K: int, V: int, mode: str = "auto") -> str:
    if mode not in MODES:
        raise InputError(f"gateloop: mode must be one of {MODES}, got {mode!r}")
    if mode != "auto":
        return mode
    if T == 1:
        return "naive"
    return "blelloch" if K == 1 and V == 1 else "chunkwise"


def gateloop(
    q,
    k,
    v,
    log_mag,
    phase=None,
    state=None,
    mode: str = "auto",
    chunk_size: int = 64,
    segment_pos=None,
    follow_switch: bool = False,
):
    """Run the implementation ``choose_implementation`` picks, after validating every argument (see the module
    docstring)."""
    if mode not in MODES:
        raise InputError(f"gateloop: mode must be one of {MODES}, got {mode!r}")
    check_inputs(q, k, v, log_mag, phase, state, segment_pos=segment_pos)
    mode = choose_implementation(q, k, v, log_mag, phase, mode, chunk_size, state, segment_pos, follow_switch).name
    note_kernel("gateloop", mode, q.device)
    seg = {} if segment_pos is None else {"segment_pos": segment_pos}  # the unsafe form takes none
    with torch.autocast(device_type=q.device.type, enabled=False):
        if mode == "naive":
            return gateloop_naive(q, k, v, log_mag, phase, state, **seg)
        if mode in SCANS:
            return gateloop_scan(q, k, v, log_mag, phase, state, mode=mode, **seg)
        if mode == "attention":
            return gateloop_attention(q, k, v, log_mag, phase, state, **seg)
        if mode == "naive_unsafe":
            return gateloop_attention_unsafe(q, k, v, log_mag, phase, state)
        if mode == "triton":  # triton.py: chunked GLA, complex via phase rotation (fp32/bf16/fp16)
            from .triton import gateloop_triton

            return gateloop_triton(q, k, v, log_mag, phase, state, chunk_size=chunk_size, **seg)
        return gateloop_chunkwise(q, k, v, log_mag, phase, state, chunk_size=chunk_size, **seg)


def choose_implementation(
    q,
    k,
    v,
    log_mag,
    phase=None,
    mode: str = "auto",
    chunk_size: int = 64,
    state=None,
    segment_pos=None,
    follow_switch: bool = False,
) -> Choice:
    """Which implementation ``gateloop`` runs for these inputs, and why a faster one was passed over.

    ``mode="auto"``: ``resolve_mode`` (``naive`` for T = 1, ``blelloch`` for K = V = 1), else the Triton kernel where
    the kernels switch allows it (``_triton_unfit``) and ``chunkwise`` (PyTorch) with the reason when not.
    ``mode="chunkwise"`` with ``follow_switch`` takes the kernel on the same terms at any T (the mixer's chunkwise
    mode). ``mode="triton"`` is refused with an ``InputError`` when the kernel cannot run here (triton missing,
    tensors off CUDA outside the interpreter, a chunk the kernel does not tile). Any other mode is run as asked.
    """
    resolved = resolve_mode(q.shape[1], q.shape[3], v.shape[3], mode)
    if segment_pos is not None and resolved == "naive_unsafe":
        raise InputError("gateloop: mode 'naive_unsafe' (the paper's literal form, tests only) takes no segment_pos")
    if resolved == "triton":
        require_triton("gateloop", q.device, chunk_unfit(chunk_size))
        return Choice("triton")
    if resolved == "chunkwise" and (mode == "auto" or follow_switch):
        why = _triton_unfit(q, k, v, log_mag, phase, chunk_size, state)
        return Choice("chunkwise", why) if why is not None else Choice("triton")
    return Choice(resolved)


def _triton_unfit(q, k, v, log_mag, phase=None, chunk_size: int = 64, state=None) -> str | None:
    """Why the chunkwise GateLoop does not run the Triton kernel (``seqzoo.kernels.kernel_verdict``: the kernels
    switch, the device, float32/float16/bfloat16 inputs, a power-of-two chunk >= 16, and sizes at which every kernel
    has an autotune config that fits this GPU without spilling: ``triton.py: shape_unfit``, else the PyTorch path,
    logged once); None when it does. Packed documents (``segment_pos``) take it as well."""

    def shape():
        from .triton import shape_unfit

        return shape_unfit(q, v, phase, state, chunk_size)

    return kernel_verdict("gateloop", q.device, float_unfit(q, k, v, log_mag, phase) or chunk_unfit(chunk_size), shape)


__all__ = [
    "MODES",
    "SCANS",
    "choose_implementation",
    "gateloop",
    "gateloop_attention",
    "gateloop_attention_unsafe",
    "gateloop_chunkwise",
    "gateloop_naive",
    "gateloop_scan",
    "resolve_mode",
]
