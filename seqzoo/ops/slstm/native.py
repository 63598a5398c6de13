"""The sLSTM loops of ``native.c``, built on first use with the system C compiler and called through ctypes.

``library()`` compiles ``native.c`` on first use (``ops/native_build.py``: cached per source, flags and CPU in
``$SEQZOO_CACHE/native``) and loads it; it returns None where that is impossible (no compiler, ``SEQZOO_NATIVE=0``),
and ``unavailable()`` says why. ``forward`` and
``backward`` are the two sequential loops of ``fused.py: _SLSTMFunction`` on contiguous float32 / float64 CPU
tensors; everything that is not sequential stays in PyTorch there.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from ...errors import InputError
from ..native_build import SUFFIX as _SUFFIX
from ..native_build import NativeLibrary, cache_dir
from ..native_build import pointer as _p

SOURCE = Path(__file__).with_name("native.c")
_i64, _ptr = ctypes.c_int64, ctypes.c_void_p
_LIB = NativeLibrary(
    SOURCE,
    "slstm",
    {
        **{f"slstm_forward_{sfx}": [_i64] * 4 + [_ptr] * 8 for sfx in _SUFFIX.values()},
        **{f"slstm_backward_{sfx}": [_i64] * 4 + [_ptr] * 9 for sfx in _SUFFIX.values()},
    },
)
library, unavailable = _LIB.library, _LIB.unavailable
__all__ = ["backward", "cache_dir", "forward", "library", "unavailable"]


def _fresh_flags(fresh, T, B):
    """``fresh (T, 1, B, 1)`` bool (document starts) as the contiguous uint8 ``(T, B)`` the C loops read (None:
    a NULL pointer, no starts)."""
    return None if fresh is None else fresh.reshape(T, B).to(torch.uint8).contiguous()


def forward(gx, Rm, state, fresh=None):
    """``gx (T, H, B, 4d)``, ``Rm (H, d, 4d)``, ``state = (h, c, n, m)`` each ``(H, B, d)`` -> ``G`` (the
    pre-activations) and ``Hs, Cs, Ns, Ms (T+1, H, B, d)`` with the initial state at index 0. ``fresh
    (T, 1, B, 1)`` bool or None: steps that start a document read the zero state."""
    # the loop reads every tensor through a CPU pointer: R or a state elsewhere (a CUDA or meta tensor beside CPU
    # inputs) would be read as host memory (a crash); the PyTorch loop refuses mixed devices too
    for name, t in (("R", Rm), *zip(("state h", "state c", "state n", "state m"), state)):
        if t.device.type != "cpu":
            raise InputError(f"slstm: the C loops take CPU tensors, got {name} on {t.device}")
    T, H, B, D4 = gx.shape
    d = D4 // 4
    Rm = Rm.to(gx.dtype).contiguous()  # the C loop reads every pointer as gx's type
    gx = gx.contiguous()
    G = torch.empty_like(gx)
    Hs, Cs, Ns, Ms = (torch.empty(T + 1, H, B, d, dtype=gx.dtype) for _ in range(4))
    for seq, s0 in zip((Hs, Cs, Ns, Ms), state):
        seq[0] = s0
    flags = _fresh_flags(fresh, T, B)
    fn = getattr(library(), f"slstm_forward_{_SUFFIX[gx.dtype]}")
    fn(T, H, B, d, _p(gx), _p(Rm), _p(G), _p(Hs), _p(Cs), _p(Ns), _p(Ms), _p(flags))
    return G, Hs, Cs, Ns, Ms


def backward(Rm, D, dHs, dh, dc, dn, dm, fresh=None):
    """``Rm (H, d, 4d)``, the 11 planes of local derivatives ``D (11, T, H, B, d)`` (native.c), ``dHs (T, H, B, d)``
    and the incoming gradients of the final ``h, c, n, m (H, B, d)`` -> ``dG (T, H, B, 4d)`` and the gradients of
    the initial ``h, c, n, m``. ``fresh`` as in ``forward``: the chain stops at each document start."""
    _, T, H, B, d = D.shape
    # the C loop reads and writes every pointer as D's type
    RmT, D = Rm.to(D.dtype).transpose(1, 2).contiguous(), D.contiguous()  # RmT (H, 4d, d)
    dHs = dHs.to(D.dtype).contiguous()
    dh, dc, dn, dm = (t.to(D.dtype, memory_format=torch.contiguous_format, copy=True) for t in (dh, dc, dn, dm))
    dG = torch.empty(T, H, B, 4 * d, dtype=D.dtype)
    flags = _fresh_flags(fresh, T, B)
    fn = getattr(library(), f"slstm_backward_{_SUFFIX[D.dtype]}")
    fn(T, H, B, d, _p(RmT), _p(D), _p(dHs), _p(dG), _p(dh), _p(dc), _p(dn), _p(dm), _p(flags))
    return dG, dh, dc, dn, dm
