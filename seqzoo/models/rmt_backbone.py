"""The backbone protocol of the Recurrent Memory Transformer wrapper and the adapter for seqzoo models.

RMT (Bulatov et al., arXiv:2207.06881; Bulatov et al., arXiv:2304.11062) only needs a backbone that maps
input *embeddings* to final hidden states; memory vectors are concatenated with the token embeddings of
each segment. A backbone object provides (duck-typed; docs/rmt.md):

    d_model                int: width of inputs_embeds and of the final hidden states
    causal                 bool: sets the default placement ("read_write" if causal else "encoder")
    max_positions          int or None: absolute position budget (None: no absolute table, e.g. RoPE)
    supports_custom_mask   bool: accepts an explicit (T, T) boolean attention mask
    supports_padding       bool: accepts a (B, T) key-padding mask (True = real token)
    embed(input_ids)       (B, T) -> (B, T, D) token embeddings, without positions
    forward_embeds(x, attn_mask=None, key_padding_mask=None, states=None, return_states=False)
                           -> hidden (B, T, D) after the final norm (and the new states if asked)
    lm_head(hidden)        -> logits (LM tasks only)
    embed_std()            std used to initialise the memory parameter (0.02 if unknown)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import InputError

REQUIRED_MEMBERS = ("d_model", "causal", "embed", "forward_embeds")


class SeqzooBackbone(nn.Module):
    """Adapter: a seqzoo ``LanguageModel`` or ``Encoder`` as an RMT backbone.

    Positions: seqzoo mixers are position-free or use RoPE inside attention, so there is no absolute
    table (``max_positions = None``) and positions restart at 0 in every backbone call.
    """

    supports_custom_mask = False
    supports_padding = False
    max_positions = None

    def __init__(self, model: nn.Module):
        super().__init__()
        from .base import SeqzooModel

        if not isinstance(model, SeqzooModel):
            raise InputError(f"SeqzooBackbone wraps a seqzoo LanguageModel or Encoder, got {type(model).__name__}")
        self.model = model
        self.d_model = model.config.d_model
        self.causal = bool(model.causal_stack) and all(getattr(b.mixer, "causal", False) for b in model.blocks)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)  # (B, T, D), includes the model's embed_scale

    def forward_embeds(
        self,
        inputs_embeds: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        states: Any = None,
        return_states: bool = False,
    ):
        if attn_mask is not None:
            raise InputError("seqzoo backbones do not accept an explicit attn_mask (supports_custom_mask=False)")
        if key_padding_mask is not None and not bool(key_padding_mask.all()):
            raise InputError("seqzoo backbones do not support padded batches (attention_mask with zeros)")
        hidden, new_states = self.model.trunk(inputs_embeds=inputs_embeds, states=states)
        return (hidden, new_states) if return_states else hidden

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        head = getattr(self.model, "lm_head", None)
        if head is None:
            raise InputError(f"{type(self.model).__name__} has no LM head; use task='classification'")
        logits = head(hidden)
        cap = self.model.config.logit_softcap
        return cap * torch.tanh(logits / cap) if cap is not None else logits

    def embed_std(self) -> float:
        std = float(self.model.embed.weight.detach().float().std())
        scale = self.model.config.embed_scale
        return std * (scale if scale is not None else 1.0)


def as_backbone(backbone: Any) -> Any:
    """Return an object satisfying the protocol: adapts seqzoo and Hugging Face models, checks the rest."""
    from .base import SeqzooModel

    if isinstance(backbone, SeqzooModel):
        return SeqzooBackbone(backbone)
    if _is_hf_model(backbone):
        from .rmt_hf import HFBackbone  # lazy: transformers is optional

        return HFBackbone(backbone)
    missing = [name for name in REQUIRED_MEMBERS if not hasattr(backbone, name)]
    if missing:
        raise InputError(
            f"backbone must accept input embeddings: a seqzoo model, a Hugging Face PreTrainedModel, or an object "
            f"with {REQUIRED_MEMBERS} (seqzoo/models/rmt_backbone.py); {type(backbone).__name__} lacks {missing}"
        )
    return backbone


def _is_hf_model(obj: Any) -> bool:
    """True for transformers PreTrainedModel / peft PeftModel instances (checked without importing transformers)."""
    for cls in type(obj).__mro__:
        if cls.__module__.startswith(("transformers.", "peft.")) and cls.__name__ in ("PreTrainedModel", "PeftModel"):
            return True
    return False
