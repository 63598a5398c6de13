"""Multi-process training through ``torchrun``: process group set-up, DDP or FSDP2 (``fully_shard``) wrapping."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

from ..errors import InputError


def world() -> tuple[int, int]:
    """(rank, world_size) of this process; (0, 1) outside torchrun."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", 1)) > 1


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


def wrap_model(model: nn.Module, kind: str, device: torch.device) -> nn.Module:
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    if kind == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in getattr(model, "blocks", []):
            fully_shard(block)
        fully_shard(model)
        return model
    raise InputError(f"unknown distributed kind {kind!r}")


def unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model)


def all_reduce_mean(value: float, device: torch.device) -> float:
    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return float(t) / dist.get_world_size()
