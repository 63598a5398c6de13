"""Keep freed host memory in the process, so that each CPU training step does not fault its activations in anew.

glibc's malloc hands large freed blocks back to the kernel: blocks above its mmap threshold at once (the threshold
adapts, but only up to 32 MB), and the top of the heap once more than its trim threshold is free. A training step
on CPU frees its activations at the end of the backward and allocates them again in the next forward, so every step
writes gigabytes into fresh pages, and each 4 KiB page costs a fault (about 1.7 us here, zeroing included): the
10M xLSTM[1:0] at T = 1024, batch 8, took ~700,000 faults per step, a tenth of the step, and a multiply into a fresh
(8, 1024, 512) float32 tensor took 10.5 ms against 2.9 ms into reused memory (docs/benchmarks.md).

``retain_freed_memory()`` sets both thresholds with ``mallopt``, so freed blocks stay in the process for the next
step (the resident size then stays near its peak, which a training process reaches every step anyway). The
``seqzoo`` command line and its benchmark / sweep worker processes call ``apply_malloc_setting()``, which reads
``SEQZOO_MALLOC``: ``retain`` (default) or ``system`` (leave malloc as it is). Library users call
``retain_freed_memory()`` themselves. Nothing happens outside Linux with glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform

from . import settings

ENV = "SEQZOO_MALLOC"
CHOICES = settings.MALLOC_CHOICES

# mallopt parameter numbers (glibc malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# blocks up to this size come from the heap, and this much free heap top is kept: far above any one activation of
# the models here, and a plain int for mallopt
DEFAULT_THRESHOLD = 1 << 30


@functools.cache
def _libc():
    """glibc's ``mallopt`` or None (another libc or OS)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.mallopt
    except (OSError, AttributeError):
        return None


def retain_freed_memory(threshold: int = DEFAULT_THRESHOLD) -> bool:
    """Keep freed blocks up to ``threshold`` bytes, and up to ``threshold`` bytes of free heap top, in this process
    (glibc ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD``). Returns whether malloc took the setting (False where
    there is no glibc). Affects allocations made after the call."""
    if not isinstance(threshold, int) or isinstance(threshold, bool) or not 0 < threshold < 2**31:
        from .errors import InputError

        raise InputError(f"retain_freed_memory: threshold must be an int in (0, 2^31) bytes, got {threshold!r}")
    mallopt = _libc()
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, threshold))


def apply_malloc_setting() -> bool:
    """What the command line does at start: ``retain_freed_memory()`` unless ``SEQZOO_MALLOC=system``. Returns
    whether the setting changed malloc."""
    return settings.malloc() == "retain" and retain_freed_memory()
