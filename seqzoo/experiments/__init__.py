"""Experiments: one CLI command each (``seqzoo experiment NAME``), results written as files + plots.

An experiment is a function ``fn(out_dir: Path, **options) -> dict`` registered with
``@register_experiment(name, description)``; options come from ``--set key=value`` on the CLI.
Modules here are discovered automatically.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    run: Callable[..., dict[str, Any]]


EXPERIMENTS: dict[str, Experiment] = {}


def register_experiment(name: str, description: str):
    def wrap(fn):
        if name in EXPERIMENTS:
            raise ValueError(f"experiment {name!r} is already registered")
        EXPERIMENTS[name] = Experiment(name, description, fn)
        return fn

    return wrap


for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
