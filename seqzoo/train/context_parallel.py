"""Context parallelism in the trainer: the world as data x context ranks, each context group sharing one batch.

World = D x N processes (``TrainConfig.context_parallel = N``): ranks [d·N, ..., d·N + N - 1] form context group d.
They read the same rows of the global batch and rank c of the group keeps time block c (tokens [c·T/N, (c+1)·T/N)
of inputs, targets and segment_pos); the model splits the sequence along time over the group
(``LanguageModel(context_parallel=group)``, docs/context-parallel.md). Every rank's loss is the sum over its own
scored tokens divided by the scored tokens of the whole global batch, so the gradients summed over a context group
are those of one process holding whole sequences; the data dimension (ranks c, c + N, ...) averages them as
without context parallelism (DDP or FSDP2 over its group).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .. import settings
from ..errors import InputError
from ..models.context_parallel import context_parallel_refusal


@dataclass
class Layout:
    """Where this rank sits: its data index and size, its context index and size, and the groups."""

    data_rank: int = 0
    data_size: int = 1
    context_rank: int = 0
    context_size: int = 1
    context_group: dist.ProcessGroup | None = None
    data_mesh: object | None = None  # a 1-D DeviceMesh over the data dimension (DDP / FSDP2), None: the world

    def time_block(self, t: torch.Tensor | None) -> torch.Tensor | None:
        """This rank's block of consecutive time steps of ``t (B, T, ...)``."""
        if t is None or self.context_size == 1:
            return t
        size = t.shape[1] // self.context_size
        return t[:, self.context_rank * size : (self.context_rank + 1) * size]


def check_context_parallel(cfg, model, task) -> None:
    """What context parallelism refuses, before any work or file: a world size or sequence length that N does not
    divide, a task without per-position targets, a model with a layer that cannot split."""
    n = cfg.context_parallel
    if n == 1:
        return
    world = settings.world_size()
    if world % n:
        raise InputError(
            f"context_parallel={n} must divide the number of processes ({world}; launch with torchrun "
            f"--nproc-per-node a multiple of {n})"
        )
    seq_len = getattr(task, "seq_len", None)
    if not isinstance(seq_len, int) or seq_len % n:
        raise InputError(f"context_parallel={n} must divide the task's seq_len, got seq_len={seq_len!r}")
    if getattr(task, "kind", "lm") != "lm":
        raise InputError(f"context_parallel={n} needs a task with per-position targets (kind 'lm'), not {task.kind!r}")
    why = context_parallel_refusal(model)
    if why:
        raise InputError(f"context_parallel={n}: {why}")


def make_layout(n: int, rank: int, world: int, device: torch.device) -> Layout:
    """The 2-D (data, context) mesh of an initialised world; every rank calls it (group creation is collective)."""
    if n == 1:
        return Layout(data_rank=rank, data_size=world)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (world // n, n), mesh_dim_names=("data", "context"))
    return Layout(
        data_rank=rank // n,
        data_size=world // n,
        context_rank=rank % n,
        context_size=n,
        context_group=mesh["context"].get_group(),
        data_mesh=mesh["data"],
    )


def sum_context_gradients(model: torch.nn.Module, layout: Layout) -> None:
    """Add up the parameter gradients of a context group: each rank holds the part from its own tokens."""
    if layout.context_size == 1:
        return
    for p in model.parameters():
        if p.grad is not None:
            grad = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad  # FSDP2: this rank's shard
            dist.all_reduce(grad, group=layout.context_group)
