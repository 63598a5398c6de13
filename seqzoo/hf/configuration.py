"""Hugging Face configuration classes that read and write seqzoo's own ``config.json``.

One on-disk format serves both libraries. ``seqzoo`` writes ``{"model_type": "seqzoo-lm" | "seqzoo-encoder",
<ModelConfig fields>}``; the configuration classes here are registered with ``AutoConfig`` under those two model
types (and under the bare ``"lm"`` / ``"encoder"`` that folders written before the prefix hold), so a directory
written by ``seqzoo`` loads with ``AutoModelForCausalLM.from_pretrained(dir)``. When the HF wrapper saves, it writes
the same format and keeps the Hugging Face-only attributes (``architectures``, ``id2label``, ...) under
``extra["hf"]`` (``ModelConfig.extra`` is seqzoo's free-form field), so ``seqzoo.LanguageModel.from_pretrained(dir)``
reads a directory written by ``save_pretrained`` of the wrapper unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from typing import Any, ClassVar

from transformers import PreTrainedConfig

from ..errors import InputError
from ..models.base import saved_model_type
from ..models.config import ModelConfig

SEQZOO_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ModelConfig))
"""Names of the ``seqzoo.ModelConfig`` fields, stored as plain attributes of the HF configuration."""

HF_EXTRA_KEY = "hf"
"""Key inside ``ModelConfig.extra`` under which the Hugging Face-only attributes are kept."""

# HF attributes that say nothing about the model and are not worth writing into seqzoo's config.json
_NOT_SAVED = {"model_type", "transformers_version", "_name_or_path", "output_hidden_states", "return_dict"}


class SeqzooConfig(PreTrainedConfig):
    """Base of :class:`SeqzooLMConfig` and :class:`SeqzooEncoderConfig`: a ``seqzoo.ModelConfig`` seen by transformers.

    Every ``ModelConfig`` field (``vocab_size``, ``d_model``, ``n_layers``, ``pattern``, ``mixer_kwargs``, ...) is
    an attribute of the same name; the usual HF names are aliases (``hidden_size`` -> ``d_model``,
    ``num_hidden_layers`` -> ``n_layers``, ``tie_word_embeddings`` -> ``tie_embeddings``). Keyword arguments that
    are not ``ModelConfig`` fields are ordinary ``PreTrainedConfig`` arguments (``id2label``, ``dtype``, ...).
    ``to_seqzoo()`` returns the validated ``ModelConfig``; the values are validated at construction as well, so a
    bad field fails with seqzoo's own ``ValueError``.
    """

    model_type = "seqzoo"  # abstract: the registered subclasses are "seqzoo-lm" and "seqzoo-encoder"
    seqzoo_kind: ClassVar[str] = ""
    attribute_map: ClassVar[dict[str, str]] = {
        "hidden_size": "d_model",
        "num_hidden_layers": "n_layers",
        "tie_word_embeddings": "tie_embeddings",
    }

    def __init__(self, **kwargs: Any):
        kind = kwargs.pop("model_type", None)
        if kind is not None and self.seqzoo_kind and kind not in self.model_types():
            raise InputError(
                f"{type(self).__name__} reads model_type={self.model_type!r} configurations (or the legacy "
                f"{self.seqzoo_kind!r}), got {kind!r}"
            )
        if not self.seqzoo_kind:
            raise InputError(
                "SeqzooConfig is abstract: use SeqzooLMConfig (causal LM) or SeqzooEncoderConfig (encoder)"
            )
        # HF aliases given by name (hidden_size=...) become the seqzoo field
        for hf_name, ours in self.attribute_map.items():
            if hf_name in kwargs:
                value = kwargs.pop(hf_name)
                if ours in kwargs and kwargs[ours] != value:
                    raise InputError(f"got both {hf_name}={value!r} and {ours}={kwargs[ours]!r}; pass only {ours}")
                kwargs[ours] = value
        fields = {name: kwargs.pop(name) for name in SEQZOO_FIELDS if name in kwargs}
        extra = dict(fields.get("extra") or {})
        hf_saved = extra.pop(HF_EXTRA_KEY, None) or {}
        if not isinstance(hf_saved, dict):
            raise InputError(
                f"ModelConfig.extra[{HF_EXTRA_KEY!r}] must be a dict of Hugging Face attributes, got {hf_saved!r}"
            )
        fields["extra"] = extra
        hf_kwargs = {**hf_saved, **kwargs}  # explicit arguments win over the saved ones
        self._apply_num_labels(fields, hf_kwargs)
        validated = ModelConfig.from_dict(fields)  # seqzoo's own validation and defaults
        super().__init__(**hf_kwargs)
        for name in SEQZOO_FIELDS:
            setattr(self, name, copy.deepcopy(getattr(validated, name)))

    @classmethod
    def model_types(cls) -> tuple[str, ...]:
        """The ``model_type`` values this class reads: its own (``"seqzoo-lm"``) and the legacy bare kind (``"lm"``)."""
        return (cls.model_type, cls.seqzoo_kind)

    def _apply_num_labels(self, fields: dict[str, Any], hf_kwargs: dict[str, Any]) -> None:
        """Hook: the encoder keeps ``n_classes`` and HF's ``num_labels`` in step."""

    # --------------------------------------------------------------- conversion
    def to_seqzoo(self) -> ModelConfig:
        """The ``seqzoo.ModelConfig`` this configuration describes (a new, validated object)."""
        return ModelConfig.from_dict({name: copy.deepcopy(getattr(self, name)) for name in SEQZOO_FIELDS})

    @classmethod
    def from_seqzoo(cls, config: ModelConfig, **kwargs: Any) -> SeqzooConfig:
        """Build from a ``seqzoo.ModelConfig``; ``kwargs`` are extra ``PreTrainedConfig`` arguments."""
        if not isinstance(config, ModelConfig):
            raise InputError(f"config must be a seqzoo.ModelConfig, got {type(config).__name__}")
        return cls(**config.to_dict(), **kwargs)

    def to_seqzoo_dict(self, use_diff: bool = True) -> dict[str, Any]:
        """What ``config.json`` holds: seqzoo's format, HF-only attributes under ``extra["hf"]``."""
        hf = self.to_diff_dict() if use_diff else self.to_dict()
        out: dict[str, Any] = {"model_type": self.model_type}
        out.update(self.to_seqzoo().to_dict())
        hf_only = {k: v for k, v in hf.items() if k not in SEQZOO_FIELDS and k not in _NOT_SAVED}
        if hf_only:
            out["extra"] = {**out["extra"], HF_EXTRA_KEY: hf_only}
        return out

    def to_json_file(self, json_file_path: str | os.PathLike, use_diff: bool = True) -> None:
        """Write seqzoo's ``config.json`` format (readable by ``seqzoo.ModelConfig`` and by this class)."""
        text = json.dumps(self._encode_special_floats(self.to_seqzoo_dict(use_diff)), indent=2, sort_keys=True)
        with open(json_file_path, "w", encoding="utf-8") as f:
            f.write(text + "\n")


class SeqzooLMConfig(SeqzooConfig):
    """Configuration of a seqzoo causal ``LanguageModel`` (``model_type="seqzoo-lm"``, as written by seqzoo)."""

    model_type = saved_model_type("lm")
    seqzoo_kind: ClassVar[str] = "lm"

    def __init__(self, **kwargs: Any):  # an own __init__ keeps transformers from wrapping it (see PreTrainedConfig)
        super().__init__(**kwargs)


class SeqzooEncoderConfig(SeqzooConfig):
    """Configuration of a seqzoo bidirectional ``Encoder`` (``model_type="seqzoo-encoder"``).

    ``n_classes`` (seqzoo) and ``num_labels`` (HF) are the same number: ``num_labels=k`` passed explicitly (e.g.
    ``AutoModelForSequenceClassification.from_pretrained(dir, num_labels=3)``) sets ``n_classes=k``; otherwise
    ``n_classes`` decides ``num_labels``.
    """

    model_type = saved_model_type("encoder")
    seqzoo_kind: ClassVar[str] = "encoder"

    def __init__(self, **kwargs: Any):  # an own __init__ keeps transformers from wrapping it (see PreTrainedConfig)
        super().__init__(**kwargs)

    def _apply_num_labels(self, fields: dict[str, Any], hf_kwargs: dict[str, Any]) -> None:
        n_labels = hf_kwargs.get("num_labels")
        id2label = hf_kwargs.get("id2label")
        if n_labels is not None and id2label is not None and len(id2label) != n_labels:
            hf_kwargs.pop("id2label")  # an explicit num_labels (a new head) wins over saved label names
            hf_kwargs.pop("label2id", None)
        elif n_labels is None and id2label is not None:
            n_labels = len(id2label)
        if n_labels is not None:
            if not isinstance(n_labels, int) or isinstance(n_labels, bool) or n_labels <= 0:
                raise InputError(f"num_labels must be a positive int, got {n_labels!r}")
            fields["n_classes"] = n_labels
        elif fields.get("n_classes"):
            hf_kwargs["num_labels"] = fields["n_classes"]


__all__ = ["HF_EXTRA_KEY", "SEQZOO_FIELDS", "SeqzooConfig", "SeqzooEncoderConfig", "SeqzooLMConfig"]
