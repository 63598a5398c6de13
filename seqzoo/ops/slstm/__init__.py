"""sLSTM cell ops: the naive loop (reference) and fast loops; ``slstm(wx, R, state, mode=...)`` dispatches.

There is no parallel form (the recurrent matrix R mixes h_{t-1} into every gate), so every mode is a loop
over T; they differ only in how much each step costs. ``"auto"``: ``"native"`` (the loops in C, built on first use
by ``native.py``) on CPU where a C compiler builds it, else ``"fused"`` (``choose_implementation`` decides). README.md holds the derivation and measured times.
``"triton"`` (``triton.py``, explicit only): forward and BPTT as Triton kernels, R held on chip for head dims up to 64
and streamed from memory in tiles for wider heads (``triton_streamed.py``); ``"auto"`` does not choose it (it has
not been timed on a GPU).
Every mode takes ``segment_pos (B, T)`` (packed documents): the state is reset to the fresh one where it is 0.
"""

from __future__ import annotations

import torch

from ...errors import require
from ...kernels.switch import Choice, note_kernel, require_triton
from . import native
from .fused import slstm_compiled, slstm_fused
from .naive import slstm_naive

MODES = ("auto", "naive", "fused", "native", "compiled", "triton")


def slstm(wx, R, state=None, mode: str = "auto", segment_pos=None):
    """``wx (B, T, H, 4, d)`` input pre-activations (i, f, z, o; bias included), ``R (H, d, 4, d)``,
    ``state (h, c, n, m)`` each ``(B, H*d)`` or None -> ``h (B, T, H, d)`` and the final state.
    ``segment_pos (B, T)`` integers or None: 0 where a packed document starts; the step there reads the
    fresh-stream state (zeros), so no value or gradient crosses the start and the final state is the last
    document's."""
    if torch.compiler.is_compiling():
        # Under torch.compile of a whole model the loop over T would be traced into graphs that grow with T (a 10M
        # xLSTM[7:1] did not finish compiling in 20 minutes at T = 1024); the loop runs as it is instead (one graph
        # break), and "fused" is already a hand-written BPTT. Wrapped here, not at import: torch.compiler.disable
        # imports torch._dynamo (and with it triton), which `import seqzoo` must not.
        return torch.compiler.disable(_slstm)(wx, R, state, mode, segment_pos)
    return _slstm(wx, R, state, mode, segment_pos)


def choose_implementation(mode: str, wx) -> Choice:
    """Which loop ``slstm`` runs on ``wx``, and why a faster one was passed over.

    ``mode="auto"``: the C loops (``native``) on CPU where they build (first use compiles native.c, seconds; logged
    once), else the PyTorch loops (``fused``) with the reason. ``mode="native"`` off CPU is an ``InputError``, and
    without its C loops built a ``RuntimeError`` (the machine, not the input, lacks them). ``mode="triton"`` is an
    ``InputError`` where the kernel cannot run (triton missing, tensors off CUDA without ``TRITON_INTERPRET=1``).
    Any other mode is run as asked.
    """
    require(mode in MODES, f"slstm: mode must be one of {MODES}, got {mode!r}")
    if mode == "triton":
        require_triton("slstm", wx.device)
    if mode == "native":
        require(wx.device.type == "cpu", f"slstm: mode='native' runs on CPU tensors, got {wx.device.type}")
        why = native.unavailable()
        if why is not None:
            raise RuntimeError(f"slstm: mode='native' needs its C loops built: {why}")
    if mode != "auto":
        return Choice(mode)
    if wx.device.type != "cpu":
        return Choice("fused", f"the C loops run on CPU tensors, got {wx.device.type} tensors")
    why = native.unavailable()
    return Choice("native") if why is None else Choice("fused", f"the C loops are unavailable: {why}")


def _slstm(wx, R, state, mode, segment_pos):
    auto = mode == "auto"
    mode = choose_implementation(mode, wx).name
    if auto:  # the first "auto" run logs which loop it took
        note_kernel("slstm", "native C loop" if mode == "native" else "PyTorch loop", wx.device)
    if mode == "naive":
        return slstm_naive(wx, R, state, segment_pos)
    if mode == "compiled":
        return slstm_compiled(wx, R, state, segment_pos)
    if mode == "triton":  # imported here: triton is an optional dependency
        from .triton import slstm_triton

        return slstm_triton(wx, R, state, segment_pos)
    return slstm_fused(wx, R, state, native=mode == "native", segment_pos=segment_pos)


__all__ = ["MODES", "choose_implementation", "slstm", "slstm_compiled", "slstm_fused", "slstm_naive"]
