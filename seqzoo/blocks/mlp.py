"""Channel-mixing MLPs by name.

* ``gelu``:  W2 gelu(W1 x)                       (Transformer / GateLoop FFN)
* ``swiglu``: W2 (silu(W1 x) * W3 x)             (LLaMA-style)
* ``geglu``:  W2 (gelu(W1 x) * W3 x)
* ``gelu_tanh_gated``: W2 (gelu_tanh(W1 x) * W3 x)  (Griffin's gated MLP, expansion 3)
* ``none``: no MLP in the block (xLSTM's mLSTM block carries its own up-projection)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InputError

MLPS = ("gelu", "swiglu", "geglu", "gelu_tanh_gated", "none")


class MLP(nn.Module):
    def __init__(self, d_model: int, hidden: int, kind: str = "gelu", bias: bool = False, dropout: float = 0.0):
        super().__init__()
        if kind not in MLPS or kind == "none":
            raise InputError(f"unknown MLP kind {kind!r}; expected one of {MLPS[:-1]}")
        if hidden <= 0:
            raise InputError(f"MLP hidden width must be positive, got {hidden}")
        self.kind = kind
        self.gated = kind != "gelu"
        self.up = nn.Linear(d_model, hidden, bias=bias)
        self.gate = nn.Linear(d_model, hidden, bias=bias) if self.gated else None
        self.down = nn.Linear(hidden, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        if self.kind == "gelu":
            h = F.gelu(h)
        elif self.kind == "swiglu":
            h = F.silu(h) * self.gate(x)
        elif self.kind == "geglu":
            h = F.gelu(h) * self.gate(x)
        else:  # gelu_tanh_gated
            h = F.gelu(h, approximate="tanh") * self.gate(x)
        return self.dropout(self.down(h))


def make_mlp(
    kind: str, d_model: int, ratio: float = 4.0, hidden: int | None = None, bias: bool = False, dropout: float = 0.0
) -> nn.Module | None:
    if kind == "none":
        return None
    return MLP(d_model, hidden or round(ratio * d_model), kind=kind, bias=bias, dropout=dropout)
