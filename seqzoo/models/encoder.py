"""Bidirectional encoder with a masked-LM head and a sequence-classification head.

Mixers whose constructor takes ``causal`` are built with ``causal=False`` (attention sees the whole
sequence); non-causal mixers such as Orchid are used as they are.

BERT / M2-BERT pieces, each switched on by a ``ModelConfig`` field (all off by default):

    x = LN(E_word[ids] + E_pos[t] + E_type[token_type_ids])          max_positions, type_vocab_size, embed_norm
    x_l = block_l(x_{l-1}) + E_pos[t]                                  readd_positions (M2 re-adds positions)
    MLM logits = W_E · LN(GELU(W_t h + b_t)) + b                       mlm_transform (decoder tied to W_E)
    CLS logits = W_c · tanh(W_p h_0 + b_p) + b_c                       pooler (first token)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..blocks import make_norm
from ..errors import InputError
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
        self.pos_embed_table = nn.Embedding(config.max_positions, d) if config.max_positions else None
        self.type_embed = nn.Embedding(config.type_vocab_size, d) if config.type_vocab_size else None
        for emb in (self.pos_embed_table, self.type_embed):
            if emb is not None:
                nn.init.normal_(emb.weight, std=config.embed_init_std)
        self.embed_norm = make_norm(config.norm, d, config.norm_eps) if config.embed_norm else None
        self.embed_dropout = nn.Dropout(config.dropout)
        self.mlm_transform = (
            nn.Sequential(nn.Linear(d, d), nn.GELU(), make_norm(config.norm, d, config.norm_eps))
            if config.mlm_transform
            else None
        )
        self.mlm_head = nn.Linear(d, config.vocab_size, bias=True)
        if config.tie_embeddings:
            self.mlm_head.weight = self.embed.weight
        self.pooler = nn.Sequential(nn.Linear(d, d), nn.Tanh()) if config.pooler else None
        self.cls_head = nn.Linear(d, config.n_classes) if config.n_classes else None

    def embed_inputs(self, input_ids=None, inputs_embeds=None, token_type_ids=None):
        """Word (or given) embeddings + positions + token types, normed; and the positions to re-add (or None)."""
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        if x.dim() != 3:
            raise InputError(f"inputs_embeds must have shape (B, T, d_model), got {tuple(x.shape)}")
        B, T = x.shape[:2]
        pos = None
        if self.pos_embed_table is not None:
            if T > self.config.max_positions:
                raise InputError(f"sequence length {T} exceeds ModelConfig.max_positions={self.config.max_positions}")
            pos = self.pos_embed_table.weight[:T].unsqueeze(0)  # (1, T, D)
            x = x + pos
        if token_type_ids is not None:
            if self.type_embed is None:
                raise InputError(
                    "token_type_ids given but this Encoder has no token-type embeddings "
                    "(ModelConfig.type_vocab_size = 0)"
                )
            if tuple(token_type_ids.shape) != (B, T):
                raise InputError(f"token_type_ids must have shape ({B}, {T}), got {tuple(token_type_ids.shape)}")
            if token_type_ids.numel() and (
                int(token_type_ids.min()) < 0 or int(token_type_ids.max()) >= self.config.type_vocab_size
            ):
                raise InputError(f"token_type_ids must lie in [0, type_vocab_size={self.config.type_vocab_size})")
            x = x + self.type_embed(token_type_ids.long())
        elif self.type_embed is not None:  # BERT's default: every token is of type 0
            x = x + self.type_embed.weight[0]
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        return self.embed_dropout(x), (pos if self.config.readd_positions else None)

    def forward(
        self, input_ids=None, labels=None, inputs_embeds=None, head: str = "mlm", mode=None, token_type_ids=None
    ) -> EncoderOutput:
        if head not in ("mlm", "cls"):
            raise InputError(f"head must be 'mlm' or 'cls', got {head!r}")
        if (input_ids is None) == (inputs_embeds is None):
            raise InputError("pass exactly one of input_ids (B, T) or inputs_embeds (B, T, d_model)")
        x, readd = self.embed_inputs(input_ids, inputs_embeds, token_type_ids)
        hidden, _ = self.trunk(inputs_embeds=x, mode=mode, after_layer=readd)
        if head == "mlm":
            h = self.mlm_transform(hidden) if self.mlm_transform is not None else hidden
            logits = self.mlm_head(h)
            loss = lm_loss(logits, labels) if labels is not None else None
        else:
            if self.cls_head is None:
                raise InputError("this Encoder has no classification head: set ModelConfig.n_classes")
            if self.pooler is not None:
                pooled = self.pooler(hidden[:, 0])
            else:
                pooled = hidden.mean(1) if self.config.pool == "mean" else hidden[:, 0]
            logits = self.cls_head(pooled)
            if labels is not None and labels.shape != logits.shape[:1]:
                raise InputError(
                    f"classification labels must have shape ({logits.shape[0]},), got {tuple(labels.shape)}"
                )
            loss = F.cross_entropy(logits.float(), labels.long()) if labels is not None else None
        return EncoderOutput(logits=logits, loss=loss, hidden=hidden)


MODEL_TYPES["encoder"] = Encoder
