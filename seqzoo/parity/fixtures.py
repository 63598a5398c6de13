"""Reading the official-implementation fixtures (``<shared>/fixtures/<model>``; ``tests/conftest.py: shared_dir``).

A case is ``<case>.safetensors`` plus an optional ``<case>.json``. Tensor keys ``kind:name`` are grouped by
kind (input, output, state, inter, view, ...); keys without a ':' are the official model's state dict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

KINDS = ("official", "input", "output", "state", "inter", "view")


def load_fixture(path: str | Path, extra_kinds: tuple[str, ...] = ()) -> dict[str, Any]:
    """``<case>.safetensors`` (+ ``.json``) -> ``{"official": state_dict, "input": {}, ..., "meta": json}``; every
    kind in ``KINDS + extra_kinds`` is present (empty when the case has none), keys split at the first ':'."""
    from safetensors.torch import load_file

    path = Path(path)
    out: dict[str, Any] = {kind: {} for kind in KINDS + tuple(extra_kinds)}
    for key, value in load_file(str(path.with_suffix(".safetensors"))).items():
        if ":" in key:
            kind, name = key.split(":", 1)
            out.setdefault(kind, {})[name] = value
        else:
            out["official"][key] = value
    meta = path.with_suffix(".json")
    out["meta"] = json.loads(meta.read_text()) if meta.is_file() else {}
    return out
