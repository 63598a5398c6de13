"""Experiments: one CLI command each (``seqzoo experiment NAME``), results written as files + plots.

An experiment is a function ``fn(out_dir: Path, **options) -> dict`` registered with
``@register_experiment(name, description)``; options come from ``--set key=value`` on the CLI. Names follow
``<family>-<what>`` (``gateloop-memory-horizon``, ``rmt-memory``, ...); older names stay as aliases. Options are
strict: a key the function does not declare is refused by name with an :class:`~seqzoo.errors.InputError`
(functions that forward ``**options`` to a benchmark name it with ``forwards=`` and are checked against it). Training experiments run through the
sweep runner (``seqzoo/sweep``): one folder per run, named by the hash of its whole configuration.
Modules here are discovered automatically.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..field_types import check_number


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    run: Callable[..., dict[str, Any]]


EXPERIMENTS: dict[str, Experiment] = {}
ALIASES: dict[str, str] = {}  # old name -> current name


def _strict(fn: Callable, name: str, forwards: str | None = None) -> Callable:
    """Refuse option keys ``fn`` does not declare, naming them and the known ones (no silent ``**_``). A function
    that passes ``**options`` on to ``forwards`` (``"module:function"``, a benchmark, imported only when the
    experiment runs) is checked against that function's parameters; one with ``**options`` and no ``forwards``
    validates them itself (``resolve_options``)."""
    params = inspect.signature(fn).parameters
    if forwards is None and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return fn

    @functools.wraps(fn)
    def run(out_dir, **options):
        target = fn
        if forwards is not None:
            mod, attr = forwards.split(":")
            target = getattr(importlib.import_module(mod), attr)
        params = inspect.signature(target).parameters
        known = [k for k in params if k != "out_dir"]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise InputError(f"experiment {name}: unknown option(s) {', '.join(unknown)}; known: {', '.join(known)}")
        for key, value in options.items():  # steps="abc" or lr=nan refused here, not after some runs have trained
            check_number(value, params[key].annotation, f"experiment {name}: option {key}")
        return fn(out_dir, **options)

    return run


def register_experiment(name: str, description: str, aliases: tuple[str, ...] = (), forwards: str | None = None):
    def wrap(fn):
        if name in EXPERIMENTS:
            raise InputError(f"experiment {name!r} is already registered")
        EXPERIMENTS[name] = Experiment(name, description, _strict(fn, name, forwards))
        for a in aliases:
            ALIASES[a] = name
        return fn

    return wrap


def get_experiment(name: str) -> Experiment:
    """By name or old alias; an unknown name is an :class:`InputError` listing the registered ones."""
    name = ALIASES.get(name, name)
    if name not in EXPERIMENTS:
        raise InputError(f"unknown experiment {name!r}; available: {', '.join(sorted(EXPERIMENTS))}")
    return EXPERIMENTS[name]


for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
