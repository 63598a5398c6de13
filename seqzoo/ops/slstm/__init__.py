"""sLSTM cell ops: the naive loop (reference) and fast loops; ``slstm(wx, R, state, impl=...)`` dispatches.

There is no parallel form (the recurrent matrix R mixes h_{t-1} into every gate), so every impl is a loop
over T; they differ only in how much each step costs. README.md holds the derivation and measured times.
"""

from __future__ import annotations

from ...errors import InputError
from .fused import slstm_compiled, slstm_fused
from .naive import slstm_naive

IMPLS = ("auto", "naive", "fused", "compiled")


def slstm(wx, R, state=None, impl: str = "auto"):
    """``wx (B, T, H, 4, d)`` input pre-activations (i, f, z, o; bias included), ``R (H, d, 4, d)``,
    ``state (h, c, n, m)`` each ``(B, H*d)`` or None -> ``h (B, T, H, d)`` and the final state."""
    if impl not in IMPLS:
        raise InputError(f"slstm: impl must be one of {IMPLS}, got {impl!r}")
    if impl == "naive":
        return slstm_naive(wx, R, state)
    if impl == "compiled":
        return slstm_compiled(wx, R, state)
    return slstm_fused(wx, R, state)


__all__ = ["IMPLS", "slstm", "slstm_compiled", "slstm_fused", "slstm_naive"]
