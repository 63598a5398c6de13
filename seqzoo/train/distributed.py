"""Multi-process training through ``torchrun``: process group set-up, DDP or FSDP2 (``fully_shard``) wrapping."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .. import settings
from ..errors import InputError


def world() -> tuple[int, int]:
    """(rank, world_size) of this process; (0, 1) outside torchrun."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return settings.rank(), settings.world_size()


def launched_by_torchrun() -> bool:
    return settings.world_size() > 1


def init_distributed(device: torch.device) -> bool:
    """Create the process group unless one exists; True when this call created it (and must destroy it)."""
    if dist.is_initialized():
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend)
    return True


def shutdown_distributed() -> None:
    """Wait for every rank, then tear the group down (a live gloo group at exit can abort a rank)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def wrap_model(model: nn.Module, kind: str, device: torch.device, mesh: Any = None) -> nn.Module:
    """DDP or FSDP2 over ``mesh`` (a 1-D DeviceMesh: the data dimension under context parallelism; None: the world)."""
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        group = None if mesh is None else mesh.get_group()
        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None, process_group=group)
    if kind == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in getattr(model, "blocks", []):
            # registered before fully_shard, so it runs before FSDP2's post-forward hook sees the output
            block.register_forward_hook(_copy_view_outputs)
            fully_shard(block, mesh=mesh)
        model.register_forward_hook(_copy_view_outputs)
        fully_shard(model, mesh=mesh)
        return model
    raise InputError(f"unknown distributed kind {kind!r}")


def _copy_view_outputs(module: nn.Module, args: Any, output: Any) -> Any:
    """Forward hook: the module's output with every grad-requiring view tensor replaced by a copy.

    FSDP2 hooks its pre-backward all-gather onto each output tensor; on a view an in-place op would drop that hook
    and the gradients would be wrong, and PyTorch warns. The views are mixer states (an attention cache keeps
    ``k[:, -window:]``, a slice of the projected keys), returned beside the block output; copying them costs one
    copy of each state per step and leaves values and gradients unchanged. Without grad nothing is copied.
    """
    return _without_views(output)


def _without_views(value: Any) -> Any:
    """``value`` rebuilt with copies of its grad-requiring views, through the containers FSDP2 walks."""
    if isinstance(value, torch.Tensor):
        return value.clone() if value.requires_grad and value._base is not None else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _without_views(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **fields)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple
        return type(value)(*(_without_views(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_without_views(v) for v in value)
    if isinstance(value, dict):
        return {k: _without_views(v) for k, v in value.items()}
    return value


def unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model)


def all_reduce_mean(value: float, device: torch.device) -> float:
    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t) / dist.get_world_size()
