"""Bidirectional encoder with a masked-LM head and a sequence-classification head.

Mixers whose constructor takes ``causal`` are built with ``causal=False`` (attention sees the whole
sequence); non-causal mixers such as Orchid are used as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .base import MODEL_TYPES, SeqzooModel
from .config import ModelConfig
from .lm import lm_loss


@dataclass
class EncoderOutput:
    logits: torch.Tensor  # (B, T, vocab) for "mlm", (B, n_classes) for "cls"
    loss: torch.Tensor | None = None
    hidden: torch.Tensor | None = None  # (B, T, d_model)


class Encoder(SeqzooModel):
    model_type = "encoder"
    causal_stack = False

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        d = config.d_model
        self.mlm_head = nn.Linear(d, config.vocab_size, bias=True)
        if config.tie_embeddings:
            self.mlm_head.weight = self.embed.weight
        self.cls_head = nn.Linear(d, config.n_classes) if config.n_classes else None

    def forward(self, input_ids=None, labels=None, inputs_embeds=None, head: str = "mlm", mode=None) -> EncoderOutput:
        hidden, _ = self.trunk(input_ids, inputs_embeds, None, mode)
        if head == "mlm":
            logits = self.mlm_head(hidden)
            loss = lm_loss(logits, labels) if labels is not None else None
        elif head == "cls":
            if self.cls_head is None:
                raise ValueError("this Encoder has no classification head: set ModelConfig.n_classes")
            pooled = hidden.mean(1) if self.config.pool == "mean" else hidden[:, 0]
            logits = self.cls_head(pooled)
            if labels is not None and labels.shape != logits.shape[:1]:
                raise ValueError(f"classification labels must have shape ({logits.shape[0]},), got {tuple(labels.shape)}")
            loss = F.cross_entropy(logits.float(), labels.long()) if labels is not None else None
        else:
            raise ValueError(f"head must be 'mlm' or 'cls', got {head!r}")
        return EncoderOutput(logits=logits, loss=loss, hidden=hidden)


MODEL_TYPES["encoder"] = Encoder
