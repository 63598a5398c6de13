"""What the linear-recurrence mixers share when one sequence is split along time over the ranks of a group.

Each such mixer (GateLoop, the mLSTM, the RG-LRU block) gets the state entering its block from
``context_parallel.incoming_state`` with its own summary and combine rule (``ops/<op>/summary.py``); around that:

* ``conv_history``: the buffer a causal convolution of ``width + 1`` taps reads before this rank's first token, i.e.
  the previous rank's last ``width`` inputs (``context_parallel.previous_tail``), with the entries before a document
  start in that tail zeroed, the rule of the carried buffer in ``ops/causal_conv`` (a tap that would reach across a
  start reads 0); rank 0 reads the state's buffer, or zeros;
* ``from_last_rank``: the state after the whole sequence, which the last rank computed, on every rank (one
  all-gather; gradients flow back to the last rank's tensors). A forward whose caller does not read the state
  (``Mixer.forward(return_state=False)``, training) does not call it.
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist

from .causal_conv.common import new_state
from .context_parallel import gather_ranks, group_rank_size, previous_tail


def conv_history(
    x: torch.Tensor,
    width: int,
    state: torch.Tensor | None,
    segment_pos: torch.Tensor | None,
    group: dist.ProcessGroup | None,
) -> torch.Tensor:
    """``x (B, T, C)`` this rank's conv input -> ``(B, width, C)``: the inputs before this rank's block as the conv's
    carried state would hold them. ``state (B, width, C)`` or None: the buffer entering the whole sequence (rank
    0's is used); ``segment_pos (B, T)`` or None: this rank's slice of the document positions."""
    tail = x
    if segment_pos is not None and 0 < width <= x.shape[1]:
        # a start inside the tail hides what lies before it from every later token (ops/causal_conv: new_state)
        tail = new_state(x, width + 1, (segment_pos == 0).long().cumsum(1))
    halo = previous_tail(tail, width, group)  # refuses a block shorter than width
    if state is not None and group_rank_size(group)[0] == 0:
        # rank 0's halo is a zero row of the gathered stack (its backward joins the collective): add the state to it
        halo = halo + state.to(halo.dtype)
    return halo


def _real_view(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t) if t.is_complex() else t


def from_last_rank(tensors: tuple[torch.Tensor, ...], group: dist.ProcessGroup | None) -> tuple[torch.Tensor, ...]:
    """The last rank's ``tensors`` on every rank (the rank's own without a group of more than one rank).

    One all-gather of all of them packed together (complex tensors as their real pairs, in the widest of
    their dtypes). Like ``gather_ranks``, its backward is a collective: every rank must let the result reach its loss,
    or none may.
    """
    if group_rank_size(group)[1] == 1:
        return tuple(tensors)
    flat = [_real_view(t) for t in tensors]
    dtype = functools.reduce(torch.promote_types, [f.dtype for f in flat])
    rows = gather_ranks(torch.cat([f.reshape(-1).to(dtype) for f in flat]), group)
    pieces = torch.split(rows[-1], [f.numel() for f in flat])
    out = []
    for piece, f, t in zip(pieces, flat, tensors):
        piece = piece.view(f.shape).to(f.dtype)
        out.append(torch.view_as_complex(piece.contiguous()) if t.is_complex() else piece)
    return tuple(out)
