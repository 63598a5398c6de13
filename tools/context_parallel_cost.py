"""Cost of context parallelism on CPU gloo ranks: activation memory per rank and step time at N = 1, 2, 4.

A LanguageModel trains on random tokens of length T split over N ranks (``context_parallel=group``): with
``--layers attention`` global attention (with a short convolution) and windowed attention, with
``--layers recurrences`` an mLSTM, a GateLoop and an RG-LRU layer (4 heads each where heads apply). Each rank
measures

* its activation memory: the bytes autograd keeps for the backward at the end of the forward (every tensor saved
  for backward, each storage counted once, through ``torch.autograd.graph.saved_tensors_hooks``), which is what a
  split along time divides;
* its step time: forward + backward + the gradient sum over the group, the median of ``--steps`` steps after one
  warm-up, with one thread per rank;
* the bytes it receives in the forward's collectives (counted at ``dist.all_gather``: the other ranks' parts),
  over all layers (the largest over the ranks), beside the communication model of docs/context-parallel.md per
  attention layer.

Results: a JSON file and a markdown table (``--out``, default ``context_parallel_cost.json`` / ``.md``).

    python tools/context_parallel_cost.py --seq-len 4096 --ranks 1 2 4
    python tools/context_parallel_cost.py --seq-len 4096 --ranks 1 2 4 --layers recurrences
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from tool_errors import run_tool
from tqdm.auto import tqdm

from seqzoo.errors import InputError
from seqzoo.models import ModelConfig
from seqzoo.models.lm import LanguageModel

N_HEADS, N_KV_HEADS, WINDOW, SHORT_CONV = 4, 2, 128, 4


LAYERS = {
    "attention": (
        ["attention", "local_attention"],
        {
            "attention": {"n_heads": N_HEADS, "n_kv_heads": N_KV_HEADS, "short_conv": SHORT_CONV},
            "local_attention": {"n_heads": N_HEADS, "n_kv_heads": N_KV_HEADS, "window": WINDOW},
        },
    ),
    "recurrences": (
        ["mlstm", "gateloop", "rglru"],
        {"mlstm": {"n_heads": N_HEADS}, "gateloop": {"n_heads": N_HEADS}},
    ),
}
DESCRIPTION = {
    "attention": f"2 layers (attention with short conv k={SHORT_CONV}, local attention W={WINDOW} in its blocked mode)",
    "recurrences": f"3 layers (mLSTM with its conv k=4, GateLoop, RG-LRU with its conv; {N_HEADS} heads)",
}


def build(d_model: int, layers: str) -> LanguageModel:
    torch.manual_seed(0)
    pattern, kwargs = LAYERS[layers]
    return LanguageModel(ModelConfig(vocab_size=256, d_model=d_model, pattern=pattern, mixer_kwargs=kwargs))


class ReceivedBytes:
    """Counts the bytes of the other ranks' parts of every ``dist.all_gather`` while it is on (the forward)."""

    def __init__(self):
        self.on, self.bytes, self._gather = False, 0, dist.all_gather

    def __enter__(self):
        def counting(parts, tensor, *a, **k):
            if self.on:
                self.bytes += (len(parts) - 1) * tensor.numel() * tensor.element_size()
            return self._gather(parts, tensor, *a, **k)

        dist.all_gather = counting
        return self

    def __exit__(self, *exc):
        dist.all_gather = self._gather


def saved_bytes(fn) -> tuple[torch.Tensor, int]:
    """``fn()``'s result and the bytes of the distinct storages autograd saved for its backward."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


def rank_main(rank: int, n: int, port: int, out: str, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    model = build(args.d_model, args.layers)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 256, (args.batch, args.seq_len + 1), generator=g)
    L = args.seq_len // n
    x, y = ids[:, rank * L : (rank + 1) * L], ids[:, 1 + rank * L : 1 + (rank + 1) * L]
    group = dist.group.WORLD if n > 1 else None
    times, activation, received = [], 0, 0
    # the windowed layer in its banded mode at every N: the default picks one full (T, S+T) mask while
    # T·(S+T) <= 4M, and PyTorch's CPU kernel saves that mask as floats, which would swamp the comparison
    modes = {"local_attention": "blocked"} if args.layers == "attention" else None
    for step in range(args.steps + 1):
        model.zero_grad(set_to_none=True)
        dist.barrier()
        t0 = time.perf_counter()
        with ReceivedBytes() as counter:
            counter.on = True
            logits, activation = saved_bytes(lambda: model(x, mode=modes, context_parallel=group).logits)
            counter.on = False
        received = counter.bytes
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum") / ids.numel()
        loss.backward()
        for p in model.parameters():
            if n > 1:
                dist.all_reduce(p.grad)
        if step:  # the first step warms up
            times.append(time.perf_counter() - t0)
    torch.save(
        {"activation_bytes": activation, "step_s": statistics.median(times), "received_bytes": received},
        Path(out) / f"{rank}.pt",
    )
    dist.barrier()
    dist.destroy_process_group()


def received_bytes(n: int, args, itemsize: int = 4) -> dict[str, int]:
    """Bytes one rank receives per layer and step in the forward (communication model, docs/context-parallel.md)."""
    hd = args.d_model // N_HEADS
    L = args.seq_len // n
    kv_row = 2 * args.batch * N_KV_HEADS * hd * itemsize  # keys + values of one token
    return {
        "attention: all-gather K/V": (n - 1) * L * kv_row,
        f"local attention W={WINDOW}: halo": (n - 1) * min(WINDOW, L) * kv_row,
        f"short conv k={SHORT_CONV}: halo": (n - 1) * (SHORT_CONV - 1) * args.batch * args.d_model * itemsize,
    }


def measure(n: int, args) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(rank_main, args=(n, port, out, args), nprocs=n, join=True)
        ranks = [torch.load(Path(out) / f"{r}.pt") for r in range(n)]
    return {
        "ranks": n,
        "activation_MiB_per_rank": max(r["activation_bytes"] for r in ranks) / 2**20,
        "step_s_per_rank": max(r["step_s"] for r in ranks),
        "received_bytes_per_layer": received_bytes(n, args) if args.layers == "attention" else {},
        "measured_received_bytes": max(r["received_bytes"] for r in ranks),
    }


def markdown(rows: list[dict], args) -> str:
    base = rows[0]["activation_MiB_per_rank"]
    model_cols = args.layers == "attention"
    lines = [
        f"T = {args.seq_len}, batch {args.batch}, d_model {args.d_model}, {DESCRIPTION[args.layers]}, float32, one "
        "thread per gloo rank",
        "",
        "| ranks N | activation memory per rank (MiB) | x of N = 1 | step time per rank (s) | received in the "
        "forward, all layers, measured (KiB)"
        + (
            " | K/V all-gather, model (KiB) | window halo, model (KiB) | conv halo, model (KiB) |"
            if model_cols
            else " |"
        ),
        "|---|---|---|---|---|" + ("---|---|---|" if model_cols else ""),
    ]
    for r in rows:
        line = (
            f"| {r['ranks']} | {r['activation_MiB_per_rank']:.1f} | {r['activation_MiB_per_rank'] / base:.2f} | "
            f"{r['step_s_per_rank']:.3f} | {r['measured_received_bytes'] / 1024:.1f} |"
        )
        if model_cols:
            kv, halo, conv = r["received_bytes_per_layer"].values()
            line += f" {kv / 1024:.0f} | {halo / 1024:.0f} | {conv / 1024:.1f} |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--layers", choices=sorted(LAYERS), default="attention", help="which model (default: attention)")
    p.add_argument("--out", default="context_parallel_cost", help="writes OUT.json and OUT.md")
    args = p.parse_args()
    for name in ("seq_len", "batch", "d_model", "steps"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    for n in args.ranks:
        if n < 1 or args.seq_len % n or args.seq_len // n < SHORT_CONV - 1:
            raise InputError(f"--ranks: each N must be >= 1 and divide --seq-len={args.seq_len}, got {n}")
    if args.d_model % N_HEADS:
        raise InputError(f"--d-model must be a multiple of {N_HEADS}, got {args.d_model}")
    rows = [measure(n, args) for n in tqdm(args.ranks, desc="ranks", file=sys.stderr)]
    Path(args.out + ".json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2) + "\n")
    table = markdown(rows, args)
    Path(args.out + ".md").write_text(table)
    print(table)


if __name__ == "__main__":
    run_tool(main)
