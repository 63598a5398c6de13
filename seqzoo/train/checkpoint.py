"""Checkpoints that resume to the identical loss curve: model, optimiser, step and RNG state.

Written to a temporary file and renamed, so a run killed while saving never leaves a half-written
checkpoint. Under FSDP the full (unsharded) state is gathered to rank 0 first.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist

from .distributed import unwrap

CHECKPOINT_NAME = "checkpoint.pt"


def _is_fsdp(model) -> bool:
    return any(type(m).__name__.startswith("FSDP") for m in model.modules())


def _full_state(model, optimizer):
    if _is_fsdp(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        return get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return unwrap(model).state_dict(), optimizer.state_dict()


def save_checkpoint(path: Path, model, optimizer, step: int, main: bool) -> None:
    model_state, optim_state = _full_state(model, optimizer)
    if main:
        state = {"model": model_state, "optimizer": optim_state, "step": step, "rng": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["cuda_rng"] = torch.cuda.get_rng_state_all()
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save(state, tmp)
        os.replace(tmp, path)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Delete temporaries a killed save left beside ``path`` (``checkpoint.tmp<pid>``); the renamed file is whole."""
    stale = sorted(path.parent.glob(path.with_suffix(".tmp*").name))
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def load_checkpoint(path: Path, model) -> dict:
    """Load the model weights (before any wrapping) and return the rest of the checkpoint."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    unwrap(model).load_state_dict(state["model"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return state


def load_optimizer_state(model, optimizer, optim_state) -> None:
    if _is_fsdp(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, optim_state, options=StateDictOptions(full_state_dict=True))
    else:
        optimizer.load_state_dict(optim_state)


def export_model(train_model, model, directory: Path, main: bool) -> None:
    """``save_pretrained`` of the trained model (FSDP: gathered full weights loaded into a fresh copy)."""
    if _is_fsdp(train_model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(train_model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if main:
            plain = type(model)(model.config)
            plain.load_state_dict(full)
            plain.save_pretrained(directory)
    elif main:
        unwrap(model).save_pretrained(directory)
