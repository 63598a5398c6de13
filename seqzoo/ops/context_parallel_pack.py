"""One all-gather for several tensors of one dtype: ``gather_packed`` (context parallelism, ops/context_parallel.py).

A layer split along time often needs a few tensors of the previous ranks at once (an attention layer: the tail of
its keys, of its values and of its convolution's input). Each collective has a fixed latency, so they travel as
one flat row per rank and are cut apart again on arrival; the gradient flows back through the same single
collective (``gather_ranks``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from ..errors import InputError
from .context_parallel import gather_ranks


def gather_packed(parts: Sequence[torch.Tensor], group: dist.ProcessGroup | None = None) -> list[torch.Tensor]:
    """``[(N, *p.shape) for p in parts]``: every rank's ``parts`` in rank order, through one ``gather_ranks``.

    All parts share one dtype, and every rank passes parts of the same shapes (an all-gather moves equal sizes).
    """
    if not parts or not all(isinstance(p, torch.Tensor) for p in parts):
        raise InputError("gather_packed: parts must be a non-empty sequence of tensors")
    if len({p.dtype for p in parts}) != 1:
        raise InputError(f"gather_packed: parts must share one dtype, got {[p.dtype for p in parts]}")
    rows = gather_ranks(torch.cat([p.reshape(-1) for p in parts]), group)  # (N, total)
    pieces = torch.split(rows, [p.numel() for p in parts], dim=1)
    return [piece.reshape(rows.shape[0], *p.shape) for piece, p in zip(pieces, parts)]
