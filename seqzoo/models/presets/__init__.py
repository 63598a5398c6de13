"""Named model configurations. Each module here registers one family's presets (toy and paper sizes).

``build_model("griffin-tiny", vocab_size=512)`` builds the preset with config overrides.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import InputError
from ...overrides import deep_merge
from ..config import ModelConfig, repeat_pattern


@dataclass(frozen=True)
class Preset:
    name: str
    family: str
    description: str
    kind: str  # "lm" or "encoder"
    make: Callable[[], ModelConfig]

    def config(self, **overrides: Any) -> ModelConfig:
        """The preset's config with ``overrides`` merged at every depth (``overrides.deep_merge``):
        ``mixer_kwargs={"mlstm": {"chunk_size": 32}}`` changes that one setting and keeps the preset's others."""
        base = self.make()
        if not overrides:
            return base
        merged = deep_merge(base.to_dict(), overrides)
        pattern, n_layers = merged.get("pattern"), merged.get("n_layers")
        if isinstance(pattern, str):
            pattern = [pattern]
        if isinstance(pattern, list) and pattern and isinstance(n_layers, int) and n_layers > 0:
            # the preset's settings for a mixer the overrides took out of every layer have no layer left to reach;
            # settings the caller passes for such a mixer stay, and ModelConfig refuses them by name
            used = set(repeat_pattern(pattern, n_layers))
            for name in ("mixer_kwargs", "block_kwargs"):
                given = overrides.get(name) if isinstance(overrides.get(name), dict) else {}
                if isinstance(merged.get(name), dict):
                    merged[name] = {k: v for k, v in merged[name].items() if k in used or k in given}
        return ModelConfig.from_dict(merged)


PRESETS: dict[str, Preset] = {}


def register_preset(name: str, family: str, description: str, kind: str = "lm"):
    """Decorator over a zero-argument function returning the preset's ``ModelConfig``."""

    def wrap(fn: Callable[[], ModelConfig]):
        if name in PRESETS:
            raise InputError(f"preset {name!r} is already registered")
        PRESETS[name] = Preset(name, family, description, kind, fn)
        return fn

    return wrap


def build_model(name: str, **overrides: Any):
    """Instantiate a preset by name; keyword arguments override ``ModelConfig`` fields."""
    from ..base import MODEL_TYPES

    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; available presets: {sorted(PRESETS)}")
    preset = PRESETS[name]
    return MODEL_TYPES[preset.kind](preset.config(**overrides))


for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
