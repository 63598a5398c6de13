"""Output paths checked before any compute: a folder (or file) the command will write must be creatable there.

A benchmark or evaluation that runs for minutes and then cannot write its results (``--out`` below a file, in a
read-only folder) has lost the work; these checks run first and create nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_output_dir(path: str | Path, option: str) -> Path:
    """``path`` is a folder, or can be created as one (its nearest existing parent is a writable folder)."""
    if str(path) == "":  # Path("") would be the current folder
        raise InputError(f"{option} must name a folder, got an empty path")
    path = Path(path)
    existing = _nearest_existing(path)
    if existing == path.absolute() and not existing.is_dir():
        raise InputError(f"{option}={str(path)!r} is a file; it must be a folder (or a path to create one)")
    if not existing.is_dir():
        raise InputError(f"{option}={str(path)!r} lies below the file {str(existing)!r}; it must be a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{option}={str(path)!r}: the folder {str(existing)!r} is not writable")
    return path


def check_output_file(path: str | Path, option: str) -> Path:
    """``path`` is a file that can be written: not a folder, and its folder exists or can be created."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option}={str(path)!r} is a folder; it must name a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"{option}={str(path)!r} is not writable")
    check_output_dir(path.parent, option)
    return path
