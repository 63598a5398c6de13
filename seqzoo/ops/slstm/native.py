"""The sLSTM loops of ``native.c``, built on first use with the system C compiler and called through ctypes.

``library()`` compiles ``native.c`` once per source, flags and CPU into ``$SEQZOO_CACHE/native`` (default
``~/.cache/seqzoo/native``; ``-march=native``, so the file is keyed by the CPU as well) and loads it; it returns None
where that is impossible (no compiler, ``SEQZOO_NATIVE=0``), and ``unavailable()`` says why. ``forward`` and
``backward`` are the two sequential loops of ``fused.py: _SLSTMFunction`` on contiguous float32 / float64 CPU
tensors; everything that is not sequential stays in PyTorch there.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("native.c")
FLAGS = ("-O3", "-march=native", "-shared", "-fPIC")
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
_state: dict = {}
_lock = threading.Lock()


def cache_dir() -> Path:
    return Path(os.environ.get("SEQZOO_CACHE", Path.home() / ".cache" / "seqzoo")) / "native"


def _cpu() -> bytes:
    """What ``-march=native`` depends on: the machine and, on Linux, the CPU model and its feature flags."""
    ident = platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        ident += "".join(sorted({ln for ln in lines if ln.startswith(("model name", "flags", "Features"))}))
    except OSError:
        pass
    return ident.encode()


def _build() -> ctypes.CDLL:
    if os.environ.get("SEQZOO_NATIVE", "1") == "0":
        raise RuntimeError("turned off by SEQZOO_NATIVE=0")
    cc = os.environ.get("CC", "cc")
    key = hashlib.sha256(SOURCE.read_bytes() + " ".join((cc, *FLAGS)).encode() + _cpu()).hexdigest()[:16]
    lib = cache_dir() / f"slstm-{key}.so"
    if not lib.exists():
        lib.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:  # built aside, then renamed: never half-written
            out = Path(tmp) / lib.name
            try:
                r = subprocess.run(
                    [cc, *FLAGS, "-o", str(out), str(SOURCE), "-lm"], capture_output=True, text=True, timeout=300
                )
            except (OSError, subprocess.TimeoutExpired) as e:
                raise RuntimeError(f"cannot run the C compiler {cc!r}: {e}") from e
            if r.returncode != 0:
                raise RuntimeError(f"{cc} failed on {SOURCE.name}: {r.stderr.strip()[-400:]}")
            os.replace(out, lib)
    dll = ctypes.CDLL(str(lib))
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    for sfx in _SUFFIX.values():
        getattr(dll, f"slstm_forward_{sfx}").argtypes = [i64] * 4 + [ptr] * 7
        getattr(dll, f"slstm_backward_{sfx}").argtypes = [i64] * 4 + [ptr] * 8
    return dll


def library() -> ctypes.CDLL | None:
    """The built library (compiled on the first call of the process when not cached), or None."""
    with _lock:
        if "lib" not in _state:
            try:
                _state["lib"], _state["why"] = _build(), None
            except Exception as e:  # no compiler, a failed build, a library that does not load: the PyTorch loop
                _state["lib"], _state["why"] = None, str(e)
        return _state["lib"]


def unavailable() -> str | None:
    """Why ``library()`` is None (None when it is built)."""
    library()
    return _state["why"]


def _p(t: torch.Tensor) -> ctypes.c_void_p:
    return ctypes.c_void_p(t.data_ptr())


def forward(gx, Rm, state):
    """``gx (T, H, B, 4d)``, ``Rm (H, d, 4d)``, ``state = (h, c, n, m)`` each ``(H, B, d)`` -> ``G`` (the
    pre-activations) and ``Hs, Cs, Ns, Ms (T+1, H, B, d)`` with the initial state at index 0."""
    T, H, B, D4 = gx.shape
    d = D4 // 4
    Rm = Rm.to(gx.dtype).contiguous()  # the C loop reads every pointer as gx's type
    gx = gx.contiguous()
    G = torch.empty_like(gx)
    Hs, Cs, Ns, Ms = (torch.empty(T + 1, H, B, d, dtype=gx.dtype) for _ in range(4))
    for seq, s0 in zip((Hs, Cs, Ns, Ms), state):
        seq[0] = s0
    fn = getattr(library(), f"slstm_forward_{_SUFFIX[gx.dtype]}")
    fn(T, H, B, d, _p(gx), _p(Rm), _p(G), _p(Hs), _p(Cs), _p(Ns), _p(Ms))
    return G, Hs, Cs, Ns, Ms


def backward(Rm, D, dHs, dh, dc, dn, dm):
    """``Rm (H, d, 4d)``, the 11 planes of local derivatives ``D (11, T, H, B, d)`` (native.c), ``dHs (T, H, B, d)``
    and the incoming gradients of the final ``h, c, n, m (H, B, d)`` -> ``dG (T, H, B, 4d)`` and the gradients of
    the initial ``h, c, n, m``."""
    _, T, H, B, d = D.shape
    # the C loop reads and writes every pointer as D's type
    RmT, D = Rm.to(D.dtype).transpose(1, 2).contiguous(), D.contiguous()  # RmT (H, 4d, d)
    dHs = dHs.to(D.dtype).contiguous()
    dh, dc, dn, dm = (t.to(D.dtype, memory_format=torch.contiguous_format, copy=True) for t in (dh, dc, dn, dm))
    dG = torch.empty(T, H, B, 4 * d, dtype=D.dtype)
    fn = getattr(library(), f"slstm_backward_{_SUFFIX[D.dtype]}")
    fn(T, H, B, d, _p(RmT), _p(D), _p(dHs), _p(dG), _p(dh), _p(dc), _p(dn), _p(dm))
    return dG, dh, dc, dn, dm
