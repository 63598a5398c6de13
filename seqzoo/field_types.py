"""Refuse a value of the wrong type, or a non-finite number, for an annotated config field or builder argument.

Configs and task arguments arrive from JSON, TOML and ``--set k=v`` text, so ``lr="abc"`` or ``seq_len="abc"`` can
reach a constructor; without this check they fail later with a ``TypeError`` deep inside, or (``lr=nan``) start a run
that can only diverge. The annotation of each field says what it takes (``int``, ``float | None``, ``list[str]``);
names this module does not know (``Any``, classes) are not checked.
"""

from __future__ import annotations

import math
from typing import Any

from .errors import InputError

# annotation name -> (test, what the message says it expects)
_CHECKS = {
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an int"),
    "float": (
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
        "a finite number",
    ),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "None": (lambda v: v is None, "null"),
    "list": (lambda v: isinstance(v, (list, tuple)), "a list"),
    "tuple": (lambda v: isinstance(v, (list, tuple)), "a list"),
    "dict": (lambda v: isinstance(v, dict), "a dict"),
}


def _names(annotation: Any) -> list[str] | None:
    """``"float | None"`` -> ``["float", "None"]``; ``list[str]`` -> ``["list"]``; None when a part is unknown."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    names = [part.strip().split("[")[0] for part in text.split("|")]
    return names if all(n in _CHECKS for n in names) else None


def check_value(value: Any, annotation: Any, name: str) -> None:
    """Raise :class:`InputError` naming ``name`` unless ``value`` fits ``annotation``."""
    names = _names(annotation)
    if names is None or any(_CHECKS[n][0](value) for n in names):
        return
    expected = " or ".join(_CHECKS[n][1] for n in names)
    raise InputError(f"{name} must be {expected}, got {value!r}")


def check_number(value: Any, annotation: Any, name: str) -> None:
    """:func:`check_value` for a numeric annotation (``int``, ``float``, ``... | None``) only: text options such as
    ``seeds: str`` arrive from ``--set seeds=0`` as a JSON number and are read by their function."""
    names = _names(annotation)
    if names and set(names) <= {"int", "float", "None"}:
        check_value(value, annotation, name)


def check_fields(obj: Any) -> None:
    """Every field of dataclass instance ``obj`` against its annotation; messages name ``Class.field``."""
    import dataclasses

    for f in dataclasses.fields(obj):
        check_value(getattr(obj, f.name), f.type, f"{type(obj).__name__}.{f.name}")
