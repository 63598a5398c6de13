"""The model builder of MAD's compression task (Poli et al., arXiv:2403.17844; mad-lab's ``AutoEncoder``
backbone): a run configuration names it as ``{"builder": "seqzoo.experiments.mad_models:compression_autoencoder",
"args": {"encoder": <zoo model entry>}}``. Kept apart from ``mad.py`` because a run key hashes its builder's file:
editing the experiment's tables does not retrain a run.

The encoder is any zoo model (``zoo_models.py: model_spec``) without its LM head. It reads the row; its final hidden
state at the last position (the compression token) is the code ``c``. The decoder rebuilds every position t from
``c + p_t`` alone (``p_t`` a fixed sine/cosine position embedding), through MAD's non-expanding MLP:

    h_t = GELU(W_2 · RMSNorm(GELU(W_1 · RMSNorm(c + p_t))))      logits_t = W_out · RMSNorm(h_t)

so the whole row has to pass through the one vector ``c``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


def sincos_positions(length: int, dim: int) -> torch.Tensor:
    """``(length, dim)``: sines in the first half of the channels, cosines in the second, at geometric frequencies
    from 1 down to 1/10000 (the usual fixed embedding; ``dim`` even)."""
    half = dim // 2
    freq = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / max(1, half - 1))
    angle = torch.arange(length, dtype=torch.float32)[:, None] * freq[None, :]
    return torch.cat([angle.sin(), angle.cos()], dim=1)


class CompressionAutoEncoder(nn.Module):
    """``encoder`` (a zoo ``LanguageModel`` whose head is unused) + MAD's MLP decoder (module docstring)."""

    def __init__(self, encoder: nn.Module, vocab_size: int, seq_len: int):
        super().__init__()
        d = encoder.config.d_model
        if d % 2:
            raise ValueError(f"d_model must be even for the sine/cosine positions, got {d}")
        self.encoder = encoder
        del self.encoder.lm_head  # the code is read from the hidden state, never through a head
        self.register_buffer("positions", sincos_positions(seq_len, d), persistent=False)
        self.decoder = nn.Sequential(
            nn.RMSNorm(d), nn.Linear(d, d), nn.GELU(), nn.RMSNorm(d), nn.Linear(d, d), nn.GELU()
        )
        self.unembed = nn.Sequential(nn.RMSNorm(d), nn.Linear(d, vocab_size))
        for m in [*self.decoder, *self.unembed]:
            if isinstance(m, nn.Linear):  # mad-lab's init: N(0, 0.02) weights, zero biases
                nn.init.normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, input_ids: torch.Tensor, **_: Any):
        from ..models.lm import LMOutput

        hidden, states = self.encoder.trunk(input_ids)
        code = hidden[:, -1:, :]  # (B, 1, D): the state after the compression token
        T = input_ids.shape[1]
        logits = self.unembed(self.decoder(code + self.positions[:T].to(hidden.dtype)))
        return LMOutput(logits=logits, states=states)


def compression_autoencoder(task, encoder: dict[str, Any]) -> CompressionAutoEncoder:
    """The autoencoder around the zoo model ``encoder`` (a ``{"type": "lm", "config": ..., "init": ...}`` entry)."""
    from ..models.base import MODEL_TYPES
    from ..models.config import ModelConfig

    inner = MODEL_TYPES[encoder.get("type", "lm")](ModelConfig.from_dict(encoder["config"]))
    if encoder.get("init") == "xlstm":
        from ..models.presets.xlstm import xlstm_init_

        xlstm_init_(inner)
    return CompressionAutoEncoder(inner, task.vocab_size, task.seq_len)
