"""Blocks of the Orchid/M2 models (arXiv:2402.18508 §3.3, §4.2; M2, arXiv:2310.12109): block-diagonal (Monarch-style) MLPs and two layers.

``BlockDiagonalLinear``: the input is split into ``nb`` chunks and chunk b is mapped by its own
``(out/nb, in/nb)`` matrix (one block-diagonal factor of M2's MLP; no permutation).

Blocks (``ModelConfig.block``; MLP width from ``mlp_ratio``/``mlp_hidden``, ``extra["mlp_nblocks"]``, default 4):

* ``"m2"`` (Orchid-BERT / M2-BERT layer):  ``m = Mixer(x)``; ``out = LayerNorm(m + W2(GELU(g) . v))`` with
  ``[g, v] = W1 m`` (both block-diagonal, W1 without bias). No residual around the mixer: Orchid carries
  its own residual long convolution of the block input.
* ``"residual_bd"`` (Orchid-ViT): the pre-norm residual block with a block-diagonal GELU MLP:
  ``r = x + Mixer(Norm(x))``, ``out = r + W2(GELU(W1 Norm(r)))``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InputError
from ..mixers import build_mixer
from .norms import make_norm
from .residual import mixer_kwargs_for, register_block


class BlockDiagonalLinear(nn.Module):
    """``y[..., b] = W_b x[..., b] (+ bias)`` over ``nb`` equal chunks; weight ``(nb, out/nb, in/nb)``."""

    def __init__(self, in_features: int, out_features: int, nb: int = 4, bias: bool = True):
        super().__init__()
        if not isinstance(nb, int) or nb <= 0 or in_features % nb or out_features % nb:
            raise InputError(
                f"nb (blocks) must be a positive int dividing in_features={in_features} and "
                f"out_features={out_features}, got {nb!r}"
            )
        self.in_features, self.out_features, self.nb = in_features, out_features, nb
        self.weight = nn.Parameter(torch.empty(nb, out_features // nb, in_features // nb))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        bound = 1 / math.sqrt(in_features // nb)  # nn.Linear's init with fan-in = in/nb
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.in_features:
            raise InputError(
                f"BlockDiagonalLinear: x must have last dim in_features={self.in_features}, got shape {tuple(x.shape)}"
            )
        xb = x.reshape(*x.shape[:-1], self.nb, self.in_features // self.nb)  # (..., nb, in/nb)
        y = torch.einsum("...bi,boi->...bo", xb, self.weight).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, nb={self.nb}, bias={self.bias is not None}"


class BlockDiagonalMLP(nn.Module):
    """``glu=True``: ``W2(GELU(g) . v)``, ``[g, v] = W1 x`` (M2-BERT); ``glu=False``: ``W2 GELU(W1 x)``."""

    def __init__(self, d_model: int, hidden: int, nb: int = 4, glu: bool = True, dropout: float = 0.0):
        super().__init__()
        self.glu = glu
        self.w1 = BlockDiagonalLinear(d_model, 2 * hidden if glu else hidden, nb, bias=not glu)
        self.w2 = BlockDiagonalLinear(hidden, d_model, nb, bias=True)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.w1(x)
        if self.glu:
            g, v = h.chunk(2, dim=-1)
            h = F.gelu(g) * v  # exact (erf) GELU
        else:
            h = F.gelu(h)
        return self.w2(self.dropout(h))


def _hidden(config, mixer: str) -> int:
    return config.block_setting(mixer, "mlp_hidden") or round(config.block_setting(mixer, "mlp_ratio") * config.d_model)


@register_block("m2")
class M2Block(nn.Module):
    """M2/Orchid-BERT layer: mixer, then a block-diagonal GLU MLP with residual and post-LayerNorm."""

    def __init__(self, config, mixer: str, causal: bool | None = None):
        super().__init__()
        self.mixer = build_mixer(mixer, d_model=config.d_model, **mixer_kwargs_for(config, mixer, causal))
        self.mlp = BlockDiagonalMLP(
            config.d_model, _hidden(config, mixer), config.extra.get("mlp_nblocks", 4), glu=True, dropout=config.dropout
        )
        self.norm = make_norm(config.block_setting(mixer, "norm"), config.d_model, config.norm_eps)

    def forward(self, x: torch.Tensor, state: Any = None, mode: str | None = None, **mixer_inputs: Any):
        m, state = self.mixer(x, state=state, mode=mode, **mixer_inputs)
        return self.norm(m + self.mlp(m)), state


@register_block("residual_bd")
class BlockDiagonalResidualBlock(nn.Module):
    """Pre-norm residual block with a block-diagonal GELU MLP (Orchid-ViT)."""

    def __init__(self, config, mixer: str, causal: bool | None = None):
        super().__init__()
        d, eps = config.d_model, config.norm_eps
        self.norm1 = make_norm(config.block_setting(mixer, "norm"), d, eps)
        self.mixer = build_mixer(mixer, d_model=d, **mixer_kwargs_for(config, mixer, causal))
        self.norm2 = make_norm(config.block_setting(mixer, "norm"), d, eps)
        self.mlp = BlockDiagonalMLP(
            d, _hidden(config, mixer), config.extra.get("mlp_nblocks", 4), glu=False, dropout=config.dropout
        )
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, state: Any = None, mode: str | None = None, **mixer_inputs: Any):
        y, state = self.mixer(self.norm1(x), state=state, mode=mode, **mixer_inputs)
        x = x + self.dropout(y)
        return x + self.mlp(self.norm2(x)), state
