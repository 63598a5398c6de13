"""Every environment variable seqzoo reads, read here and nowhere else.

Each setting is one function that reads its variable at call time (so a test's ``monkeypatch.setenv`` or a change
between calls takes effect), applies the default when the variable is unset or empty, and refuses a value outside
its choices with an :class:`~seqzoo.errors.InputError` naming the variable and the choices. ``VARIABLES`` describes
them all; ``variables_table()`` renders it as the Markdown table of docs/getting-started.md ("Environment
variables"), which a test keeps equal to this module.

Python overrides sit on top of some of them (``seqzoo.kernels.set_kernels`` / ``use_kernels`` over
``SEQZOO_KERNELS``); the variables seqzoo sets for its own child processes (``OMP_NUM_THREADS``, a child's
``TRITON_INTERPRET``) are writes, not settings, and live with the code that starts the child.
``tests/test_settings.py`` walks the package's sources and fails when another module reads ``os.environ``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError


@dataclass(frozen=True)
class Variable:
    """One environment variable: its name, what an unset or empty one means, the values it takes, what it does."""

    name: str
    default: str
    choices: str
    meaning: str


VARIABLES = (
    Variable(
        "SEQZOO_KERNELS",
        "auto",
        "auto, torch, triton",
        "which implementation the `auto` dispatch of each op runs: the Triton kernel where it fits (`auto`), "
        "never a kernel (`torch`), or always the kernel, refusing inputs it cannot take (`triton`); "
        "`seqzoo.kernels.set_kernels` / `use_kernels` override it",
    ),
    Variable(
        "SEQZOO_NATIVE",
        "1",
        "1, 0",
        "`0` turns the C loops of the ops off (their PyTorch paths run instead)",
    ),
    Variable(
        "SEQZOO_CACHE",
        "~/.cache/seqzoo",
        "a folder",
        "where the built C libraries (`native/`) and tokenised corpora (`tokens/`) are kept",
    ),
    Variable(
        "SEQZOO_DATA",
        "unset",
        "a folder",
        "the offline data folder (`tinyshakespeare/input.txt`, `babi/`, ...) the experiments read when no path "
        "is given",
    ),
    Variable(
        "SEQZOO_AUTOTUNE",
        "all",
        "all, first",
        "`first` keeps only the first autotune config that fits a Triton launch (correctness runs on a GPU)",
    ),
    Variable(
        "SEQZOO_MALLOC",
        "retain",
        "retain, system",
        "whether the command line keeps freed host memory in the process (`retain`) or leaves glibc's malloc "
        "as it is (`system`)",
    ),
    Variable(
        "TRITON_INTERPRET",
        "0",
        "0, or any other value",
        "Triton's CPU interpreter: set, the Triton kernels run on CPU tensors (tests; never chosen by `auto`)",
    ),
    Variable("CC", "cc", "a command", "the C compiler that builds the ops' C loops"),
    Variable("RANK", "0", "an int >= 0", "this process's rank under `torchrun` (set by torchrun)"),
    Variable("LOCAL_RANK", "0", "an int >= 0", "this process's rank on its machine under `torchrun` (set by torchrun)"),
    Variable("WORLD_SIZE", "1", "an int >= 1", "the number of processes under `torchrun` (set by torchrun)"),
)


def _raw(name: str) -> str:
    """The variable's text with surrounding spaces dropped; "" when unset."""
    return os.environ.get(name, "").strip()


def _choice(name: str, choices: tuple[str, ...]) -> str:
    """``name`` as one of ``choices`` (case ignored); unset or empty: the first."""
    raw = _raw(name).lower()
    if raw == "":
        return choices[0]
    if raw not in choices:
        raise InputError(f"{name} must be one of {', '.join(choices)}; got {os.environ[name]!r}")
    return raw


def _int(name: str, default: int, minimum: int) -> int:
    raw = _raw(name)
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise InputError(f"{name} must be an int >= {minimum}; got {os.environ[name]!r}")
    return value


KERNELS_CHOICES = ("auto", "torch", "triton")
AUTOTUNE_CHOICES = ("all", "first")
MALLOC_CHOICES = ("retain", "system")
NATIVE_CHOICES = ("1", "0")


def kernels() -> str:
    """``SEQZOO_KERNELS``: ``auto`` (default), ``torch`` or ``triton`` (case and spaces ignored)."""
    return _choice("SEQZOO_KERNELS", KERNELS_CHOICES)


def native_enabled() -> bool:
    """``SEQZOO_NATIVE``: ``1`` (default) lets the ops build and run their C loops, ``0`` turns them off."""
    return _choice("SEQZOO_NATIVE", NATIVE_CHOICES) == "1"


def cache_dir() -> Path:
    """``SEQZOO_CACHE``: the folder of seqzoo's caches (default ``~/.cache/seqzoo``)."""
    raw = _raw("SEQZOO_CACHE")
    return Path(raw).expanduser() if raw else Path.home() / ".cache" / "seqzoo"


def data_dir() -> Path | None:
    """``SEQZOO_DATA``: the offline data folder, or None when unset."""
    raw = _raw("SEQZOO_DATA")
    return Path(raw).expanduser() if raw else None


def autotune() -> str:
    """``SEQZOO_AUTOTUNE``: ``all`` (default: tune over every kept config) or ``first`` (the first kept one)."""
    return _choice("SEQZOO_AUTOTUNE", AUTOTUNE_CHOICES)


def malloc() -> str:
    """``SEQZOO_MALLOC``: ``retain`` (default: keep freed host memory in the process) or ``system``."""
    return _choice("SEQZOO_MALLOC", MALLOC_CHOICES)


def triton_interpret() -> bool:
    """``TRITON_INTERPRET`` as Triton reads it: set to anything but ``0`` (or empty), its CPU interpreter runs."""
    return _raw("TRITON_INTERPRET") not in ("", "0")


def c_compiler() -> str:
    """``CC``: the C compiler's command (default ``cc``)."""
    return _raw("CC") or "cc"


def rank() -> int:
    """``RANK``: this process's rank under torchrun (0 outside it)."""
    return _int("RANK", 0, 0)


def local_rank() -> int:
    """``LOCAL_RANK``: this process's rank on its machine under torchrun (0 outside it)."""
    return _int("LOCAL_RANK", 0, 0)


def world_size() -> int:
    """``WORLD_SIZE``: the number of torchrun processes (1 outside torchrun)."""
    return _int("WORLD_SIZE", 1, 1)


def variables_table() -> str:
    """``VARIABLES`` as a Markdown table (docs/getting-started.md holds this text)."""
    rows = ["| variable | default | values | what it does |", "|---|---|---|---|"]
    rows += [f"| `{v.name}` | `{v.default}` | {v.choices} | {v.meaning} |" for v in VARIABLES]
    return "\n".join(rows)


__all__ = [
    "AUTOTUNE_CHOICES",
    "KERNELS_CHOICES",
    "MALLOC_CHOICES",
    "NATIVE_CHOICES",
    "VARIABLES",
    "Variable",
    "autotune",
    "c_compiler",
    "cache_dir",
    "data_dir",
    "kernels",
    "local_rank",
    "malloc",
    "native_enabled",
    "rank",
    "triton_interpret",
    "variables_table",
    "world_size",
]
