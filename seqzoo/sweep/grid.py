"""A sweep is a list of :class:`~seqzoo.train.spec.RunSpec` (the one run schema, also what ``seqzoo train`` runs);
each run is named by its key, a short hash of its whole resolved configuration (``train/run_key.py``).

Here: :func:`product`, every combination of a grid's axes; the key's parts are re-exported for the sweep's users.
"""

from __future__ import annotations

import itertools
from typing import Any

from ..train.run_key import (
    COMPUTE_PACKAGES,
    COMPUTE_SUFFIXES,
    PACKAGE,
    _tree_hash,
    canonical,
    code_version,
    data_digest,
)
from ..train.spec import RunSpec

__all__ = [
    "COMPUTE_PACKAGES",
    "COMPUTE_SUFFIXES",
    "PACKAGE",
    "RunSpec",
    "_tree_hash",
    "canonical",
    "code_version",
    "data_digest",
    "product",
]


def product(**axes: list[Any]) -> list[dict[str, Any]]:
    """Every combination of the axes, in order: ``product(model=[a, b], seed=[0, 1])`` -> 4 dicts."""
    names = list(axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*(axes[n] for n in names))]
