"""Overriding a configuration merges at every depth: a setting that is not named keeps its value.

``--set model.mixer_kwargs.mlstm.chunk_size=32`` on the ``xlstm10-tiny`` preset must change the mLSTM's chunk size
and keep the preset's heads, blocks and conv size. Every place that lays overrides over a configuration (``--set``,
``--config`` + flags, a preset + keyword overrides, experiment options) goes through :func:`deep_merge`.
"""

from __future__ import annotations

import copy
from typing import Any


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` laid over it: where both hold a dict under a key, the dicts are merged the same
    way; any other value in ``overrides`` replaces the one in ``base``. Neither input is changed."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
