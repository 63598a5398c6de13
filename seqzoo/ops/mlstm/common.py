"""Shared argument checks and gate transforms of the mLSTM cell ops.

Layouts (the project-wide convention, CONTRIBUTING.md "Tensor layouts"): ``q, k (B, T, H, K)``, ``v (B, T, H, V)``, gate pre-activations ``i, f (B, T, H)``;
state ``(C (B, H, K, V), n (B, H, K), m (B, H))`` kept in float32 (float64 when the inputs are float64);
``reset (B, T)`` bool, True where a document starts (packed documents: the mixers pass ``segment_pos == 0``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...errors import InputError

FORGET_GATES = ("sigmoid", "exp")
_LOG_MAX = {torch.float32: 87.0, torch.float64: 708.0}  # a little below log(finfo.max)
MLSTMState = tuple  # (C, n, m)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """fp32 for every float type below it (bf16/fp16 activations), fp64 stays fp64."""
    return torch.promote_types(dtype, torch.float32)


def log_forget(f: torch.Tensor, forget_gate: str) -> torch.Tensor:
    """phi = log f: ``logsigmoid(f~)`` (sigmoid gate, both reference code bases) or ``f~`` (exp gate)."""
    if forget_gate == "sigmoid":
        return F.logsigmoid(f)
    if forget_gate == "exp":
        return f
    raise InputError(f"forget_gate must be one of {FORGET_GATES}, got {forget_gate!r}")


def check_inputs(q, k, v, i, f, state, forget_gate: str = "sigmoid", eps: float = 1e-6, reset=None):
    """Validate shapes before any work; returns ``(B, T, H, K, V)``."""
    for name, t in (("q", q), ("k", k), ("v", v), ("i", i), ("f", f)):
        if not isinstance(t, torch.Tensor) or not t.is_floating_point():
            raise InputError(f"mlstm: {name} must be a floating-point torch.Tensor, got {getattr(t, 'dtype', type(t))}")
    if q.dim() != 4:
        raise InputError(f"mlstm: q must have shape (B, T, H, K), got {tuple(q.shape)}")
    B, T, H, K = q.shape
    if k.shape != q.shape:
        raise InputError(f"mlstm: k must have the shape of q {tuple(q.shape)}, got {tuple(k.shape)}")
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise InputError(f"mlstm: v must have shape ({B}, {T}, {H}, V), got {tuple(v.shape)}")
    for name, t in (("i", i), ("f", f)):
        if t.shape != (B, T, H):
            raise InputError(f"mlstm: gate pre-activation {name} must have shape ({B}, {T}, {H}), got {tuple(t.shape)}")
    if forget_gate not in FORGET_GATES:
        raise InputError(f"mlstm: forget_gate must be one of {FORGET_GATES}, got {forget_gate!r}")
    if not (eps >= 0.0):
        raise InputError(f"mlstm: eps must be >= 0, got {eps!r}")
    V = v.shape[-1]
    if state is not None:
        if not isinstance(state, (tuple, list)) or len(state) != 3:
            raise InputError("mlstm: state must be a tuple (C, n, m) returned by a previous call")
        C, n, m = state
        want = ((B, H, K, V), (B, H, K), (B, H))
        for name, t, w in zip("Cnm", (C, n, m), want):
            if tuple(t.shape) != w:
                raise InputError(f"mlstm: state {name} must have shape {w}, got {tuple(t.shape)}")
    if reset is not None:
        if not isinstance(reset, torch.Tensor) or reset.dtype != torch.bool or tuple(reset.shape) != (B, T):
            raise InputError(
                f"mlstm: reset must be a bool tensor of shape ({B}, {T}) (True where a document starts), got "
                f"{getattr(reset, 'dtype', type(reset).__name__)} {tuple(getattr(reset, 'shape', ()))}"
            )
        if reset.device != q.device:
            raise InputError(f"mlstm: reset must be on q's device {q.device}, got {reset.device}")
    return B, T, H, K, V


def doc_index(reset: torch.Tensor) -> torch.Tensor:
    """``reset (..., T)`` bool -> ``(..., T)`` int: how many documents started up to and including each position
    (0 for the positions before the first start, which continue the carried state). Two positions belong to one
    document exactly when their indices are equal."""
    return reset.long().cumsum(-1)


def within_doc_prefix(phi: torch.Tensor, doc: torch.Tensor) -> torch.Tensor:
    """``phi (..., T)``, ``doc (..., T)`` (broadcastable) -> ``sum_{l <= t, doc_l = doc_t} phi_l``: the log decay from
    the start of t's document (or of the call) to t inclusive. Summed from the own terms only (a masked row sum of
    an (T, T) matrix, as ``parallel.stable_forget_matrix``), never as a difference of prefix sums across documents:
    in float32 that difference loses the digits of a large running sum."""
    T = phi.shape[-1]
    causal = torch.ones(T, T, dtype=torch.bool, device=phi.device).tril()
    same = (doc[..., :, None] == doc[..., None, :]) & causal  # (..., T, T): l <= t in t's document
    return torch.where(same, phi[..., None, :], phi.new_zeros(())).sum(-1)


def zero_state(B: int, H: int, K: int, V: int, dtype: torch.dtype, device) -> tuple:
    """``C_0 = 0, n_0 = 0, m_0 = 0`` (m_0 = 0 makes exp(-m) the paper's lower bound 1)."""
    return (
        torch.zeros(B, H, K, V, dtype=dtype, device=device),
        torch.zeros(B, H, K, dtype=dtype, device=device),
        torch.zeros(B, H, dtype=dtype, device=device),
    )


def lower_bound(m: torch.Tensor) -> torch.Tensor:
    """``exp(-m)``, the denominator's lower bound in stabilised units, with a NaN-free gradient.

    For gates near -1e4, ``-m`` exceeds the float range and ``exp(-m) = inf`` (so h = 0, as in the reference);
    there the value is a constant ``inf`` so that backward never forms ``0 * inf``.
    """
    big = -m > _LOG_MAX.get(m.dtype, 80.0)
    safe = torch.exp(torch.where(big, torch.zeros_like(m), -m))
    return torch.where(big, torch.full_like(m, float("inf")), safe)
