"""Context parallelism's communication: one sequence split along time over the ranks of a process group.

Rank r of N holds the r-th block of T/N consecutive tokens of every sequence. What a layer needs from the ranks
before it is small and fixed-size for every layer that allows the split:

* a linear recurrence h_t = A_t h_{t-1} + b_t (GateLoop, the mLSTM, the RG-LRU, any diagonal scan) needs the state
  entering its block. Each rank reduces its block to a summary (its total transition and its final state from a
  zero start); the summaries of all ranks are gathered and each rank combines those of the ranks before it
  (LASP-2, Sun et al. arXiv:2502.07563: one all-gather of length-independent summaries, then a prefix):
  ``incoming_state``. The combine rule is the recurrence's own (``linear_combine`` for a diagonal transition; the
  mLSTM merges its stabiliser in log space);
* a causal convolution of width k needs the last k - 1 inputs of the previous rank (``previous_tail``);
* attention needs the keys and values of every earlier rank (``gather_ranks`` along time).

Every function is differentiable: gradients flow back to the ranks that sent the data, so the loss and every
gradient equal those of one process that holds the whole sequence. Outside an initialised process group (or with a
group of one rank) they reduce to the one-process answer without communicating.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from ..errors import InputError

Summary = tuple[torch.Tensor, ...]


def group_rank_size(group: dist.ProcessGroup | None = None) -> tuple[int, int]:
    """(rank, size) of this process in ``group``; (0, 1) when no process group is initialised."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


class _GatherRanks(torch.autograd.Function):
    """All-gather along a new leading rank axis; backward: the sum over ranks of the gradient of this rank's slice."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group):
        rank, size = group_rank_size(group)
        ctx.group, ctx.rank = group, rank
        parts = [torch.empty_like(x) for _ in range(size)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.stack(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        # every rank used every slice: the gradient of this rank's input is the sum of all ranks' gradients of its
        # slice. An all-reduce of the whole stack is N times the bytes of a reduce-scatter but runs on every backend
        # (gloo has no reduce-scatter).
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad[ctx.rank], None


def gather_ranks(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """``(N, *x.shape)``: ``x`` of every rank of ``group``, in rank order (``x[None]`` without a group).

    Its backward is a collective too: every rank must let the result reach its loss (a rank that drops it would
    leave the others waiting in backward). The functions below always do.
    """
    if not isinstance(x, torch.Tensor):
        raise InputError(f"gather_ranks: x must be a tensor, got {type(x).__name__}")
    if group_rank_size(group)[1] == 1:
        return x[None]
    return _GatherRanks.apply(x, group)


def previous_tail(x: torch.Tensor, width: int, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The last ``width`` time steps of the previous rank's ``x (B, T, ...)``: ``(B, width, ...)``, zeros on rank 0.

    The halo of a causal convolution of ``width + 1`` taps; it comes from the one previous rank, so ``width`` is at
    most the local length.
    """
    if not isinstance(width, int) or isinstance(width, bool) or width < 0:
        raise InputError(f"previous_tail: width must be an int >= 0, got {width!r}")
    if x.dim() < 2 or x.shape[1] < width:
        raise InputError(f"previous_tail: x needs shape (B, T >= width={width}, ...), got {tuple(x.shape)}")
    rank, size = group_rank_size(group)
    tail = x[:, x.shape[1] - width :]
    if size == 1:
        return torch.zeros_like(tail)
    tails = gather_ranks(tail, group)
    # rank 0 reads a zero row of the same stack (not a fresh tensor), so its backward takes part in the collective
    return torch.cat([torch.zeros_like(tail)[None], tails[:-1]])[rank]


def linear_combine(state: Summary, summary: Summary) -> Summary:
    """h -> A h + b for a diagonal transition: ``summary = (A, b)`` (A broadcast against b), ``state = (h,)``."""
    a, b = summary
    return (a * state[0] + b,)


def incoming_state(
    summary: Summary,
    combine: Callable[[Summary, Summary], Summary],
    initial: Summary,
    group: dist.ProcessGroup | None = None,
) -> Summary:
    """The recurrence's state entering this rank's block.

    ``summary``: this rank's block reduced to fixed-size tensors (e.g. its total transition and its final state
    from a zero start); ``combine(state, summary)``: the state after a block that starts in ``state``;
    ``initial``: the state entering the whole sequence (zeros for a fresh stream): rank 0's value is the one used,
    and its gradient reaches rank 0's tensors. Rank r returns combine(... combine(initial, summary_0) ...,
    summary_{r-1}). One all-gather of every rank's ``initial`` and ``summary`` packed together (one dtype); the
    prefix is computed on every rank (N is small).
    """
    for name, tensors in (("summary", summary), ("initial", initial)):
        if not isinstance(tensors, Sequence) or not all(isinstance(t, torch.Tensor) for t in tensors) or not tensors:
            raise InputError(f"incoming_state: {name} must be a non-empty tuple of tensors")
    parts = (*initial, *summary)
    if len({t.dtype for t in parts}) != 1:
        raise InputError(f"incoming_state: initial and summary must share one dtype, got {[t.dtype for t in parts]}")
    rank, size = group_rank_size(group)
    if size == 1:
        return tuple(initial)
    rows = gather_ranks(torch.cat([t.reshape(-1) for t in parts]), group)

    def unpack(row: torch.Tensor) -> Summary:
        pieces = torch.split(row, [t.numel() for t in parts])
        return tuple(p.view(t.shape) for p, t in zip(pieces, parts))

    # every rank, rank 0 too, reads its state from the gathered rows, so every rank's backward joins the collective
    state = unpack(rows[0])[: len(initial)]
    for j in range(rank):
        state = combine(state, unpack(rows[j])[len(initial) :])
    return state
