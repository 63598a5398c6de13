"""GateLoop experiments (arXiv:2311.01927, §5.1; docs/gateloop.md): results are files (config, JSON/CSV, PNG).

* ``gateloop-memory-horizon``: the paper's ablation (Fig. 6/7): data-controlled vs fixed state transitions on the
  Memory Horizon task, test accuracy overall and per required memory span (bins of ``span_bin``), plus the mean
  transition magnitude |a| at reset tokens vs elsewhere per layer (Fig. 5). Defaults are the CPU-sized setting
  of docs/gateloop.md (L = 256, 3 resets, 2000/500 samples); ``--set seq_len=1024 steps=18900 warmup_steps=10000`` is
  the paper's full setting. Variants run in parallel processes (one thread each).
"""

from __future__ import annotations

import csv
import json
import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

from ..plots import plot_lines
from . import register_experiment

VARIANTS = {  # name -> GateLoop mixer kwargs
    "data": {"transition": "data"},
    "fixed_zeros": {"transition": "fixed", "fixed_init": "zeros"},
    "fixed_lru": {"transition": "fixed", "fixed_init": "lru", "magnitude": "exp_exp", "phase": "exp"},
    "fixed_s4d": {"transition": "fixed", "fixed_init": "s4d_lin"},
    "real": {"transition": "real"},
}


def _list(v, cast=str) -> list:
    if isinstance(v, (list, tuple)):
        return [cast(s) for s in v]
    return [cast(s.strip()) for s in str(v).split(",") if s.strip()]


def span_accuracy(correct, spans, span_bin: int):
    """Accuracy per span bin [b·span_bin, (b+1)·span_bin) -> list of (bin_start, accuracy, count)."""
    import torch

    b = torch.div(spans, span_bin, rounding_mode="floor").flatten()
    c = correct.flatten().double()
    n_bins = int(b.max()) + 1
    count = torch.bincount(b, minlength=n_bins)
    hits = torch.bincount(b, weights=c, minlength=n_bins)
    return [(i * span_bin, float(hits[i] / count[i]), int(count[i])) for i in range(n_bins) if count[i] > 0]


def _run(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.set_num_threads(job["threads"])
    from ..models import build_model
    from ..tasks import build_task
    from ..train import TrainConfig, train

    out = Path(job["out_dir"])
    final = out / "final.json"
    if final.exists():
        return json.loads(final.read_text())
    task = build_task(
        "memory_horizon",
        seq_len=job["seq_len"],
        n_resets=job["n_resets"],
        train_size=job["train_size"],
        test_size=job["test_size"],
    )
    torch.manual_seed(job["seed"])
    mixer = {"transition_weight_decay": None, **VARIANTS[job["variant"]]}
    model = build_model("gateloop-mh", vocab_size=task.vocab_size, mixer_kwargs={"gateloop": mixer})
    cfg = TrainConfig(
        steps=job["steps"],
        batch_size=job["batch_size"],
        lr=job["lr"],
        warmup_steps=job["warmup_steps"],
        min_lr_ratio=0.0,
        weight_decay=job["weight_decay"],
        betas=(0.9, 0.98),
        grad_clip=1.0,
        eval_every=job["eval_every"],
        eval_samples=job["eval_samples"],
        eval_batch_size=64,
        out_dir=str(out),
        seed=job["seed"],
        device=job["device"],
        precision="fp32",
        progress=False,
    )
    t0 = time.time()
    metrics = train(model, task, cfg)
    train_s = time.time() - t0
    # held-out test set: test_size samples of the "test" split, all positions scored
    x, y, spans = task.build_with_spans(task.test_size, job["seed"], "test")
    model.eval()
    device = next(model.parameters()).device
    correct, mags = [], {i: [0.0, 0, 0.0, 0] for i in range(len(model.blocks))}
    captured = {}
    hooks = [
        blk.mixer.register_forward_hook(lambda mod, args, kw_out, i=i: captured.__setitem__(i, args[0]))
        for i, blk in enumerate(model.blocks)
    ]
    with torch.no_grad():
        for i in range(0, x.shape[0], 50):
            xb = x[i : i + 50].to(device)
            logits = model(xb).logits
            correct.append(logits.argmax(-1).cpu() == y[i : i + 50])
            is_reset = xb == task.reset_id
            for li, blk in enumerate(model.blocks):  # mean |a| at reset tokens vs elsewhere (paper Fig. 5)
                mag = blk.mixer.gates(captured[li])[0].exp().mean(-1)  # (B, T): mean over channels
                mags[li][0] += float(mag[is_reset].sum())
                mags[li][1] += int(is_reset.sum())
                mags[li][2] += float(mag[~is_reset].sum())
                mags[li][3] += int((~is_reset).sum())
    for h in hooks:
        h.remove()
    correct = torch.cat(correct)
    result = {
        **{k: job[k] for k in ("variant", "seed", "seq_len", "steps", "batch_size", "lr")},
        "test_accuracy": float(correct.double().mean()),
        "valid_accuracy": metrics.get("valid_accuracy"),
        "valid_loss": metrics.get("valid_loss"),
        "train_seconds": round(train_s, 1),
        "span_accuracy": span_accuracy(correct, spans, job["span_bin"]),
        "mean_mag_at_reset": [m[0] / max(m[1], 1) for m in mags.values()],
        "mean_mag_elsewhere": [m[2] / max(m[3], 1) for m in mags.values()],
        "params": model.num_parameters(),
    }
    final.write_text(json.dumps(result, indent=2) + "\n")
    return result


def _plot(rows: list[dict], path: Path, title: str) -> None:
    """Accuracy vs required memory span (bins with at least 50 scored positions), one line per run."""
    series = {
        f"{r['variant']} (seed {r['seed']}): {r['test_accuracy']:.3f}": (
            [b for b, _, n in r["span_accuracy"] if n >= 50],
            [a for _, a, n in r["span_accuracy"] if n >= 50],
        )
        for r in rows
    }
    plot_lines(
        series,
        path,
        xlabel="required memory span (numbers since the last reset; bins of 10)",
        ylabel="test accuracy",
        title=title,
    )


@register_experiment(
    "gateloop-memory-horizon",
    "GateLoop ablation: data-controlled vs fixed transitions on Memory Horizon, accuracy vs span",
)
def memory_horizon(
    out_dir: Path,
    variants="data,fixed_zeros,fixed_lru",
    seeds="0",
    seq_len: int = 256,
    n_resets: int = 3,
    train_size: int = 2000,
    test_size: int = 500,
    steps: int = 3000,
    batch_size: int = 32,
    lr: float = 2.5e-3,
    warmup_steps: int = 300,
    weight_decay: float = 0.05,
    eval_every: int = 500,
    eval_samples: int = 128,
    span_bin: int = 10,
    parallel: int = 3,
    threads: int = 1,
    device: str = "auto",
) -> dict[str, Any]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    variants, seeds = _list(variants), _list(seeds, int)
    for v in variants:
        if v not in VARIANTS:
            raise ValueError(f"unknown variant {v!r}; expected some of {sorted(VARIANTS)}")
    settings = {
        "seq_len": int(seq_len),
        "n_resets": int(n_resets),
        "train_size": int(train_size),
        "test_size": int(test_size),
        "steps": int(steps),
        "batch_size": int(batch_size),
        "lr": float(lr),
        "warmup_steps": int(warmup_steps),
        "weight_decay": float(weight_decay),
        "eval_every": int(eval_every),
        "eval_samples": int(eval_samples),
        "span_bin": int(span_bin),
        "threads": int(threads),
        "device": device,
    }
    (out / "config.json").write_text(
        json.dumps(
            {"variants": variants, "seeds": seeds, **settings, "model": "gateloop-mh", "parallel": int(parallel)},
            indent=2,
        )
        + "\n"
    )
    jobs = [
        {**settings, "variant": v, "seed": s, "out_dir": str(out / f"{v}-seed{s}")} for s in seeds for v in variants
    ]
    if int(parallel) > 1 and len(jobs) > 1:
        with mp.get_context("spawn").Pool(min(int(parallel), len(jobs))) as pool:
            rows = pool.map(_run, jobs)
    else:
        rows = [_run(j) for j in jobs]
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "variant",
                "seed",
                "test_accuracy",
                "valid_accuracy",
                "train_seconds",
                "mean_mag_at_reset",
                "mean_mag_elsewhere",
            ]
        )
        for r in rows:
            w.writerow(
                [
                    r["variant"],
                    r["seed"],
                    f"{r['test_accuracy']:.4f}",
                    r["valid_accuracy"],
                    r["train_seconds"],
                    " ".join(f"{m:.3f}" for m in r["mean_mag_at_reset"]),
                    " ".join(f"{m:.3f}" for m in r["mean_mag_elsewhere"]),
                ]
            )
    with open(out / "span_accuracy.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "seed", "span_bin_start", "accuracy", "count"])
        for r in rows:
            for b, a, n in r["span_accuracy"]:
                w.writerow([r["variant"], r["seed"], b, f"{a:.4f}", n])
    _plot(rows, out / "span_accuracy.png", f"Memory Horizon, L={seq_len}, {steps} steps (paper Fig. 7)")
    return {"results": [{k: r[k] for k in ("variant", "seed", "test_accuracy")} for r in rows]}
