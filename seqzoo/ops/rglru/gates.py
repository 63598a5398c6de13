"""RG-LRU gate math shared by every scan: ``(x, gates, Λ̃, reset) -> (a_t, b_t)`` of the linear scan.

    log a_t = −c · σ(gate_a) · softplus(Λ̃),   a_t = exp(log a_t),   β_t = sqrt(1 − exp(2 log a_t))
    b_t = β_t · σ(gate_x) · x_t                  (a_t = 0, β_t = 1 where a document starts)

``sqrt`` has an exact forward and a bounded backward ``g / sqrt(max(4u, 1e-6))`` (|∂β/∂u| ≤ 1000), so the
gradient stays finite in bf16 when a_t → 1 (the reference's ``SqrtBoundDerivative``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...errors import InputError
from .naive import acc_dtype

SQRT_GRAD_FLOOR = 1e-6


def check_rglru_inputs(x, gate_x, gate_a, a_param, reset=None) -> None:
    """Shapes of an RG-LRU call (the dispatcher and the Triton kernel both check with this)."""
    if x.dim() != 3:
        raise InputError(f"x must have shape (B, T, R), got {tuple(x.shape)}")
    for name, g in (("gate_x", gate_x), ("gate_a", gate_a)):
        if g.shape != x.shape:
            raise InputError(f"{name} must have shape {tuple(x.shape)} like x, got {tuple(g.shape)}")
    if a_param.shape != x.shape[-1:]:
        raise InputError(f"a_param must have shape ({x.shape[-1]},), got {tuple(a_param.shape)}")
    if reset is not None and (reset.shape != x.shape[:2] or reset.dtype != torch.bool):
        raise InputError(
            f"reset must be a bool tensor of shape {tuple(x.shape[:2])}, got {reset.dtype} {tuple(reset.shape)}"
        )


class SqrtBoundDerivative(torch.autograd.Function):
    """``sqrt(u)`` forward; backward ``g / sqrt(max(4u, 1e-6))``."""

    @staticmethod
    def forward(ctx, u: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(u)
        return torch.sqrt(u)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:
        (u,) = ctx.saved_tensors
        return g / torch.sqrt(torch.clamp(4 * u, min=SQRT_GRAD_FLOOR))


def sqrt_bound_derivative(u: torch.Tensor) -> torch.Tensor:
    return SqrtBoundDerivative.apply(u)


def rglru_gates(x, gate_x, gate_a, a_param, reset=None, c: float = 8.0):
    """``x, gate_x, gate_a (B, T, R)``, ``a_param (R)``, ``reset (B, T)`` bool or None -> ``a, b (B, T, R)``.

    Gates and a_t are in the activation dtype; ``b`` is formed in the accumulation dtype (fp32, or fp64).
    """
    log_a = -c * torch.sigmoid(gate_a) * F.softplus(a_param)  # (B, T, R)
    a = torch.exp(log_a)
    beta = sqrt_bound_derivative(1 - torch.exp(2 * log_a))
    if reset is not None:
        rs = reset[..., None]  # (B, T, 1)
        a = a * ~rs
        beta = torch.where(rs, torch.ones_like(beta), beta)
    acc = acc_dtype(x.dtype)
    b = beta.to(acc) * (torch.sigmoid(gate_x) * x).to(acc)
    return a, b
