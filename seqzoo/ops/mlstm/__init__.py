"""mLSTM cell ops: naive references, recurrent step loop, parallel (stable) and chunkwise forms.

``mlstm(q, k, v, i, f, state=None, mode="auto")`` dispatches; ``mode="auto"`` uses the recurrent step
for T = 1 and otherwise the Triton chunkwise kernel (``triton.py``, forward and backward) when the kernels switch
allows it (``seqzoo.kernels.want_triton``: CUDA by default) and the PyTorch chunkwise form when not.
``reset (B, T)`` bool (True where a packed document starts) is taken by every mode, the Triton kernels forward and
backward included. Derivations: README.md in this folder.
"""

from __future__ import annotations

import torch

from ...errors import InputError, require
from ...kernels import chunk_unfit, float_unfit, note_kernel, want_triton
from .chunkwise import mlstm_chunkwise
from .common import FORGET_GATES, check_inputs, log_forget, zero_state
from .naive import mlstm_naive_parallel, mlstm_naive_recurrent
from .parallel import mlstm_parallel, stable_forget_matrix
from .recurrent import mlstm_recurrent, mlstm_step

MODES = ("auto", "recurrent", "parallel", "chunkwise", "naive", "triton")


def mlstm(
    q,
    k,
    v,
    i,
    f,
    state=None,
    mode: str = "auto",
    chunk_size: int = 64,
    eps: float = 1e-6,
    forget_gate: str = "sigmoid",
    reset=None,
):
    """The mLSTM cell. ``q, k (B, T, H, K)``, ``v (B, T, H, V)``, ``i, f (B, T, H)`` gate pre-activations,
    ``state = (C (B,H,K,V), n (B,H,K), m (B,H))`` or None, ``reset (B, T)`` bool or None: True where a document
    starts (the state entering that position is dropped, the stabiliser included; README.md §6). Returns
    ``h (B, T, H, V)`` and the final state (float32, or float64 for float64 inputs). q is scaled by K^-1/2 inside
    (arXiv:2405.04517 §2.3)."""
    if mode not in MODES:
        raise InputError(f"mlstm: mode must be one of {MODES}, got {mode!r}")
    check_inputs(q, k, v, i, f, state, forget_gate, eps, reset)
    if mode == "auto":
        mode = (
            "recurrent"
            if q.shape[1] == 1
            else ("triton" if triton_fits(q, k, v, chunk_size, state, reset) else "chunkwise")
        )
    note_kernel("mlstm", mode, q.device)
    # the op picks its own precision (fp32 inside for 16-bit inputs): autocast would turn its matmuls to bf16 and
    # hand its chunk-state recurrence mixed dtypes
    with torch.autocast(device_type=q.device.type, enabled=False):
        if mode == "triton":  # triton.py (Triton forward and backward)
            from .triton import mlstm_triton

            unfit = chunk_unfit(chunk_size)
            require(unfit is None, f"mlstm: {unfit}")
            return mlstm_triton(
                q, k, v, i, f, state, chunk_size=chunk_size, eps=eps, forget_gate=forget_gate, reset=reset
            )
        if mode == "chunkwise":
            return mlstm_chunkwise(
                q, k, v, i, f, state, chunk_size=chunk_size, eps=eps, forget_gate=forget_gate, reset=reset
            )
        if mode == "parallel":
            return mlstm_parallel(q, k, v, i, f, state, eps=eps, forget_gate=forget_gate, reset=reset)
        if mode == "recurrent":
            return mlstm_recurrent(q, k, v, i, f, state, eps=eps, forget_gate=forget_gate, reset=reset)
        return mlstm_naive_recurrent(q, k, v, i, f, state, eps=eps, forget_gate=forget_gate, reset=reset)


def triton_fits(q, k, v, chunk_size: int, state=None, reset=None) -> bool:
    """Should the chunkwise mLSTM run the Triton kernel (``seqzoo.kernels.want_triton``: the kernels switch,
    the device, float32/float16/bfloat16 inputs, a power-of-two chunk >= 16, and head dims at which every kernel
    has an autotune config that fits this GPU without spilling at the chunk or a halving of it: ``triton.py:
    kernel_tile``; qk heads over 256 never do, ``qk_head_unfit``; e.g. head dim 1024, or 256 in training, takes the
    PyTorch chunkwise path, logged once). With ``reset`` (packed documents) the kernels' ``HAS_RESET`` variants are
    the ones probed."""

    def shape():
        from .triton import shape_unfit

        return shape_unfit(q, k, v, chunk_size, state, reset=reset)

    return want_triton("mlstm", q.device, float_unfit(q, k, v) or chunk_unfit(chunk_size), shape)


__all__ = [
    "FORGET_GATES",
    "MODES",
    "check_inputs",
    "log_forget",
    "mlstm",
    "mlstm_chunkwise",
    "mlstm_naive_parallel",
    "mlstm_naive_recurrent",
    "mlstm_parallel",
    "mlstm_recurrent",
    "mlstm_step",
    "stable_forget_matrix",
    "triton_fits",
    "zero_state",
]
