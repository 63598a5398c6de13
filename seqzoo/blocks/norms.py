"""Normalisation layers by name: PyTorch's own LayerNorm / RMSNorm, never re-written."""

from __future__ import annotations

from torch import nn

from ..errors import InputError

NORMS = ("layernorm", "layernorm_nobias", "rmsnorm", "none")


def make_norm(kind: str, d_model: int, eps: float = 1e-5) -> nn.Module:
    if kind == "layernorm":
        return nn.LayerNorm(d_model, eps=eps)
    if kind == "layernorm_nobias":  # xLSTM's weight-only LayerNorm
        return nn.LayerNorm(d_model, eps=eps, bias=False)
    if kind == "rmsnorm":
        return nn.RMSNorm(d_model, eps=eps)
    if kind == "none":
        return nn.Identity()
    raise InputError(f"unknown norm {kind!r}; expected one of {NORMS}")
