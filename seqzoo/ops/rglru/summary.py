"""A block of RG-LRU tokens reduced to its effect on the state: what context parallelism gathers from each rank.

The RG-LRU (Griffin, arXiv:2402.19427 §2.4) is the diagonal linear scan h_t = a_t ⊙ h_{t-1} + b_t, so a block of
tokens t = 1..L acts on the state entering it as

    h_L = A ⊙ h_0 + h_L⁰,     A = Π_t a_t,     h_L⁰ = the scan's last state from h_0 = 0

and the ranks' summaries (A, h_L⁰) combine with ``context_parallel.linear_combine`` (LASP-2, arXiv:2502.07563).
A document start in the block has a_t = 0 (``gates.py``), so A = 0 there and h_L⁰ holds only the last document.
h_L⁰ is the scan of the chosen mode (its last state; the chunked scan's own backward gives the gradients).
"""

from __future__ import annotations

from . import linear_scan
from .gates import rglru_gates
from .naive import acc_dtype


def rglru_summary(x, gate_x, gate_a, a_param, reset=None, c: float = 8.0, mode: str = "auto"):
    """``x, gate_x, gate_a (B, T, R)``, ``a_param (R)``, ``reset (B, T)`` bool or None -> ``A (B, R)`` and ``h (B, R)``
    (module docstring), in the accumulation dtype (fp32, fp64 for fp64 input); ``mode`` is ``linear_scan``'s."""
    a, b = rglru_gates(x, gate_x, gate_a, a_param, reset, c)
    _, h = linear_scan(a, b, None, mode=mode)
    return a.to(acc_dtype(x.dtype)).prod(1), h
