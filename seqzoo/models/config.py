"""``ModelConfig``: one JSON-serialisable description of every seqzoo model."""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..field_types import check_fields
from ..naming import upgrade_mixer_kwargs


def strict_from_dict(cls, d: dict[str, Any]):
    """Build dataclass ``cls`` from ``d``, refusing unknown keys by name (a typo must not be silently dropped)."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - known
    if unknown:
        raise InputError(f"unknown {cls.__name__} field(s) {sorted(unknown)}; known fields: {sorted(known)}")
    return cls(**d)


@dataclass
class ModelConfig:
    """Embedding -> ``n_layers`` residual blocks (mixer per layer from ``pattern``) -> norm -> head.

    ``pattern`` is repeated and truncated to ``n_layers``: Griffin is ``["rglru", "rglru", "local_attention"]``.
    ``mixer_kwargs[name]`` are constructor arguments for every layer using mixer ``name``;
    ``block_kwargs[name]`` override the block fields (``norm``, ``mlp``, ``mlp_ratio``, ``mlp_hidden``,
    ``mlp_bias``) for those layers, e.g. xLSTM's mLSTM layers use ``{"mlp": "none"}``.
    """

    vocab_size: int = 256
    d_model: int = 128
    n_layers: int = 2
    pattern: list[str] = field(default_factory=lambda: ["attention"])
    mixer_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    block: str = "residual"
    block_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    final_norm: str | None = None  # defaults to ``norm``
    mlp: str = "swiglu"
    mlp_ratio: float = 4.0
    mlp_hidden: int | None = None
    mlp_bias: bool = False
    dropout: float = 0.0
    tie_embeddings: bool = True
    embed_init_std: float = 0.02
    embed_scale: float | None = None  # Griffin / RecurrentGemma multiply embeddings by sqrt(d)
    logit_softcap: float | None = None  # Griffin: cap * tanh(logits / cap)
    n_classes: int | None = None  # Encoder sequence-classification head
    pool: str = "mean"  # Encoder classification pooling: "mean" | "first"
    # BERT-style encoder pieces (Encoder only; M2, arXiv:2310.12109 / Orchid-BERT, arXiv:2402.18508 §4.2). Off by default.
    max_positions: int | None = None  # learned absolute position embeddings for positions < max_positions
    type_vocab_size: int = 0  # token-type (segment) embeddings; 0 = none
    embed_norm: bool = False  # LayerNorm (+ dropout) on the summed embeddings
    readd_positions: bool = False  # M2: add the position embeddings again after every layer
    mlm_transform: bool = False  # MLM head = dense -> GELU -> LayerNorm -> (tied) decoder
    pooler: bool = False  # classification pools the first token through dense -> tanh
    extra: dict[str, Any] = field(default_factory=dict)  # free-form, for families that need more

    def __post_init__(self) -> None:
        # keys renamed by the naming scheme (old config.json files): new names, with a FutureWarning
        self.mixer_kwargs = upgrade_mixer_kwargs(self.mixer_kwargs)
        self.validate()

    def validate(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise InputError(f"ModelConfig.{name} must be a positive int, got {v!r}")
        if isinstance(self.pattern, str):
            self.pattern = [self.pattern]
        check_fields(self)  # types from the annotations, numbers finite (mlp_ratio="abc", norm_eps=nan)
        if not self.pattern or not all(isinstance(p, str) for p in self.pattern):
            raise InputError(f"ModelConfig.pattern must be a non-empty list of mixer names, got {self.pattern!r}")
        if self.pool not in ("mean", "first"):
            raise InputError(f"ModelConfig.pool must be 'mean' or 'first', got {self.pool!r}")
        if self.max_positions is not None and (not isinstance(self.max_positions, int) or self.max_positions <= 0):
            raise InputError(f"ModelConfig.max_positions must be None or a positive int, got {self.max_positions!r}")
        if not isinstance(self.type_vocab_size, int) or self.type_vocab_size < 0:
            raise InputError(f"ModelConfig.type_vocab_size must be an int >= 0, got {self.type_vocab_size!r}")
        if self.readd_positions and self.max_positions is None:
            raise InputError("ModelConfig.readd_positions needs max_positions (the embeddings to re-add)")
        if not 0.0 <= self.dropout < 1.0:
            raise InputError(f"ModelConfig.dropout must be in [0, 1), got {self.dropout}")
        used = set(self.layer_mixers())
        for name in ("mixer_kwargs", "block_kwargs"):
            per_mixer = getattr(self, name)
            if not isinstance(per_mixer, dict) or not all(isinstance(v, dict) for v in per_mixer.values()):
                raise InputError(f"ModelConfig.{name} must map mixer names to dicts of arguments, got {per_mixer!r}")
            unused = sorted(set(per_mixer) - used)
            if unused:  # settings for a mixer no layer uses would be silently ignored
                raise InputError(
                    f"ModelConfig.{name} has settings for {unused}, which no layer uses; the layers use "
                    f"{sorted(used)} (pattern over n_layers={self.n_layers})"
                )

    def layer_mixers(self) -> list[str]:
        """The mixer name of each layer: ``pattern`` repeated and truncated to ``n_layers``."""
        return repeat_pattern(self.pattern, self.n_layers)

    def block_setting(self, mixer: str, key: str) -> Any:
        return self.block_kwargs.get(mixer, {}).get(key, getattr(self, key))

    # ------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        return strict_from_dict(cls, d)

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def from_json(cls, path: str | Path) -> ModelConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def replace(self, **changes: Any) -> ModelConfig:
        return self.from_dict({**self.to_dict(), **changes})


def repeat_pattern(pattern: list[str], n_layers: int) -> list[str]:
    """``pattern`` repeated and truncated to ``n_layers``: the mixer name of each layer."""
    return [pattern[i % len(pattern)] for i in range(n_layers)]


def drop_unused_mixer_settings(saved: dict[str, Any], source: str) -> dict[str, Any]:
    """A saved config from before unused per-mixer settings were refused (e.g. xLSTM[1:0] files carried ``slstm``
    settings): drop those entries with a warning. They never reached a layer, so the model is unchanged."""
    defaults = ModelConfig()
    pattern = saved.get("pattern", defaults.pattern)
    pattern = [pattern] if isinstance(pattern, str) else list(pattern or [])
    n_layers = saved.get("n_layers", defaults.n_layers)
    if not pattern or not isinstance(n_layers, int) or n_layers <= 0:
        return saved  # invalid: ModelConfig's validation names the field
    used = set(repeat_pattern(pattern, n_layers))
    out = dict(saved)
    for name in ("mixer_kwargs", "block_kwargs"):
        per_mixer = saved.get(name)
        if isinstance(per_mixer, dict) and set(per_mixer) - used:
            warnings.warn(
                f"{source}: {name} for {sorted(set(per_mixer) - used)} is ignored (no layer uses them); "
                "saving the model again writes the config without them",
                FutureWarning,
                stacklevel=3,
            )
            out[name] = {k: v for k, v in per_mixer.items() if k in used}
    return out
