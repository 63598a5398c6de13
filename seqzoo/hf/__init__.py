"""Optional Hugging Face transformers adapter for every seqzoo ``LanguageModel`` and ``Encoder``.

    import seqzoo.hf  # registers the classes below with the transformers Auto* factories
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(dir_written_by_seqzoo)
    model.generate(ids, max_new_tokens=20)

Importing this package imports transformers (``pip install seqzoo[hf]``); ``import seqzoo`` never does.
Registered on import: ``AutoConfig`` for model types ``"seqzoo-lm"`` and ``"seqzoo-encoder"`` (the ``model_type``
seqzoo itself writes into ``config.json``; the bare ``"lm"`` / ``"encoder"`` of folders written before read as
those), ``AutoModel``, ``AutoModelForCausalLM``, ``AutoModelForMaskedLM`` and
``AutoModelForSequenceClassification``, and ``AutoTokenizer`` (the byte-level tokenizer). See docs/hf.md.
"""

from __future__ import annotations

try:
    import transformers
except ImportError as err:  # pragma: no cover - exercised only without transformers
    raise ImportError(
        "seqzoo.hf needs the optional dependency transformers (>= 5): pip install 'transformers>=5'"
    ) from err
if int(transformers.__version__.split(".")[0]) < 5:
    raise ImportError(
        f"seqzoo.hf needs transformers >= 5 (its Cache, config and tokenizer APIs), found "
        f"{transformers.__version__}: pip install -U 'transformers>=5'"
    )

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from ..errors import InputError
from .byte_tokenization import SeqzooByteTokenizer
from .cache import SeqzooCache, map_state_tensors
from .configuration import SeqzooConfig, SeqzooEncoderConfig, SeqzooLMConfig
from .lora import lora_target_modules
from .modeling import (
    SeqzooEncoderModel,
    SeqzooForCausalLM,
    SeqzooForMaskedLM,
    SeqzooForSequenceClassification,
    SeqzooLMModel,
    SeqzooPreTrainedModel,
    causal_lm_loss,
    shift_labels,
)
from .tokenization import gpt2_tokenizer

_REGISTRATION = {
    SeqzooLMConfig: {AutoModel: SeqzooLMModel, AutoModelForCausalLM: SeqzooForCausalLM},
    SeqzooEncoderConfig: {
        AutoModel: SeqzooEncoderModel,
        AutoModelForMaskedLM: SeqzooForMaskedLM,
        AutoModelForSequenceClassification: SeqzooForSequenceClassification,
    },
}


def register() -> None:
    """Register the seqzoo classes with transformers' Auto factories (idempotent; done on import)."""
    for config_cls, models in _REGISTRATION.items():
        AutoConfig.register(config_cls.model_type, config_cls, exist_ok=True)
        # folders written before the "seqzoo-" prefix say "lm" / "encoder": the same class reads them. AutoConfig's
        # own register insists that the name equal the class's model_type, so the alias goes into its mapping.
        CONFIG_MAPPING.register(config_cls.seqzoo_kind, config_cls, exist_ok=True)
        for auto_cls, model_cls in models.items():
            auto_cls.register(config_cls, model_cls, exist_ok=True)
        # a folder without tokenizer files gets the byte tokenizer (it refuses a model of another vocabulary)
        AutoTokenizer.register(config_cls, SeqzooByteTokenizer, exist_ok=True)


def from_seqzoo(model, **config_kwargs) -> SeqzooPreTrainedModel:
    """Wrap a seqzoo model without copying: ``LanguageModel`` -> ``SeqzooForCausalLM``, ``Encoder`` ->
    ``SeqzooForSequenceClassification`` when it has a classification head, else ``SeqzooForMaskedLM``."""
    from ..models import Encoder, LanguageModel

    if type(model) is LanguageModel:
        return SeqzooForCausalLM.from_seqzoo(model, **config_kwargs)
    if type(model) is Encoder:
        cls = SeqzooForSequenceClassification if model.cls_head is not None else SeqzooForMaskedLM
        return cls.from_seqzoo(model, **config_kwargs)
    raise InputError(f"from_seqzoo wraps a seqzoo LanguageModel or Encoder, got {type(model).__name__}")


register()

__all__ = [
    "SeqzooByteTokenizer",
    "SeqzooCache",
    "SeqzooConfig",
    "SeqzooEncoderConfig",
    "SeqzooEncoderModel",
    "SeqzooForCausalLM",
    "SeqzooForMaskedLM",
    "SeqzooForSequenceClassification",
    "SeqzooLMConfig",
    "SeqzooLMModel",
    "SeqzooPreTrainedModel",
    "causal_lm_loss",
    "from_seqzoo",
    "gpt2_tokenizer",
    "lora_target_modules",
    "map_state_tensors",
    "register",
    "shift_labels",
]
