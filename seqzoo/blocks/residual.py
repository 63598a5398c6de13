"""Blocks: the unit a model stacks. ``BLOCKS`` maps a name to a class built as ``cls(config, mixer, causal)``.

``residual`` (pre-norm, used by the Transformer baseline, GateLoop, Griffin and the xLSTM stacks):

    r   = x + Mixer(Norm(x))
    out = r + MLP(Norm(r))        (the MLP is skipped when the layer's ``mlp`` is "none")

Every block has the mixer's call signature: ``out, state = block(x, state=None, mode=None)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..mixers import MIXERS, build_mixer
from .mlp import make_mlp
from .norms import make_norm

BLOCKS: dict[str, type[nn.Module]] = {}


def register_block(name: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    def wrap(cls):
        BLOCKS[name] = cls
        return cls

    return wrap


def mixer_kwargs_for(config, mixer: str, causal: bool | None) -> dict[str, Any]:
    """The layer's mixer kwargs; ``causal=False`` is passed only to mixers whose constructor takes it."""
    kwargs = dict(config.mixer_kwargs.get(mixer, {}))
    if causal is False and mixer in MIXERS and "causal" in inspect.signature(MIXERS[mixer].__init__).parameters:
        kwargs.setdefault("causal", False)
    return kwargs


@register_block("residual")
class ResidualBlock(nn.Module):
    def __init__(self, config, mixer: str, causal: bool | None = None):
        super().__init__()
        d = config.d_model
        eps = config.norm_eps
        self.norm1 = make_norm(config.block_setting(mixer, "norm"), d, eps)
        self.mixer = build_mixer(mixer, d_model=d, **mixer_kwargs_for(config, mixer, causal))
        self.mlp = make_mlp(
            config.block_setting(mixer, "mlp"),
            d,
            ratio=config.block_setting(mixer, "mlp_ratio"),
            hidden=config.block_setting(mixer, "mlp_hidden"),
            bias=config.block_setting(mixer, "mlp_bias"),
            dropout=config.dropout,
        )
        self.norm2 = make_norm(config.block_setting(mixer, "norm"), d, eps) if self.mlp is not None else None
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, state: Any = None, mode: str | None = None, **mixer_inputs: Any):
        y, state = self.mixer(self.norm1(x), state=state, mode=mode, **mixer_inputs)
        x = x + self.dropout(y)
        if self.mlp is not None:
            x = x + self.mlp(self.norm2(x))
        return x, state
