"""One switch for every Triton kernel, and a word on which implementation each op runs.

``SEQZOO_KERNELS=torch|triton|auto`` (environment, read at every dispatch) or its Python equivalent
``set_kernels(...)`` / ``with use_kernels(...)`` (which take precedence over the variable) decides what the
``mode="auto"`` dispatch of every op (``ops/<op>/__init__.py``) and the chunkwise / scan modes of the mixers run:

* ``auto`` (default): the op's Triton kernel for CUDA tensors the kernel takes (dtype, chunk size, and sizes at
  which one of its autotune configs fits the GPU without spilling: ``kernels/prune.py: launch_unfit``) when triton
  is installed, the PyTorch implementation otherwise (a fallback for the sizes is logged once, with the reason).
  The CPU interpreter is never chosen by ``auto``.
* ``torch``: never a Triton kernel (the escape hatch when a kernel misbehaves on some GPU).
* ``triton``: always the Triton kernel where an op has one; an ``InputError`` saying why when it cannot run (triton
  missing, tensors not on CUDA and no ``TRITON_INTERPRET=1``, a dtype or chunk size the kernel does not take).

An explicit ``mode=`` other than ``"auto"`` is never overridden. The first time each (op, implementation, device
type) runs, ``logging.getLogger("seqzoo.kernels")`` logs it once at INFO.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .. import settings
from ..errors import InputError, require
from .device import triton_unusable

ENV = "SEQZOO_KERNELS"
CHOICES = settings.KERNELS_CHOICES

log = logging.getLogger("seqzoo.kernels")
_override: str | None = None  # set_kernels / use_kernels; None: read the environment variable
_seen: set[tuple] = set()  # (op, impl, device type[, fallback reason]) already logged


def _validated(value: object, where: str, choices: tuple[str, ...] = CHOICES) -> str:
    if not isinstance(value, str) or value.strip().lower() not in choices:
        raise InputError(f"{where} must be one of {', '.join(choices)}; got {value!r}")
    return value.strip().lower()


def kernels_setting() -> str:
    """The switch in force: the Python setting if any, else ``$SEQZOO_KERNELS`` (unset or empty: ``auto``)."""
    if _override is not None:
        return _override
    return settings.kernels()


def set_kernels(value: str | None) -> None:
    """Set the switch for this process (``"torch"``, ``"triton"``, ``"auto"``); None hands it back to
    ``$SEQZOO_KERNELS``."""
    global _override
    _override = None if value is None else _validated(value, f"set_kernels ({ENV})")


@contextmanager
def use_kernels(value: str) -> Iterator[None]:
    """``with use_kernels("torch"): ...`` runs the block under that setting and restores the previous one."""
    global _override
    previous = _override
    set_kernels(value)
    try:
        yield
    finally:
        _override = previous


@dataclass(frozen=True)
class Choice:
    """What an op's dispatch (``ops/<op>/__init__.py: choose_implementation``) decided: ``name``, one of the op's
    modes, and ``reason``, why a faster implementation was passed over (None when none was)."""

    name: str
    reason: str | None = None


def kernel_verdict(
    op: str, device, unfit: str | None = None, shape: Callable[[], str | None] | None = None
) -> str | None:
    """The kernels switch's word on running ``op``'s Triton kernel for tensors on ``device``: None runs it, else the
    reason it does not (a sentence).

    ``unfit`` says why these inputs cannot take the kernel (dtype, chunk size, ...), None when they can.
    ``shape``, asked last (only when everything else allows the kernel: it compiles), says why no autotune config
    can run at these sizes on this GPU (``kernels/prune.py: launch_unfit``); under ``auto`` the op then takes its
    PyTorch path and ``note_kernel`` logs the reason once. Under ``triton`` a kernel that cannot run is an
    ``InputError`` naming the op and the reason.
    """
    setting = kernels_setting()
    if setting == "torch":
        return f"the kernels setting is 'torch' ({ENV} / set_kernels)"
    if setting == "auto":  # the device test first: CPU calls (decode steps) skip the availability checks
        dev = torch.device(device)
        if dev.type != "cuda":
            return f"'auto' runs the Triton kernels on CUDA tensors only, got {dev.type} tensors"
        why = unfit or triton_unusable(device)
        if why is None and shape is not None:
            why = shape()
            if why is not None:  # a kernel that would compile but has no config that fits this GPU: worth a word
                note_kernel(op, "torch", device, why=why)
        return why
    reason = triton_unusable(device) or unfit or (shape() if shape is not None else None)
    require(
        reason is None,
        f"the kernels setting is 'triton' ({ENV} / set_kernels) but the {op} Triton kernel cannot run: {reason}",
    )
    return None


def want_triton(op: str, device, unfit: str | None = None, shape: Callable[[], str | None] | None = None) -> bool:
    """The ``mode="auto"`` decision for ``op`` on tensors on ``device``: True runs its Triton kernel
    (``kernel_verdict`` is None)."""
    return kernel_verdict(op, device, unfit, shape) is None


def require_triton(op: str, device, unfit: str | None = None) -> None:
    """An explicit ``mode="triton"``: an ``InputError`` naming ``op`` and the reason when the kernel cannot run here
    (triton missing, tensors off CUDA without the interpreter, ``unfit``)."""
    reason = triton_unusable(device) or unfit
    require(reason is None, f"{op}: {reason}")


def note_kernel(op: str, impl: str, device, why: str | None = None) -> None:
    """Log the first use of ``impl`` for ``op`` on this device type (once per process); with ``why``, the first
    time ``op`` falls back to ``impl`` for that reason (a warning: the Triton kernel was wanted)."""
    key = (op, impl, torch.device(device).type)
    if why is not None:
        if (*key, why) not in _seen:
            _seen.add((*key, why))
            log.warning("seqzoo.kernels: %s falls back to the %s path on %s tensors: %s", *key, why)
        return
    if key in _seen:
        return
    _seen.add(key)
    log.info("seqzoo.kernels: %s runs the %s implementation on %s tensors (first use)", *key)


def float_unfit(*tensors: torch.Tensor | None) -> str | None:
    """Why the Triton kernels cannot take these tensors' dtypes / devices, None when they can."""
    floats = (torch.float32, torch.float16, torch.bfloat16)
    ts = [t for t in tensors if t is not None]
    for t in ts:
        if t.dtype not in floats:
            return f"the kernel takes float32/float16/bfloat16 tensors, got {t.dtype}"
        if t.device != ts[0].device:
            return f"tensors on {ts[0].device} and {t.device}"
    return None


def chunk_unfit(chunk_size: int) -> str | None:
    """Why ``chunk_size`` cannot be a Triton chunk (a power of two >= 16: ``tl.arange`` tiles), None when it can."""
    if isinstance(chunk_size, int) and chunk_size >= 16 and chunk_size & (chunk_size - 1) == 0:
        return None
    return f"chunk_size must be a power of two >= 16 (16, 32, 64, ...) on the Triton path, got {chunk_size!r}"


def chunk_halvings(chunk_size: int) -> list[int]:
    """``chunk_size`` and its halvings down to 16, longest first: the token tiles a chunked kernel may run instead of
    a chunk that does not fit the GPU (``ops/mlstm/triton.py: kernel_tile``; ``seqzoo kernels check`` compiles them)."""
    out = []
    while chunk_size >= 16:
        out.append(chunk_size)
        chunk_size //= 2
    return out


__all__ = [
    "CHOICES",
    "ENV",
    "Choice",
    "chunk_halvings",
    "chunk_unfit",
    "float_unfit",
    "kernel_verdict",
    "kernels_setting",
    "note_kernel",
    "require_triton",
    "set_kernels",
    "use_kernels",
    "want_triton",
]
