"""Where experiments find data: an explicit path, or the folder named by ``$SEQZOO_DATA``; never a machine path.

``SEQZOO_DATA`` names a data folder laid out like the project's offline data (``tinyshakespeare/input.txt``,
``babi/``, ``gutenberg-nltk/``, ...). An explicit path (``--set path=...``, ``seqzoo zoo --data ...``) wins.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InputError

ENV = "SEQZOO_DATA"
TEXT = "tinyshakespeare/input.txt"


def find_data(given: str | None, sub: str) -> Path | None:
    """``given`` if set (it must exist), else ``$SEQZOO_DATA/<sub>`` if that exists, else None."""
    if given:
        p = Path(given).expanduser()
        if not p.exists():
            raise InputError(f"data path {given} does not exist")
        return p
    root = os.environ.get(ENV)
    if root:
        p = Path(root).expanduser() / sub
        if not p.exists():
            raise InputError(f"${ENV}={root} has no {sub}")
        return p
    return None


def require_data(given: str | None, sub: str, option: str) -> Path:
    """As :func:`find_data`, but a missing path is an :class:`InputError` that says how to give one."""
    p = find_data(given, sub)
    if p is None:
        raise InputError(f"{option}= is needed (a file or folder), or set ${ENV} to a data folder holding {sub}")
    return p


def corpus_digest(path: str | Path) -> str:
    """SHA-256 (16 hex) of the files the text task reads from ``path`` (a file or a folder, as ``tasks.text``
    resolves it), names and bytes in order. A run key holds it beside the path, so an edited corpus at the same
    path trains anew instead of reusing results of the old text."""
    import hashlib

    from ..tasks.text import resolve_paths

    h = hashlib.sha256()
    for p in resolve_paths(path):
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:16]
