"""Where experiments find data: an explicit path, or the folder named by ``$SEQZOO_DATA``; never a machine path.

``SEQZOO_DATA`` names a data folder laid out like the project's offline data (``tinyshakespeare/input.txt``,
``babi/``, ``gutenberg-nltk/``, ...). An explicit path (``--set path=...``, ``seqzoo zoo --data ...``) wins.
"""

from __future__ import annotations

from pathlib import Path

from .. import settings
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
    root = settings.data_dir()
    if root is not None:
        p = root / sub
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
