"""Can the Triton kernels run here: is triton importable, is it the CPU interpreter, which devices it serves.

None of these import triton (``importlib.util.find_spec`` only), so they are safe in ``import seqzoo``.
"""

from __future__ import annotations

import functools
import importlib.util

import torch

from .. import settings


@functools.cache  # a sys.path search; the dispatch asks on every call and the answer cannot change in-process
def triton_available() -> bool:
    """True when triton is importable (it is never imported by this check)."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """True under Triton's CPU interpreter (``TRITON_INTERPRET=1``)."""
    return settings.triton_interpret()


def triton_unusable(device) -> str | None:
    """Why the Triton kernels cannot run for tensors on ``device`` (a sentence), or None when they can: CUDA
    tensors with triton installed, or CPU tensors under the interpreter."""
    dev = torch.device(device)
    if not triton_available():
        return "triton is not installed (pip install triton)"
    if interpreting():
        if dev.type != "cpu":
            return f"under TRITON_INTERPRET=1 the kernels run on CPU tensors only, got {dev.type} tensors"
        return None
    if dev.type != "cuda":
        return f"the kernels run on CUDA tensors (CPU tensors only under TRITON_INTERPRET=1), got {dev.type} tensors"
    return None


def compute_capability(t: torch.Tensor, cc: int | None = None) -> int | None:
    """``cc`` when given, else the compute capability of ``t``'s CUDA device as one int (e.g. 90); None off CUDA."""
    if cc is None and t.device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(t.device)
        cc = 10 * major + minor
    return cc


def usable_on(device) -> bool:
    """Can the Triton kernels run for tensors on ``device``: CUDA with triton, or CPU tensors under the interpreter."""
    return triton_unusable(device) is None


__all__ = ["compute_capability", "interpreting", "triton_available", "triton_unusable", "usable_on"]
