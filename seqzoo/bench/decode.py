"""Decode benchmark: per-token latency and carried-state memory vs context length (Griffin paper §5.2).

For each model (default the tiny Hawk, Griffin and MQA-Transformer presets) and each context length L, the
model holds the state it would have after L tokens, then decodes ``steps`` single tokens; we report the median
time per token and the bytes of the carried state (every tensor of every layer's state).

States after L tokens are built at their exact shapes without running an L-token prefill (which would take
minutes for the quadratic baseline on a CPU): a real prefill of a short prompt gives each layer's state, then
global-attention KV caches are extended to L keys (random values) and every stream position is set to L. A
decode step's cost depends on these shapes, not on the values. ``check_prefill_len`` runs one real prefill of
that length per model and asserts that its state has the same size as the built one.

    python -m seqzoo.bench.decode --out runs/griffin-decode --lengths 1024,2048,4096,8192,16384,32768
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from ..mixers.attention import KVCache


def state_bytes(states: list[Any]) -> int:
    """Bytes of every tensor held by the per-layer states."""
    total = 0
    for s in states:
        for t in _state_tensors(s):
            total += t.numel() * t.element_size()
    return total


def _state_tensors(s: Any) -> list[torch.Tensor]:
    """The tensors of one layer's state: a bare tensor (GateLoop's complex S), a tuple / list, or an object's fields."""
    if torch.is_tensor(s):
        return [s]
    if isinstance(s, (tuple, list)):
        fields = s
    elif hasattr(s, "__dict__"):
        fields = vars(s).values()
    else:
        fields = []
    return [t for t in fields if torch.is_tensor(t)]


@torch.no_grad()
def states_at(model, context_len: int, batch: int = 1, seed: int = 0) -> list[Any]:
    """Per-layer states as after ``context_len`` tokens (see the module docstring)."""
    g = torch.Generator().manual_seed(seed)
    dev = next(model.parameters()).device
    windows = [getattr(b.mixer, "window", None) for b in model.blocks]
    prompt = min(context_len, max([w + 1 for w in windows if w] + [8]))
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt), generator=g).to(dev)
    states = model(ids).states
    out = []
    for s in states:
        if isinstance(s, KVCache):
            S = s.k.shape[1]
            window_full = any(w is not None and S >= w for w in windows) and S < prompt
            if not window_full and S < context_len:  # global attention: the cache holds every past token
                extra = context_len - S
                k = torch.cat([torch.randn(batch, extra, *s.k.shape[2:], generator=g).to(s.k), s.k], 1)
                v = torch.cat([torch.randn(batch, extra, *s.v.shape[2:], generator=g).to(s.v), s.v], 1)
            else:
                k, v = s.k, s.v
            s = KVCache(k=k, v=v, pos=torch.full_like(s.pos, context_len), seg=None, conv=s.conv)
        out.append(s)
    return out


@torch.no_grad()
def decode_latency(model, states: list[Any], steps: int = 20, warmup: int = 3) -> float:
    """Median seconds per decoded token, carrying the states (on CUDA: synchronised around each step)."""
    dev = next(model.parameters()).device
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    tok = torch.zeros(states_batch(states), 1, dtype=torch.long, device=dev)
    times = []
    for i in range(warmup + steps):
        sync()
        t0 = time.perf_counter()
        out = model(tok, states=states)
        sync()
        dt = time.perf_counter() - t0
        states = out.states
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        if i >= warmup:
            times.append(dt)
    return statistics.median(times)


def states_batch(states: list[Any]) -> int:
    for s in states:
        for t in _state_tensors(s):
            return t.shape[0]
    return 1


def decode_point(model, context_len: int, batch: int = 1, steps: int = 20, seed: int = 0) -> dict[str, Any]:
    """One (model, context length) point: median ms per decoded token and the carried state's size."""
    states = states_at(model, int(context_len), int(batch), seed)
    sec = decode_latency(model, states, steps=int(steps))
    nbytes = state_bytes(states)
    return {"ms_per_token": round(sec * 1e3, 3), "state_mb": round(nbytes / 2**20, 4), "state_bytes": nbytes}


def run_decode_bench(
    out_dir: Path,
    presets: str = "hawk-tiny,griffin-tiny,mqa-tiny",
    lengths: str = "1024,2048,4096,8192,16384,32768",
    batch: int = 1,
    steps: int = 20,
    threads: int = 1,
    check_prefill_len: int = 512,
    seed: int = 0,
) -> dict[str, Any]:
    from ..models import build_model

    torch.set_num_threads(int(threads))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = [s.strip() for s in str(presets).split(",") if s.strip()]
    Ls = [int(s) for s in str(lengths).split(",") if s.strip()]
    rows = []
    for name in names:
        torch.manual_seed(seed)
        model = build_model(name).eval()
        if check_prefill_len:  # a real prefill gives a state of the same size as the built one
            ids = torch.randint(0, model.config.vocab_size, (int(batch), int(check_prefill_len)))
            with torch.no_grad():
                real = state_bytes(model(ids).states)
            built = state_bytes(states_at(model, int(check_prefill_len), int(batch), seed))
            if real != built:
                raise AssertionError(f"{name}: built state {built} B != prefilled state {real} B")
        for L in Ls:
            states = states_at(model, L, int(batch), seed)
            sec = decode_latency(model, states, steps=int(steps))
            rows.append(
                {
                    "model": name,
                    "context": L,
                    "batch": int(batch),
                    "ms_per_token": round(sec * 1e3, 3),
                    "state_mb": round(state_bytes(states) / 2**20, 4),
                    "state_bytes": state_bytes(states),
                    "params": model.num_parameters(),
                    "threads": int(threads),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    (out / "config.json").write_text(
        json.dumps(
            {
                "presets": names,
                "lengths": Ls,
                "batch": batch,
                "steps": steps,
                "threads": threads,
                "torch": torch.__version__,
            },
            indent=2,
        )
        + "\n"
    )
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot_decode(rows, out / "decode.png")
    return {"rows": rows}


def plot_decode(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in dict.fromkeys(r["model"] for r in rows):
        rs = sorted((r for r in rows if r["model"] == name), key=lambda r: r["context"])
        axes[0].plot([r["context"] for r in rs], [r["ms_per_token"] for r in rs], marker="o", label=name)
        axes[1].plot([r["context"] for r in rs], [r["state_mb"] for r in rs], marker="o", label=name)
    for ax, ylabel in zip(axes, ("ms per decoded token (median)", "carried state (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend()
    axes[1].set_yscale("log")
    fig.suptitle("Decoding after a long context (batch 1, CPU)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--presets", default="hawk-tiny,griffin-tiny,mqa-tiny")
    p.add_argument("--lengths", default="1024,2048,4096,8192,16384,32768")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    run_decode_bench(Path(a.out), a.presets, a.lengths, a.batch, a.steps, a.threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
