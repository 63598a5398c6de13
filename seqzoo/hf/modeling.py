"""transformers ``PreTrainedModel`` / ``GenerationMixin`` classes around seqzoo's ``LanguageModel`` and ``Encoder``.

Each wrapper builds (or adopts) one seqzoo model and registers that model's children (``embed``, ``blocks``,
``norm``, ``lm_head`` / ``mlm_head`` / ``cls_head``) as its own, so the wrapper's parameter names - and therefore
``model.safetensors`` - are exactly seqzoo's. ``model.seqzoo_model`` is the wrapped seqzoo model; it shares every
parameter with the wrapper.

Conventions that differ between the libraries and how they are bridged:

* Causal-LM ``labels`` follow transformers: the wrapper shifts them (``labels[:, t+1]`` is the target at t) and
  calls seqzoo's aligned ``lm_loss``, so ``labels=input_ids`` gives the standard next-token loss. Masked-LM
  labels are aligned in both libraries (no shift).
* ``past_key_values`` is a :class:`~seqzoo.hf.cache.SeqzooCache` holding the per-layer seqzoo states. transformers
  5.24 renamed it ``cache`` (in ``generate`` and in the output classes); both names are accepted, and outputs use the
  field name of the installed transformers.
* seqzoo models have no padding mask: ``attention_mask`` is accepted when it is all ones (what a tokenizer
  returns for unpadded text) and refused otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    MaskedLMOutput,
    SequenceClassifierOutput,
)

from ..errors import InputError
from ..models.base import MODEL_TYPES
from ..models.base import SeqzooModel as _SeqzooCore
from ..models.lm import lm_loss
from .cache import SeqzooCache
from .configuration import SeqzooConfig, SeqzooEncoderConfig, SeqzooLMConfig

# keyword arguments transformers may pass that these models accept and ignore (no effect on seqzoo models)
_IGNORED_KWARGS = {"output_attentions", "position_ids", "is_causal", "output_router_logits", "token_type_ids"}


def output_with_cache(output_class: type, cache: SeqzooCache | None, **fields: Any):
    """``output_class(**fields)`` with the cache under the installed transformers' field name (``cache`` since
    transformers 5.24, ``past_key_values`` before), so neither version warns about the other's name."""
    names = {f.name for f in dataclasses.fields(output_class)}
    return output_class(**fields, **{"cache" if "cache" in names else "past_key_values": cache})


def one_cache_argument(past_key_values: Any, cache: Any) -> Any:
    """The cache passed under either name (transformers 5.24's ``generate`` passes ``cache=``); both is an error."""
    if past_key_values is not None and cache is not None:
        raise InputError("pass the cache as past_key_values or as cache, not both")
    return cache if cache is not None else past_key_values


def check_attention_mask(attention_mask: torch.Tensor | None, batch: int, length: int) -> None:
    """seqzoo models attend to every token: accept no mask or an all-ones ``(B, >= T)`` mask, refuse padding."""
    if attention_mask is None:
        return
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        raise InputError(
            f"attention_mask must be a 2-D tensor (B, T), got "
            f"{tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__}"
        )
    if attention_mask.shape[0] != batch or attention_mask.shape[1] < length:
        raise InputError(f"attention_mask must have shape ({batch}, >= {length}), got {tuple(attention_mask.shape)}")
    if not bool(attention_mask.bool().all()):
        raise InputError(
            "seqzoo models have no padding mask: attention_mask must be all ones (pass unpadded "
            "sequences, e.g. one prompt at a time or prompts of equal length)"
        )


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    """transformers' causal-LM labels -> seqzoo's aligned labels: ``out[:, t] = labels[:, t + 1]``, last = -100."""
    aligned = labels.new_full(labels.shape, -100)
    aligned[:, :-1] = labels[:, 1:]
    return aligned


def causal_lm_loss(
    logits: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
) -> torch.Tensor:
    """Loss for transformers-style (unshifted) labels: shift, then seqzoo's aligned cross-entropy.

    With ``num_items_in_batch`` (the Trainer's gradient-accumulation normaliser) the summed loss is divided by it.
    """
    if not isinstance(labels, torch.Tensor) or labels.shape != logits.shape[:-1]:
        raise InputError(
            f"labels must have shape {tuple(logits.shape[:-1])} (the shape of input_ids; they are "
            f"shifted inside the model), got {tuple(getattr(labels, 'shape', ()))}"
        )
    aligned = shift_labels(labels.to(logits.device))
    if num_items_in_batch is None:
        return lm_loss(logits, aligned)
    total = F.cross_entropy(logits.float().flatten(0, 1), aligned.flatten().long(), ignore_index=-100, reduction="sum")
    return total / num_items_in_batch


class SeqzooPreTrainedModel(PreTrainedModel):
    """Common base: builds or adopts the seqzoo model, exposes it as ``seqzoo_model``, loads seqzoo checkpoints."""

    config_class = SeqzooConfig
    base_model_prefix = ""  # parameter names are seqzoo's own: no "model." prefix
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    _no_split_modules: ClassVar[list[str]] = []
    seqzoo_kind: ClassVar[str] = ""

    def __init__(self, config: SeqzooConfig, seqzoo_model: _SeqzooCore | None = None):
        if not isinstance(config, self.config_class):
            raise InputError(f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}")
        super().__init__(config)
        core_cls = MODEL_TYPES[self.seqzoo_kind]
        if seqzoo_model is None:
            seqzoo_model = core_cls(config.to_seqzoo())
        elif type(seqzoo_model) is not core_cls:
            raise InputError(
                f"{type(self).__name__} wraps a seqzoo {core_cls.__name__}, got {type(seqzoo_model).__name__}"
            )
        self.__dict__["_seqzoo"] = seqzoo_model  # not registered: its children are registered below, under their names
        for name, child in seqzoo_model.named_children():
            self.add_module(name, child)
        # seqzoo has initialised everything (its own, paper-specific init): keep transformers' init off these
        for t in list(self.parameters()) + list(self.buffers()):
            t._is_hf_initialized = True
        self.post_init()

    @classmethod
    def from_seqzoo(cls, model: _SeqzooCore, **config_kwargs: Any):
        """Wrap an existing seqzoo model (no copy: the wrapper shares its parameters)."""
        if not isinstance(model, _SeqzooCore):
            raise InputError(f"model must be a seqzoo LanguageModel or Encoder, got {type(model).__name__}")
        config = cls.config_class.from_seqzoo(model.config, **config_kwargs)
        return cls(config, seqzoo_model=model).train(model.training)  # same train/eval mode as the model

    @classmethod
    def get_init_context(cls, *args: Any, **kwargs: Any) -> list:
        """transformers builds models on the meta device before loading; seqzoo mixers compute tables in their
        constructors (e.g. Orchid's positional features) that do not survive that, so build on the real device
        (a transient second copy of the weights during ``from_pretrained``)."""
        contexts = super().get_init_context(*args, **kwargs)
        return [c for c in contexts if not (isinstance(c, torch.device) and c.type == "meta")]

    @property
    def seqzoo_model(self) -> _SeqzooCore:
        """The wrapped ``seqzoo.LanguageModel`` / ``seqzoo.Encoder`` (same parameters as this model)."""
        return self.__dict__["_seqzoo"]

    def train(self, mode: bool = True):
        super().train(mode)
        self.seqzoo_model.training = mode  # its children are ours and already switched
        return self

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def set_input_embeddings(self, value: nn.Module) -> None:
        self.embed = value
        self.seqzoo_model.embed = value

    def resize_token_embeddings(self, *args: Any, **kwargs: Any) -> nn.Embedding:
        """transformers' resize (embedding and, when untied, output head); keeps seqzoo's ``vocab_size`` in step."""
        out = super().resize_token_embeddings(*args, **kwargs)
        self.seqzoo_model.config.vocab_size = self.config.vocab_size = int(self.embed.weight.shape[0])
        return out

    def _init_weights(self, module: nn.Module) -> None:
        """Initialise what a checkpoint did not provide, with seqzoo's own init.

        transformers calls this per module after loading; the weights it flags as not loaded are copied from a
        freshly built seqzoo model (built once, on the CPU, only when something is missing), so e.g. a new
        classification head gets exactly the init ``seqzoo.Encoder`` would give it.
        """
        if module is not self:
            return
        named = list(self.named_parameters(remove_duplicate=False)) + list(self.named_buffers(remove_duplicate=False))
        missing = [(n, t) for n, t in named if not getattr(t, "_is_hf_initialized", False) and t.device.type != "meta"]
        if not missing:
            return
        with torch.device("cpu"):
            fresh = MODEL_TYPES[self.seqzoo_kind](self.config.to_seqzoo())
        ref = dict(fresh.named_parameters(remove_duplicate=False)) | dict(fresh.named_buffers(remove_duplicate=False))
        with torch.no_grad():
            for name, t in missing:
                t.copy_(ref[name].to(dtype=t.dtype))
                t._is_hf_initialized = True

    # ---------------------------------------------------------------- helpers
    def _check_kwargs(self, kwargs: dict[str, Any]) -> None:
        unknown = sorted(k for k, v in kwargs.items() if v is not None and k not in _IGNORED_KWARGS)
        if unknown:
            raise InputError(f"{type(self).__name__}.forward() got unexpected keyword argument(s) {unknown}")

    def _run_trunk(self, input_ids, inputs_embeds, states, mode, output_hidden_states: bool):
        """seqzoo's trunk; with ``output_hidden_states`` also the input of every block and the final-normed output."""
        core = self.seqzoo_model
        collected: list[torch.Tensor] = []
        hooks = []
        if output_hidden_states:

            def grab(module, args, kwargs):
                collected.append(args[0] if args else kwargs["x"])

            hooks = [b.register_forward_pre_hook(grab, with_kwargs=True) for b in core.blocks]
        try:
            hidden, new_states = core.trunk(input_ids, inputs_embeds, states, mode)
        finally:
            for h in hooks:
                h.remove()
        all_hidden = tuple(collected) + (hidden,) if output_hidden_states else None
        return hidden, new_states, all_hidden

    @staticmethod
    def _batch_length(input_ids, inputs_embeds) -> tuple[int, int]:
        x = input_ids if input_ids is not None else inputs_embeds
        if x is None:
            raise InputError("pass input_ids (B, T) or inputs_embeds (B, T, d_model)")
        if x.dim() < 2:
            raise InputError(f"input_ids must have shape (B, T), got {tuple(x.shape)}")
        return int(x.shape[0]), int(x.shape[1])


# ============================================================== causal LM side
class _SeqzooLMBase(SeqzooPreTrainedModel):
    config_class = SeqzooLMConfig
    seqzoo_kind = "lm"
    _is_stateful = True  # recurrent states cannot be rolled back: no assisted decoding

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the model creates its own SeqzooCache on the first call

    @staticmethod
    def _prepare_cache(past_key_values, use_cache: bool, num_layers: int) -> SeqzooCache | None:
        if past_key_values is None:
            return SeqzooCache(num_layers) if use_cache else None
        if isinstance(past_key_values, SeqzooCache):
            return past_key_values
        if isinstance(past_key_values, Cache) and past_key_values.get_seq_length() == 0:
            return SeqzooCache(num_layers)  # an empty transformers cache (e.g. DynamicCache()) is replaced
        raise InputError(
            f"past_key_values must be a seqzoo.hf.SeqzooCache (as returned by this model), got "
            f"{type(past_key_values).__name__}; seqzoo states do not fit transformers' key/value caches"
        )

    def _stream(
        self, input_ids, attention_mask, past_key_values, inputs_embeds, use_cache, mode, output_hidden_states, kwargs
    ):
        self._check_kwargs(kwargs)
        batch, length = self._batch_length(input_ids, inputs_embeds)
        check_attention_mask(attention_mask, batch, length)
        if use_cache is None:
            use_cache = not self.training
        cache = self._prepare_cache(past_key_values, use_cache, len(self.seqzoo_model.blocks))
        states = cache.states if cache is not None else None
        if output_hidden_states is None:
            output_hidden_states = bool(self.config.output_hidden_states)
        hidden, new_states, all_hidden = self._run_trunk(input_ids, inputs_embeds, states, mode, output_hidden_states)
        if cache is not None:
            cache.update_states(new_states, length)
        return hidden, cache, all_hidden


class SeqzooLMModel(_SeqzooLMBase):
    """``AutoModel`` for a seqzoo causal LM: final-normed hidden states (the LM head is kept, unused, so that the
    parameters - and saved files - stay those of ``seqzoo.LanguageModel``)."""

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: SeqzooCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        mode: str | None = None,
        cache: SeqzooCache | None = None,
        **kwargs: Any,
    ):
        """Returns ``BaseModelOutputWithPast(last_hidden_state (B, T, d_model), past_key_values, hidden_states)``."""
        past_key_values = one_cache_argument(past_key_values, cache)
        hidden, cache, all_hidden = self._stream(
            input_ids, attention_mask, past_key_values, inputs_embeds, use_cache, mode, output_hidden_states, kwargs
        )
        out = output_with_cache(BaseModelOutputWithPast, cache, last_hidden_state=hidden, hidden_states=all_hidden)
        return out if (return_dict if return_dict is not None else self.config.return_dict) else out.to_tuple()


class SeqzooForCausalLM(_SeqzooLMBase, GenerationMixin):
    """``AutoModelForCausalLM`` for any seqzoo ``LanguageModel`` (any mixer pattern); works with ``generate()``.

    ``labels`` follow transformers (shifted inside): ``labels=input_ids`` is the next-token loss, equal to seqzoo's
    loss with aligned labels ``input_ids[:, 1:]``. ``logits_to_keep=k`` computes the logits of the last k positions
    only (a 1-D index tensor selects positions). ``mode`` is passed to every seqzoo mixer.
    """

    _tied_weights_keys: ClassVar[dict[str, str]] = {"lm_head.weight": "embed.weight"}

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.lm_head = value
        self.seqzoo_model.lm_head = value

    def project(self, hidden: torch.Tensor) -> torch.Tensor:
        """LM head and optional logit soft-cap: what ``seqzoo.LanguageModel.forward`` does after the trunk."""
        logits = self.lm_head(hidden)
        cap = self.seqzoo_model.config.logit_softcap
        if cap is not None:
            logits = cap * torch.tanh(logits / cap)
        return logits

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: SeqzooCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        mode: str | None = None,
        cache: SeqzooCache | None = None,
        **kwargs: Any,
    ):
        """Returns ``CausalLMOutputWithPast(loss, logits, past_key_values, hidden_states)``."""
        num_items = kwargs.pop("num_items_in_batch", None)
        keep_all = isinstance(logits_to_keep, int) and logits_to_keep == 0
        if isinstance(logits_to_keep, int) and logits_to_keep < 0:
            raise InputError(f"logits_to_keep must be >= 0 (0 keeps every position), got {logits_to_keep}")
        if labels is not None and not keep_all:
            raise InputError("labels need the logits of every position: pass logits_to_keep=0 with labels")
        past_key_values = one_cache_argument(past_key_values, cache)
        hidden, cache, all_hidden = self._stream(
            input_ids, attention_mask, past_key_values, inputs_embeds, use_cache, mode, output_hidden_states, kwargs
        )
        if not keep_all:
            index = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
            hidden = hidden[:, index]
        logits = self.project(hidden)
        loss = causal_lm_loss(logits, labels, num_items) if labels is not None else None
        out = output_with_cache(CausalLMOutputWithPast, cache, loss=loss, logits=logits, hidden_states=all_hidden)
        return out if (return_dict if return_dict is not None else self.config.return_dict) else out.to_tuple()


# ================================================================ encoder side
class _SeqzooEncoderBase(SeqzooPreTrainedModel):
    config_class = SeqzooEncoderConfig
    seqzoo_kind = "encoder"
    _tied_weights_keys: ClassVar[dict[str, str]] = {"mlm_head.weight": "embed.weight"}

    def _encode(self, input_ids, attention_mask, inputs_embeds, mode, output_hidden_states, kwargs):
        self._check_kwargs(kwargs)
        batch, length = self._batch_length(input_ids, inputs_embeds)
        check_attention_mask(attention_mask, batch, length)
        if output_hidden_states is None:
            output_hidden_states = bool(self.config.output_hidden_states)
        hidden, _, all_hidden = self._run_trunk(input_ids, inputs_embeds, None, mode, output_hidden_states)
        return hidden, all_hidden

    def _wants_dict(self, return_dict: bool | None) -> bool:
        return return_dict if return_dict is not None else self.config.return_dict


class SeqzooEncoderModel(_SeqzooEncoderBase):
    """``AutoModel`` for a seqzoo ``Encoder``: final-normed hidden states (heads kept, unused)."""

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        mode: str | None = None,
        **kwargs: Any,
    ):
        hidden, all_hidden = self._encode(input_ids, attention_mask, inputs_embeds, mode, output_hidden_states, kwargs)
        out = BaseModelOutputWithPast(last_hidden_state=hidden, hidden_states=all_hidden)
        return out if self._wants_dict(return_dict) else out.to_tuple()


class SeqzooForMaskedLM(_SeqzooEncoderBase):
    """``AutoModelForMaskedLM`` for a seqzoo ``Encoder`` (its ``"mlm"`` head). Labels are aligned, -100 = unscored."""

    def get_output_embeddings(self) -> nn.Module:
        return self.mlm_head

    def set_output_embeddings(self, value: nn.Module) -> None:
        self.mlm_head = value
        self.seqzoo_model.mlm_head = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        mode: str | None = None,
        **kwargs: Any,
    ):
        kwargs.pop("num_items_in_batch", None)
        hidden, all_hidden = self._encode(input_ids, attention_mask, inputs_embeds, mode, output_hidden_states, kwargs)
        logits = self.mlm_head(hidden)
        loss = lm_loss(logits, labels.to(logits.device)) if labels is not None else None
        out = MaskedLMOutput(loss=loss, logits=logits, hidden_states=all_hidden)
        return out if self._wants_dict(return_dict) else out.to_tuple()


class SeqzooForSequenceClassification(_SeqzooEncoderBase):
    """``AutoModelForSequenceClassification`` for a seqzoo ``Encoder`` (its ``"cls"`` head, ``num_labels = n_classes``).

    The loss follows ``config.problem_type`` as in transformers: cross-entropy for integer labels (seqzoo's loss),
    MSE when ``num_labels == 1`` (regression), BCE-with-logits for multi-label float targets.
    """

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        mode: str | None = None,
        **kwargs: Any,
    ):
        kwargs.pop("num_items_in_batch", None)
        hidden, all_hidden = self._encode(input_ids, attention_mask, inputs_embeds, mode, output_hidden_states, kwargs)
        pooled = (
            hidden.mean(1) if self.seqzoo_model.config.pool == "mean" else hidden[:, 0]
        )  # as seqzoo.Encoder(head="cls")
        logits = self.cls_head(pooled)
        loss = self._loss(logits, labels) if labels is not None else None
        out = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=all_hidden)
        return out if self._wants_dict(return_dict) else out.to_tuple()

    def _loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        labels = labels.to(logits.device)
        n = logits.shape[-1]
        problem = self.config.problem_type
        if problem is None:
            if n == 1:
                problem = "regression"
            elif labels.dtype in (torch.long, torch.int):
                problem = "single_label_classification"
            else:
                problem = "multi_label_classification"
        if problem == "regression":
            return F.mse_loss(logits.float().squeeze(-1), labels.float().reshape(logits.shape[0]))
        if problem == "single_label_classification":
            if labels.shape != logits.shape[:1]:
                raise InputError(
                    f"classification labels must have shape ({logits.shape[0]},), got {tuple(labels.shape)}"
                )
            return F.cross_entropy(logits.float(), labels.long())
        if labels.shape != logits.shape:
            raise InputError(f"multi-label targets must have shape {tuple(logits.shape)}, got {tuple(labels.shape)}")
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())

    def __init__(self, config: SeqzooEncoderConfig, seqzoo_model: _SeqzooCore | None = None):
        if isinstance(config, SeqzooEncoderConfig) and not config.n_classes:
            config.n_classes = config.num_labels  # the head needs a size: transformers' default num_labels
        super().__init__(config, seqzoo_model)
        if self.cls_head is None:
            raise InputError("the wrapped seqzoo Encoder has no classification head: set ModelConfig.n_classes")


__all__ = [
    "SeqzooEncoderModel",
    "SeqzooForCausalLM",
    "SeqzooForMaskedLM",
    "SeqzooForSequenceClassification",
    "SeqzooLMModel",
    "SeqzooPreTrainedModel",
    "causal_lm_loss",
    "check_attention_mask",
    "shift_labels",
]
