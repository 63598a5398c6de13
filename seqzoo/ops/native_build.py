"""Build a C source beside an op into a shared library on first use and load it (ctypes); None where impossible.

Used by the CPU code of ``ops/slstm/native.c``, ``ops/causal_conv/native.c``, ``ops/mlstm/output.c``,
``ops/mlstm/headwise.c``, ``ops/gateloop/scores.c``, ``ops/gateloop/levels.c`` and ``ops/gateloop/rotation.c``.
``NativeLibrary(source, name, argtypes)`` compiles ``source`` once per source text, compiler, flags and CPU into
``$SEQZOO_CACHE/native`` (default ``~/.cache/seqzoo/native``; ``-march=native``, so the file is keyed by the CPU as
well), built aside and renamed so that no reader sees half a file. ``library()`` returns the loaded library or None
(no compiler, a failed build, ``SEQZOO_NATIVE=0``), and ``unavailable()`` says why; the ops then run their PyTorch
path, and the reason is logged once (``logging.getLogger("seqzoo.native")``: INFO without a compiler or when turned
off, WARNING when a compiler is present and the file does not build, which is a bug). ``build_error()`` tells the
two apart: the tests skip a C path only when no compiler exists, and fail when a shipped C file does not build
(``tests/ops/test_native_build.py``). Every ``NativeLibrary`` is listed in ``LIBRARIES``. ``split_rows`` runs a
single-threaded C loop over ranges of rows in PyTorch's intra-op threads; ``run_rows`` does so for loops that report
a failed allocation, and raises ``MemoryError``.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from .. import settings

FLAGS = ("-O3", "-march=native", "-shared", "-fPIC")
SUFFIX = {torch.float32: "f32", torch.float64: "f64"}  # the C functions' name suffix per dtype
log = logging.getLogger("seqzoo.native")


class NativeUnavailable(RuntimeError):
    """The C library cannot be used here; the op runs its PyTorch path."""


class BuildUnavailable(NativeUnavailable):
    """Nothing can be built here: no C compiler, ``SEQZOO_NATIVE=0``, or a cache folder that cannot be written. An
    expected fallback, logged at INFO; the tests skip the C paths."""


class BuildError(NativeUnavailable):
    """A compiler is present and the source does not build or load: a bug in the shipped C file."""


def cache_dir() -> Path:
    return settings.cache_dir() / "native"


def _cpu() -> bytes:
    """What ``-march=native`` depends on: the machine and, on Linux, the CPU model and its feature flags."""
    ident = platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        ident += "".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags", "Features"))}))
    except OSError:
        pass
    return ident.encode()


def pointer(t: torch.Tensor | None) -> ctypes.c_void_p:
    """The data pointer of a tensor for a C call (NULL for None)."""
    return ctypes.c_void_p(None if t is None else t.data_ptr())


def pointer_at(t: torch.Tensor | None, offset: int) -> ctypes.c_void_p:
    """The address of element ``offset`` (counted in elements) of ``t``'s storage view (NULL for None)."""
    return ctypes.c_void_p(None if t is None else t.data_ptr() + offset * t.element_size())


def cpu_floats_for(library: NativeLibrary, *tensors: torch.Tensor) -> bool:
    """Whether a C loop of ``library`` can take these tensors: CPU float32 / float64 of one dtype, outside autocast
    and ``torch.compile`` (a C call would break the compiled graph), with the library built."""
    return (
        tensors[0].dtype in SUFFIX
        and all(t.device.type == "cpu" and t.dtype == tensors[0].dtype for t in tensors)
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
        and library.library() is not None
    )


def row_cuts(N: int) -> list[int]:
    """``N`` rows cut into one contiguous range per PyTorch intra-op thread (at most N): the ranges' bounds."""
    threads = max(1, min(torch.get_num_threads(), N))
    return [N * i // threads for i in range(threads + 1)]


def split_rows(N: int, call) -> list:
    """``call(r0, r1)`` over the ranges of ``row_cuts(N)``, in threads when there are several (the C loops are
    single-threaded, and ctypes releases the GIL while one runs); their return values, in order."""
    if N == 0:
        return []
    cuts = row_cuts(N)
    if len(cuts) == 2:
        return [call(0, N)]
    with ThreadPoolExecutor(len(cuts) - 1) as pool:
        return list(pool.map(call, cuts[:-1], cuts[1:]))


def run_rows(N: int, call, what: str) -> None:
    """``split_rows`` over C loops that return 0, or non-zero when they could not allocate their buffers (then they
    wrote nothing): a failure raises ``MemoryError`` naming ``what``."""
    if any(split_rows(N, call)):
        raise MemoryError(f"{what}: cannot allocate its buffers")


def compiler() -> str:
    """The C compiler's command: ``$CC``, else ``cc``."""
    return settings.c_compiler()


def compiled(source: Path, name: str) -> Path:
    """The shared library built from ``source`` (``<name>-<key>.so`` in ``cache_dir()``, compiled when absent).
    Raises ``BuildUnavailable`` when nothing can be built here and ``BuildError`` when the compiler refuses the
    source."""
    cc = compiler()
    if shutil.which(cc) is None:
        raise BuildUnavailable(f"cannot run the C compiler {cc!r}: not found")
    key = hashlib.sha256(source.read_bytes() + " ".join((cc, *FLAGS)).encode() + _cpu()).hexdigest()[:16]
    lib = cache_dir() / f"{name}-{key}.so"
    if lib.exists():
        return lib
    try:
        lib.parent.mkdir(parents=True, exist_ok=True)
        tmp_dir = tempfile.TemporaryDirectory(dir=lib.parent)
    except OSError as e:  # a read-only home or cache: nothing to fix in the C file
        raise BuildUnavailable(f"cannot write the build cache {lib.parent}: {e}") from e
    with tmp_dir as tmp:  # built aside, then renamed: never half-written
        out = Path(tmp) / lib.name
        try:
            r = subprocess.run([cc, *FLAGS, "-o", str(out), str(source), "-lm"], capture_output=True, text=True,
                               timeout=300)  # fmt: skip
        except OSError as e:
            raise BuildUnavailable(f"cannot run the C compiler {cc!r}: {e}") from e
        except subprocess.TimeoutExpired as e:
            raise BuildError(f"{cc} did not finish {source.name} in {e.timeout:.0f} s") from e
        if r.returncode != 0:
            raise BuildError(f"{cc} failed on {source.name}: {r.stderr.strip()[-400:]}")
        os.replace(out, lib)
    return lib


class NativeLibrary:
    """``source`` (a C file) built as ``<name>-<key>.so``; ``argtypes`` maps each function name to its ctypes
    argument types (set once the library loads)."""

    def __init__(self, source: Path, name: str, argtypes: dict[str, list]):
        self.source, self.name, self.argtypes = source, name, argtypes
        self._lib: ctypes.CDLL | None = None
        self._error: NativeUnavailable | None = None
        self._tried = False
        self._lock = threading.Lock()
        LIBRARIES[name] = self

    def _build(self) -> ctypes.CDLL:
        if not settings.native_enabled():
            raise BuildUnavailable("turned off by SEQZOO_NATIVE=0")
        lib = compiled(self.source, self.name)
        try:
            dll = ctypes.CDLL(str(lib))
            for fn, types in self.argtypes.items():
                getattr(dll, fn).argtypes = types
        except (OSError, AttributeError) as e:  # a library that does not load, or lacks a function the wrapper calls
            raise BuildError(f"{lib.name} built from {self.source.name} does not load: {e}") from e
        return dll

    def library(self) -> ctypes.CDLL | None:
        """The built library (compiled on the first call of the process when not cached), or None."""
        with self._lock:
            if not self._tried:
                try:
                    self._lib = self._build()
                except NativeUnavailable as e:  # no compiler, a failed build: the PyTorch path instead, logged
                    self._lib, self._error = None, e
                    level = logging.WARNING if isinstance(e, BuildError) else logging.INFO
                    log.log(level, "%s: the C path is unavailable, PyTorch runs instead: %s", self.source.name, e)
                self._tried = True
            return self._lib

    def unavailable(self) -> str | None:
        """Why ``library()`` is None (None when it is built)."""
        self.library()
        return None if self._error is None else str(self._error)

    def build_error(self) -> str | None:
        """Why the library failed to build or load although a compiler is present (None when it built, or when
        there is no compiler or it is turned off): the one case a test must not skip."""
        self.library()
        return str(self._error) if isinstance(self._error, BuildError) else None


LIBRARIES: dict[str, NativeLibrary] = {}  # every C library of the package, by name (filled as its wrapper imports)
