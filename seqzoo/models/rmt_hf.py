"""Hugging Face transformers models as Recurrent Memory Transformer backbones (optional dependency).

RMT (Bulatov et al., arXiv:2207.06881, arXiv:2304.11062) feeds ``[memory ; token embeddings ; memory]`` as
``inputs_embeds`` and reads the final hidden states (after the final norm) at the memory slots. This
module adapts a ``transformers`` model (GPT-2, GPT-NeoX/Pythia, BERT, ... randomly initialised or loaded
from a local directory, optionally wrapped by ``peft``) to the protocol of ``seqzoo.models.rmt_backbone``.
Import it only when transformers is installed (``pip install seqzoo[hf]``).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from ..errors import InputError

# model types whose attention is bidirectional (encoder placement); everything else is treated as causal
ENCODER_TYPES = {
    "bert",
    "roberta",
    "distilbert",
    "albert",
    "electra",
    "deberta",
    "deberta-v2",
    "xlm-roberta",
    "camembert",
    "mpnet",
    "modernbert",
}


def _unwrap_peft(model: nn.Module) -> nn.Module:
    """A peft ``PeftModel`` delegates to the transformers model it wraps (LoRA layers are injected in place)."""
    get = getattr(model, "get_base_model", None)
    return get() if callable(get) else model


class HFBackbone(nn.Module):
    """Adapter: ``forward_embeds`` calls the base model with ``inputs_embeds`` and returns its final hidden states.

    ``hidden`` is ``last_hidden_state`` of the base model (GPT-2 / GPT-NeoX: after the final LayerNorm, i.e.
    ``hidden_states[-1]``; BERT: the last layer). Encoders get ``[CLS] memory [SEP] tokens [SEP]``: the
    [CLS]/[SEP] embeddings are the word embeddings of ``cls_token_id`` / ``sep_token_id``.
    """

    supports_custom_mask = False  # explicit (T, T) masks through HF models are not wired here (attn_mask="causal")
    supports_padding = True

    def __init__(
        self,
        model: nn.Module,
        causal: bool | None = None,
        cls_token_id: int | None = None,
        sep_token_id: int | None = None,
    ):
        super().__init__()
        self.model = model  # the object the user passed (PeftModel or PreTrainedModel)
        inner = _unwrap_peft(model)
        cfg = inner.config
        self.hf_config = cfg
        prefix = getattr(inner, "base_model_prefix", "")
        self._inner = [inner]  # not registered twice as a submodule
        self._base = [getattr(inner, prefix, inner) if prefix else inner]
        # transformers 5.24 renamed past_key_values to cache (in forward arguments and in outputs)
        takes_cache = "cache" in inspect.signature(self._base[0].forward).parameters
        self._cache_name = "cache" if takes_cache else "past_key_values"
        self.d_model = int(getattr(cfg, "hidden_size", None) or cfg.n_embd)
        emb = inner.get_input_embeddings()
        if emb is None or getattr(emb, "weight", None) is None:
            raise InputError(f"{type(inner).__name__} has no input embedding table; RMT needs inputs_embeds support")
        if emb.weight.shape[1] != self.d_model:
            raise InputError(
                f"the input embedding width {emb.weight.shape[1]} differs from hidden size {self.d_model}; "
                f"RMT's memory must have the width of both"
            )
        model_type = getattr(cfg, "model_type", "")
        self.causal = (
            bool(causal)
            if causal is not None
            else (model_type not in ENCODER_TYPES or bool(getattr(cfg, "is_decoder", False)))
        )
        pos = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None)
        uses_rotary = model_type in ("gpt_neox", "llama", "mistral", "qwen2", "gemma", "phi", "phi3")
        self.max_positions = None if uses_rotary else (int(pos) if pos else None)
        if not self.causal:
            cls_token_id = cls_token_id if cls_token_id is not None else getattr(cfg, "cls_token_id", None)
            sep_token_id = sep_token_id if sep_token_id is not None else getattr(cfg, "sep_token_id", None)
            # bert-base vocabularies: [CLS] = 101, [SEP] = 102
            self.cls_token_id = 101 if cls_token_id is None else int(cls_token_id)
            self.sep_token_id = 102 if sep_token_id is None else int(sep_token_id)
            vocab = emb.weight.shape[0]
            for name in ("cls_token_id", "sep_token_id"):
                if not 0 <= getattr(self, name) < vocab:
                    raise InputError(f"{name}={getattr(self, name)} is outside the vocabulary [0, {vocab})")

    # -------------------------------------------------------------- protocol
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self._inner[0].get_input_embeddings()(input_ids.long())  # (B, T, D) word embeddings only

    def embed_std(self) -> float:
        return float(self._inner[0].get_input_embeddings().weight.detach().float().std())

    def _special(self, token_id: int) -> torch.Tensor:
        return self._inner[0].get_input_embeddings().weight[token_id]  # (D,)

    def cls_embed(self):  # only meaningful for encoders; RMT asks through getattr
        return self._special(self.cls_token_id) if not self.causal else None

    def sep_embed(self):
        return self._special(self.sep_token_id) if not self.causal else None

    def forward_embeds(
        self,
        inputs_embeds: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        states: Any = None,
        return_states: bool = False,
    ):
        if attn_mask is not None:
            raise InputError("HFBackbone does not accept an explicit attn_mask (supports_custom_mask=False)")
        kwargs: dict[str, Any] = {"inputs_embeds": inputs_embeds}
        if key_padding_mask is not None:
            if states is not None:
                raise InputError("key_padding_mask with a KV cache is not supported")
            kwargs["attention_mask"] = key_padding_mask.long()
        if return_states or states is not None:
            kwargs[self._cache_name] = states
            kwargs["use_cache"] = True
        else:
            kwargs["use_cache"] = False
        out = self._base[0](**kwargs)
        hidden = out.last_hidden_state  # (B, T, D) after the final norm
        if not return_states:
            return hidden
        return hidden, out.get("cache", out.get("past_key_values"))  # the field's name depends on the version

    def lm_head(self, hidden: torch.Tensor) -> torch.Tensor:
        head = self._inner[0].get_output_embeddings()
        if head is None:
            raise InputError(f"{type(self._inner[0]).__name__} has no LM head (get_output_embeddings() is None)")
        return head(hidden)


def lora_backbone(
    model: nn.Module, r: int = 8, alpha: int = 16, dropout: float = 0.0, target_modules: list[str] | None = None
) -> nn.Module:
    """Wrap a transformers model with peft LoRA adapters (backbone frozen, adapters trainable).

    Wrap before RMT does (docs/rmt.md): ``RMT(lora_backbone(gpt2), cfg)``; RMT's memory stays trainable.
    """
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("LoRA needs the optional dependency peft: pip install 'seqzoo[peft]'") from e
    if not isinstance(r, int) or r < 1:
        raise InputError(f"r (LoRA rank) must be an int >= 1, got {r!r}")
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules)
    return get_peft_model(model, cfg)
