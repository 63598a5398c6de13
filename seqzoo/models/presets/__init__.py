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
from ..config import ModelConfig


@dataclass(frozen=True)
class Preset:
    name: str
    family: str
    description: str
    kind: str  # "lm" or "encoder"
    make: Callable[[], ModelConfig]

    def config(self, **overrides: Any) -> ModelConfig:
        return self.make().replace(**overrides) if overrides else self.make()


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
