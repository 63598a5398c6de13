"""Recurrent Memory Transformer experiments (Bulatov et al., arXiv:2207.06881, arXiv:2304.11062), CPU-sized.

* ``rmt-memory``: a memory task with RMT vs the same backbone with zero memory tokens (does memory carry
  the fact across segments?).
* ``rmt-curriculum``: naive training at N segments vs a curriculum 1 -> N (fixed per stage, or mixing all
  previous lengths), evaluated at 1 ... 2N segments (generalisation to more segments than trained).
* ``rmt-resources``: the AAAI appendix Fig. 10 setting at CPU scale: peak memory and time per training /
  validation iteration vs input length for RMT (two segment sizes) and full attention on the whole input.

Each writes ``config.json``, metrics (JSONL/CSV) and a PNG plot into the output folder.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import register_experiment


def _items(v: Any, cast=str) -> list:
    """A --set value given as "a,b", a single scalar, or a JSON list."""
    if isinstance(v, (list, tuple)):
        return [cast(x) for x in v]
    return [cast(x.strip()) for x in str(v).split(",") if x.strip()]


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _task(task: str, n_segments: int, segment_size: int, data_dir: str | None, head: str = "class"):
    from ..tasks.babi import BabiMemory

    return BabiMemory(task, n_segments, segment_size, head=head, data_dir=data_dir)


def _model(vocab_size: int, m: int, L: int, kind: str = "rmt-tiny", **rmt):
    from ..models.presets.rmt import build_rmt

    return build_rmt(kind, vocab_size=vocab_size, rmt_overrides={"num_mem_tokens": m, "segment_size": L, **rmt})


@register_experiment(
    "rmt-memory", "RMT on a bAbI memory task with and without memory tokens (E1/E2)", aliases=("rmt_memory",)
)
def rmt_memory(
    out_dir: Path,
    task: str = "memorize",
    n_segments: int = 3,
    segment_size: int = 16,
    mem_sizes: str = "4,0",
    steps: int = 300,
    batch_size: int = 32,
    lr: float = 1e-3,
    eval_samples: int = 500,
    seed: int = 0,
    threads: int = 1,
    data_dir: str | None = None,
    head: str = "class",
) -> dict:
    """``head="class"``: encoder RMT (rmt-tiny) with a 6-way head; ``head="generate"``: causal read/write RMT
    (rmt-tiny-decoder) generating the answer, scored by exact match of the answer tokens and eos."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from ..train.curriculum import (
        Curriculum,
        OptimConfig,
        evaluate_segments,
        train_curriculum,
    )

    torch.set_num_threads(int(threads))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    backbone = "rmt-tiny" if head == "class" else "rmt-tiny-decoder"
    cfg = {
        "task": task,
        "n_segments": n_segments,
        "segment_size": segment_size,
        "mem_sizes": mem_sizes,
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "eval_samples": eval_samples,
        "seed": seed,
        "backbone": backbone,
        "head": head,
    }
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    t = _task(task, n_segments, segment_size, data_dir, head=head)
    test_samples = t.build_samples(eval_samples, seed, "test")
    ceiling = t.no_memory_ceiling(test_samples)
    rows = []
    for m in _items(mem_sizes, int):
        torch.manual_seed(seed)
        extra = {"pool": "cls"} if head == "class" else {}
        model = _model(t.vocab_size, m, segment_size, kind=backbone, **extra)
        res = train_curriculum(
            model,
            t,
            Curriculum.naive(n_segments, steps),
            OptimConfig(lr=lr, batch_size=batch_size, warmup_steps=min(100, steps // 5)),
            eval_every=max(50, steps // 4),
            eval_samples=200,
            seed=seed,
            out_dir=out_dir / f"m{m}",
        )
        ev = evaluate_segments(model, t, n_segments, eval_samples, seed, "test")
        rows.append(
            {
                "task": task,
                "head": head,
                "n_segments": n_segments,
                "segment_size": segment_size,
                "num_mem_tokens": m,
                "steps": res["total_steps"],
                "test_accuracy": ev["accuracy"],
                "test_loss": ev["loss"],
                "no_memory_ceiling": round(ceiling, 4),
                "chance": round(1 / 6, 4),
                "train_time_s": res["time_s"],
                "seed": seed,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    _write_csv(out_dir / "results.csv", rows)
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.bar([f"m={r['num_mem_tokens']}" for r in rows], [r["test_accuracy"] for r in rows], color="tab:blue")
    ax.axhline(ceiling, color="tab:red", ls="--", label=f"no-memory ceiling {ceiling:.2f}")
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("test accuracy")
    ax.set_title(f"RMT {task} ({backbone}), N={n_segments}, L={segment_size}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "accuracy.png", dpi=120)
    plt.close(fig)
    return {"results": rows}


@register_experiment(
    "rmt-curriculum",
    "RMT curriculum (fixed / mixed) vs naive training; accuracy vs segments (E4/E5)",
    aliases=("rmt_curriculum",),
)
def rmt_curriculum(
    out_dir: Path,
    task: str = "detect",
    n_train: int = 4,
    segment_size: int = 16,
    mem: int = 4,
    total_steps: int = 800,
    methods: str = "naive,fixed,mixed",
    eval_max: int | None = None,
    batch_size: int = 32,
    lr: float = 1e-3,
    eval_samples: int = 300,
    seeds: str = "0",
    threads: int = 1,
    data_dir: str | None = None,
) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from ..train.curriculum import (
        Curriculum,
        OptimConfig,
        evaluate_segments,
        train_curriculum,
    )

    torch.set_num_threads(int(threads))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    eval_max = int(eval_max or 2 * n_train)
    cfg = {
        "task": task,
        "n_train": n_train,
        "segment_size": segment_size,
        "mem": mem,
        "total_steps": total_steps,
        "methods": methods,
        "eval_max": eval_max,
        "batch_size": batch_size,
        "lr": lr,
        "eval_samples": eval_samples,
        "seeds": seeds,
        "backbone": "rmt-tiny",
    }
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    t = _task(task, n_train, segment_size, data_dir)
    rows = []
    for seed in _items(seeds, int):
        for method in _items(methods):
            if method == "naive":
                cur = Curriculum.naive(n_train, total_steps)
            elif method in ("fixed", "mixed"):
                cur = Curriculum(
                    stages=list(range(1, n_train + 1)),
                    mix_previous=method == "mixed",
                    steps_per_stage=total_steps // n_train,
                )
            else:
                raise ValueError(f"methods must be among naive, fixed, mixed; got {method!r}")
            torch.manual_seed(seed)
            model = _model(t.vocab_size, mem, segment_size, pool="cls")
            res = train_curriculum(
                model,
                t,
                cur,
                OptimConfig(lr=lr, batch_size=batch_size, warmup_steps=50),
                eval_every=50,
                eval_samples=200,
                seed=seed,
                out_dir=out_dir / f"{method}-s{seed}",
            )
            for n_eval in range(1, eval_max + 1):
                ev = evaluate_segments(model, t, n_eval, eval_samples, seed, "test")
                ceil = t.with_segments(n_eval).no_memory_ceiling(
                    t.with_segments(n_eval).build_samples(eval_samples, seed, "test")
                )
                rows.append(
                    {
                        "task": task,
                        "method": method,
                        "seed": seed,
                        "n_train": n_train,
                        "n_eval": n_eval,
                        "segment_size": segment_size,
                        "num_mem_tokens": mem,
                        "accuracy": ev["accuracy"],
                        "no_memory_ceiling": round(ceil, 4),
                        "train_steps": res["total_steps"],
                        "train_time_s": res["time_s"],
                        "stage_steps": ";".join(f"{s['stage']}:{s['steps']}" for s in res["stages"]),
                    }
                )
            print(
                json.dumps({k: rows[-1][k] for k in ("method", "seed", "train_steps", "stage_steps")}),
                [r["accuracy"] for r in rows if r["method"] == method and r["seed"] == seed],
                flush=True,
            )
            _write_csv(out_dir / "results.csv", rows)
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for method in _items(methods):
        pts = {}
        for r in rows:
            if r["method"] == method:
                pts.setdefault(r["n_eval"], []).append(r["accuracy"])
        xs = sorted(pts)
        ax.plot(xs, [sum(pts[x]) / len(pts[x]) for x in xs], marker="o", label=method)
    ceil_pts = {}
    for r in rows:
        ceil_pts.setdefault(r["n_eval"], r["no_memory_ceiling"])
    xs = sorted(ceil_pts)
    ax.plot(xs, [ceil_pts[x] for x in xs], ls="--", color="gray", label="no-memory ceiling")
    ax.axvline(n_train, color="k", lw=0.8, ls=":")
    ax.set_xlabel("segments at evaluation")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"RMT {task}: trained on N={n_train}, L={segment_size}, m={mem}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "accuracy_vs_segments.png", dpi=120)
    plt.close(fig)
    return {"results": rows}


# ---------------------------------------------------------------- resources (Fig. 10 at CPU scale)
_PROBE = r"""
import json, resource, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
method, T, L, m, B, d, layers, iters = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
from seqzoo.models import LanguageModel, ModelConfig
from seqzoo.models.rmt import RMT, RMTConfig
torch.manual_seed(0)
cfg = ModelConfig(vocab_size=256, d_model=d, n_layers=layers, pattern=["attention"], mixer_kwargs={"attention": {"n_heads": 4}}, mlp="gelu")
lm = LanguageModel(cfg)
model = lm if method == "full" else RMT(lm, RMTConfig(num_mem_tokens=m, segment_size=L))
x = torch.randint(0, 256, (B, T)); y = torch.randint(0, 256, (B, T))
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
def fwd(train):
    if method == "full":
        return lm(x, labels=y).loss
    return model(x, labels=y, return_logits=False).loss
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
with torch.no_grad():
    fwd(False)  # warm-up
base = rss_mb()
t0 = time.perf_counter()
with torch.no_grad():
    for _ in range(iters):
        fwd(False)
val_s = (time.perf_counter() - t0) / iters
val_peak = peak_mb()
def step():
    loss = fwd(True); opt.zero_grad(); loss.backward(); opt.step()
step()
t0 = time.perf_counter()
for _ in range(iters):
    step()
train_s = (time.perf_counter() - t0) / iters
print(json.dumps({"val_s": val_s, "train_s": train_s, "base_rss_mb": base, "val_peak_rss_mb": val_peak, "train_peak_rss_mb": peak_mb()}))
"""


@register_experiment(
    "rmt-resources",
    "RMT vs full attention: peak memory and time per train/valid iteration vs length",
    aliases=("rmt_resources",),
)
def rmt_resources(
    out_dir: Path,
    lengths: str = "256,512,1024,2048",
    segment_sizes: str = "128,256",
    mem: int = 8,
    batch_size: int = 4,
    d_model: int = 64,
    n_layers: int = 2,
    iters: int = 2,
    threads: int = 1,
) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = {
        "lengths": lengths,
        "segment_sizes": segment_sizes,
        "mem": mem,
        "batch_size": batch_size,
        "d_model": d_model,
        "n_layers": n_layers,
        "iters": iters,
        "threads": threads,
        "device": "cpu",
        "dtype": "float32",
        "memory_metric": "process peak RSS (ru_maxrss) of a fresh process per point, minus its RSS before the timed "
        "iterations (weights, data, one warm-up forward)",
    }
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    methods = [("full", 0)] + [(f"rmt-L{L}", L) for L in _items(segment_sizes, int)]
    rows = []
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for T in _items(lengths, int):
        for name, L in methods:
            method = "full" if name == "full" else "rmt"
            args = [
                sys.executable,
                "-c",
                _PROBE,
                str(threads),
                method,
                str(T),
                str(L or 1),
                str(mem),
                str(batch_size),
                str(d_model),
                str(n_layers),
                str(iters),
            ]
            t0 = time.time()
            proc = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
            if proc.returncode != 0:
                row = {"method": name, "T": T, "error": proc.stderr.strip().splitlines()[-1][:200]}
            else:
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                row = {
                    "method": name,
                    "T": T,
                    "segment_size": L or T,
                    "train_iter_s": round(res["train_s"], 4),
                    "valid_iter_s": round(res["val_s"], 4),
                    "train_peak_mb": round(res["train_peak_rss_mb"] - res["base_rss_mb"], 1),
                    "valid_peak_mb": round(res["val_peak_rss_mb"] - res["base_rss_mb"], 1),
                    "base_rss_mb": round(res["base_rss_mb"], 1),
                    "wall_s": round(time.time() - t0, 1),
                }
            rows.append(row)
            print(json.dumps(row), flush=True)
            with open(out_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
    ok = [r for r in rows if "error" not in r]
    if ok:
        _write_csv(out_dir / "results.csv", ok)
        fig, axes = plt.subplots(1, 4, figsize=(15, 3.4))
        for key, ax in zip(("train_iter_s", "valid_iter_s", "train_peak_mb", "valid_peak_mb"), axes):
            for name, _ in methods:
                pts = [(r["T"], r[key]) for r in ok if r["method"] == name]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=name)
            ax.set_xlabel("input length T (tokens)")
            ax.set_title(key)
            ax.set_xscale("log", base=2)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"RMT vs full attention on CPU (d={d_model}, {n_layers} layers, batch {batch_size}, m={mem})")
        fig.tight_layout()
        fig.savefig(out_dir / "resources.png", dpi=120)
        plt.close(fig)
    return {"results": rows}
