"""mLSTM cell ops: naive references, recurrent step loop, parallel (stable) and chunkwise forms.

``mlstm(q, k, v, i, f, state=None, impl="auto")`` dispatches; ``impl="auto"`` uses the recurrent step
for T = 1 and the chunkwise form otherwise. Derivations: README.md in this folder.
"""

from __future__ import annotations

from .chunkwise import mlstm_chunkwise
from .common import FORGET_GATES, check_inputs, log_forget, zero_state
from .naive import mlstm_naive_parallel, mlstm_naive_recurrent
from .parallel import mlstm_parallel, stable_forget_matrix
from .recurrent import mlstm_recurrent, mlstm_step

IMPLS = ("auto", "recurrent", "parallel", "chunkwise", "naive", "triton")


def mlstm(
    q, k, v, i, f, state=None, impl: str = "auto", chunk_size: int = 64, eps: float = 1e-6, forget_gate: str = "sigmoid"
):
    """The mLSTM cell. ``q, k (B, T, H, K)``, ``v (B, T, H, V)``, ``i, f (B, T, H)`` gate pre-activations,
    ``state = (C (B,H,K,V), n (B,H,K), m (B,H))`` or None. Returns ``h (B, T, H, V)`` and the final state
    (float32, or float64 for float64 inputs). q is scaled by K^-1/2 inside (spec §2)."""
    if impl not in IMPLS:
        raise ValueError(f"mlstm: impl must be one of {IMPLS}, got {impl!r}")
    if impl == "auto":
        impl = "recurrent" if q.shape[1] == 1 else "chunkwise"
    if impl == "triton":  # triton.py (Triton forward and backward)
        from .triton import mlstm_triton

        pow2 = chunk_size >= 16 and chunk_size & (chunk_size - 1) == 0
        return mlstm_triton(
            q, k, v, i, f, state, chunk_size=chunk_size if pow2 else None, eps=eps, forget_gate=forget_gate
        )
    if impl == "chunkwise":
        return mlstm_chunkwise(q, k, v, i, f, state, chunk_size=chunk_size, eps=eps, forget_gate=forget_gate)
    if impl == "parallel":
        return mlstm_parallel(q, k, v, i, f, state, eps=eps, forget_gate=forget_gate)
    if impl == "recurrent":
        return mlstm_recurrent(q, k, v, i, f, state, eps=eps, forget_gate=forget_gate)
    return mlstm_naive_recurrent(q, k, v, i, f, state, eps=eps, forget_gate=forget_gate)


__all__ = [
    "FORGET_GATES",
    "IMPLS",
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
    "zero_state",
]
