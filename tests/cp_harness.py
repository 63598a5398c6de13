"""Run a function on N gloo ranks (CPU processes) and collect what each rank returns: the context-parallel tests'
harness. ``run_ranks(case, n, *args)`` spawns ``n`` processes, each joins one gloo group and calls
``case(rank, n, *args)``; the return values come back in rank order (through files, so tensors of any size pass).
``all_gathers()`` records the all-gathers a rank issues inside it (who asked for them, how many bytes);
``hybrid_lm()`` is a small model with every recurrence that splits."""

from __future__ import annotations

import os
import socket
import tempfile
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from seqzoo.models import ModelConfig
from seqzoo.models.lm import LanguageModel


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, n: int, port: int, out: str, case, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    try:
        torch.save(case(rank, n, *args), Path(out) / f"rank{rank}.pt")
    finally:
        dist.barrier()
        dist.destroy_process_group()


def run_ranks(case, n: int, *args) -> list:
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_worker, args=(n, _free_port(), out, case, args), nprocs=n, join=True)
        return [torch.load(Path(out) / f"rank{r}.pt", weights_only=False) for r in range(n)]


@dataclass
class Gather:
    """One ``dist.all_gather``: the bytes of the other ranks' parts and the functions on the stack that issued it."""

    received: int
    callers: tuple[str, ...]


@contextmanager
def all_gathers():
    """Every ``torch.distributed.all_gather`` this rank issues inside the block, as a list of ``Gather`` (the
    context-parallel collectives all go through it: ``seqzoo/ops/context_parallel.py``)."""
    seen: list[Gather] = []
    original = dist.all_gather

    def recording(parts, tensor, *args, **kwargs):
        received = sum(p.numel() * p.element_size() for p in parts) - tensor.numel() * tensor.element_size()
        seen.append(Gather(received, tuple(frame.name for frame in traceback.extract_stack()[:-1])))
        return original(parts, tensor, *args, **kwargs)

    dist.all_gather = recording
    try:
        yield seen
    finally:
        dist.all_gather = original


def hybrid_lm() -> LanguageModel:
    """Every recurrence that splits (mLSTM with its conv, GateLoop with heads, RG-LRU with its conv) and a window."""
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=64,
        d_model=32,
        n_layers=4,
        pattern=["mlstm", "gateloop", "rglru", "local_attention"],
        mixer_kwargs={
            "mlstm": {"n_heads": 2, "eps": 0.0},
            "gateloop": {"n_heads": 4},
            "local_attention": {"window": 5},
        },
    )
    return LanguageModel(config)
