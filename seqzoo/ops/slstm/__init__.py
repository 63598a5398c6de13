"""sLSTM cell ops: the naive loop (reference) and fast loops; ``slstm(wx, R, state, mode=...)`` dispatches.

There is no parallel form (the recurrent matrix R mixes h_{t-1} into every gate), so every mode is a loop
over T; they differ only in how much each step costs. README.md holds the derivation and measured times.
"""

from __future__ import annotations

from ...errors import InputError
from .fused import slstm_compiled, slstm_fused
from .naive import slstm_naive

MODES = ("auto", "naive", "fused", "compiled")


def slstm(wx, R, state=None, mode: str = "auto"):
    """``wx (B, T, H, 4, d)`` input pre-activations (i, f, z, o; bias included), ``R (H, d, 4, d)``,
    ``state (h, c, n, m)`` each ``(B, H*d)`` or None -> ``h (B, T, H, d)`` and the final state."""
    if mode not in MODES:
        raise InputError(f"slstm: mode must be one of {MODES}, got {mode!r}")
    if mode == "naive":
        return slstm_naive(wx, R, state)
    if mode == "compiled":
        return slstm_compiled(wx, R, state)
    return slstm_fused(wx, R, state)


__all__ = ["MODES", "slstm", "slstm_compiled", "slstm_fused", "slstm_naive"]
