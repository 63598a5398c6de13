"""Run a function on N gloo ranks (CPU processes) and collect what each rank returns: the context-parallel tests'
harness. ``run_ranks(case, n, *args)`` spawns ``n`` processes, each joins one gloo group and calls
``case(rank, n, *args)``; the return values come back in rank order (through files, so tensors of any size pass)."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


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
