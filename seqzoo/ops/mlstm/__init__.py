"""mLSTM cell ops: naive references, recurrent step loop, parallel (stable) and chunkwise forms.

``mlstm(q, k, v, i, f, state=None, mode="auto")`` runs what ``choose_implementation`` decides, the one place that
decides: ``mode="auto"`` uses the recurrent step for T = 1 and otherwise the Triton chunkwise kernel (``triton.py``,
forward and backward) when the kernels switch allows it (``seqzoo.kernels.kernel_verdict``: CUDA by default) and the
PyTorch chunkwise form when not; ``mode="chunkwise"`` with ``follow_switch=True`` (the mixer's chunkwise mode) takes
the kernel on the same terms.
``reset (B, T)`` bool (True where a packed document starts) is taken by every mode, the Triton kernels forward and
backward included. Derivations: README.md in this folder.
"""

from __future__ import annotations

import torch

from ...errors import InputError, require
from ...kernels import Choice, chunk_unfit, float_unfit, kernel_verdict, note_kernel, require_triton
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
    follow_switch: bool = False,
):
    """The mLSTM cell. ``q, k (B, T, H, K)``, ``v (B, T, H, V)``, ``i, f (B, T, H)`` gate pre-activations,
    ``state = (C (B,H,K,V), n (B,H,K), m (B,H))`` or None, ``reset (B, T)`` bool or None: True where a document
    starts (the state entering that position is dropped, the stabiliser included; README.md §6). Returns
    ``h (B, T, H, V)`` and the final state (float32, or float64 for float64 inputs). q is scaled by K^-1/2 inside
    (arXiv:2405.04517 §2.3). ``mode`` and ``follow_switch``: ``choose_implementation``."""
    if mode not in MODES:
        raise InputError(f"mlstm: mode must be one of {MODES}, got {mode!r}")
    check_inputs(q, k, v, i, f, state, forget_gate, eps, reset)
    mode = choose_implementation(q, k, v, mode, chunk_size, state, reset, follow_switch).name
    note_kernel("mlstm", mode, q.device)
    # the op picks its own precision (fp32 inside for 16-bit inputs): autocast would turn its matmuls to bf16 and
    # hand its chunk-state recurrence mixed dtypes
    with torch.autocast(device_type=q.device.type, enabled=False):
        if mode == "triton":  # triton.py (Triton forward and backward)
            from .triton import mlstm_triton

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


def choose_implementation(
    q, k, v, mode: str = "auto", chunk_size: int = 64, state=None, reset=None, follow_switch: bool = False
) -> Choice:
    """Which implementation ``mlstm`` runs for these inputs, and why a faster one was passed over.

    ``mode="auto"``: ``recurrent`` for T = 1, else the Triton kernel where the kernels switch allows it
    (``_triton_unfit``) and ``chunkwise`` (PyTorch) with the reason when not. ``mode="chunkwise"`` with
    ``follow_switch`` takes the kernel on the same terms at any T (the mixer's chunkwise mode). ``mode="triton"``
    is refused with an ``InputError`` when the kernel cannot run here (triton missing, tensors off CUDA outside the
    interpreter, a chunk the kernel does not tile). Any other mode is run as asked.
    """
    require(mode in MODES, f"mlstm: mode must be one of {MODES}, got {mode!r}")
    if mode == "triton":
        require_triton("mlstm", q.device, chunk_unfit(chunk_size))
        return Choice("triton")
    if mode == "auto" and q.shape[1] == 1:
        return Choice("recurrent")
    if mode == "auto" or (mode == "chunkwise" and follow_switch):
        why = _triton_unfit(q, k, v, chunk_size, state, reset)
        return Choice("chunkwise", why) if why is not None else Choice("triton")
    return Choice(mode)


def _triton_unfit(q, k, v, chunk_size: int, state=None, reset=None) -> str | None:
    """Why the chunkwise mLSTM does not run the Triton kernel (``seqzoo.kernels.kernel_verdict``: the kernels
    switch, the device, float32/float16/bfloat16 inputs, a power-of-two chunk >= 16, and head dims at which every
    kernel has an autotune config that fits this GPU without spilling at the chunk or a halving of it: ``triton.py:
    kernel_tile``; qk heads over 256 never do, ``qk_head_unfit``; e.g. head dim 1024, or 256 in training, takes the
    PyTorch chunkwise path, logged once); None when it does. With ``reset`` (packed documents) the kernels'
    ``HAS_RESET`` variants are the ones probed."""

    def shape():
        from .triton import shape_unfit

        return shape_unfit(q, k, v, chunk_size, state, reset=reset)

    return kernel_verdict("mlstm", q.device, float_unfit(q, k, v) or chunk_unfit(chunk_size), shape)


__all__ = [
    "FORGET_GATES",
    "MODES",
    "check_inputs",
    "choose_implementation",
    "log_forget",
    "mlstm",
    "mlstm_chunkwise",
    "mlstm_naive_parallel",
    "mlstm_naive_recurrent",
    "mlstm_parallel",
    "mlstm_recurrent",
    "mlstm_step",
    "stable_forget_matrix",
    "zero_state",
]
