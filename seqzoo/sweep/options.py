"""Strict experiment options: every ``--set key=value`` must name a declared option, values are cast to its type.

An experiment declares its options as a dict of defaults; :func:`resolve_options` refuses any other key by name
(no ``**_`` swallowing) and casts each given value to the type of its default, so ``--set steps=10`` and
``steps=10`` from Python give the same resolved configuration (and the same run hash).
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import InputError
from ..overrides import deep_merge


def as_list(v: Any, cast=str) -> list:
    """``"a,b"`` or ``["a", "b"]`` -> ``["a", "b"]`` (``--set`` passes comma lists as strings)."""
    if isinstance(v, (list, tuple)):
        return [cast(s) for s in v]
    return [cast(s.strip()) for s in str(v).split(",") if s.strip()]


TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def as_bool(value: Any, name: str) -> bool:
    """A switch given as a bool, 0/1 or a word (``--set`` passes strings); any other word is an error naming
    ``name``, so that a typo such as ``collect_only=ture`` cannot silently mean false."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    word = str(value).strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise InputError(f"option {name}={value!r} must be a bool: one of {', '.join(TRUE_WORDS + FALSE_WORDS)}")


def _cast(name: str, value: Any, default: Any, where: str) -> Any:
    try:
        if isinstance(default, bool):
            try:
                return as_bool(value, name)
            except InputError:
                raise InputError(f"{where}: option {name}={value!r} must be a bool") from None
        if isinstance(default, int):
            if isinstance(value, float) and not value.is_integer():
                raise InputError(value)
            return int(value)
        if isinstance(default, float):
            if isinstance(value, bool) or not math.isfinite(float(value)):
                raise InputError(value)
            return float(value)
        if isinstance(default, (list, tuple)):
            cast = type(default[0]) if default else str
            return as_list(value, cast)
        if isinstance(default, str) and not isinstance(value, str):
            return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    except (TypeError, ValueError):
        kind = "finite float" if isinstance(default, float) else type(default).__name__
        raise InputError(f"{where}: option {name}={value!r} must be a {kind}") from None
    return value


def resolve_options(defaults: dict[str, Any], given: dict[str, Any], where: str) -> dict[str, Any]:
    """Defaults overridden by ``given``; unknown keys raise :class:`InputError` naming them and the known ones."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise InputError(
            f"{where}: unknown option(s) {', '.join(unknown)}; known options: {', '.join(sorted(defaults))}"
        )
    out = dict(defaults)
    for k, v in given.items():
        if isinstance(defaults[k], dict) and isinstance(v, dict):  # a nested option keeps what is not named
            out[k] = deep_merge(defaults[k], v)
        else:
            out[k] = _cast(k, v, defaults[k], where) if defaults[k] is not None else v
    return out


def choose(values: list[str], allowed, what: str) -> list[str]:
    """Every item of ``values`` must be in ``allowed``; the error names the option and the choices."""
    bad = [v for v in values if v not in allowed]
    if bad:
        raise InputError(f"{what}: unknown {', '.join(map(repr, bad))}; expected some of {', '.join(sorted(allowed))}")
    if not values:
        raise InputError(f"{what}: at least one value is needed; choices: {', '.join(sorted(allowed))}")
    return values
