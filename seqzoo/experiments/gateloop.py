"""GateLoop experiments (arXiv:2311.01927, §5.1; docs/gateloop.md): results are files (config, JSON/CSV, PNG).

* ``gateloop-memory-horizon``: the paper's ablation (Fig. 6/7): data-controlled vs fixed state transitions on the
  Memory Horizon task, test accuracy overall and per required memory span (bins of ``span_bin``), plus the mean
  transition magnitude |a| at reset tokens vs elsewhere per layer (Fig. 5). Defaults are the CPU-sized setting
  of docs/gateloop.md (L = 256, 3 resets, 2000/500 samples); ``--set seq_len=1024 steps=18900 warmup_steps=10000`` is
  the paper's full setting. Runs go through the sweep runner (``runs/<hash of the whole configuration>``: a changed
  setting trains anew, an unchanged rerun trains nothing); ``procs`` runs them in parallel, one thread each.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from ..plots import plot_lines
from .launcher import Axis, GridExperiment, Settings, register_grid

VARIANTS = {  # name -> GateLoop mixer kwargs
    "data": {"transition": "data"},
    "fixed_zeros": {"transition": "fixed", "fixed_init": "zeros"},
    "fixed_lru": {"transition": "fixed", "fixed_init": "lru", "magnitude": "exp_exp", "phase": "exp"},
    "fixed_s4d": {"transition": "fixed", "fixed_init": "s4d_lin"},
    "real": {"transition": "real"},
}


def span_accuracy(correct, spans, span_bin: int):
    """Accuracy per span bin [b·span_bin, (b+1)·span_bin) -> list of (bin_start, accuracy, count)."""
    import torch

    b = torch.div(spans, span_bin, rounding_mode="floor").flatten()
    c = correct.flatten().double()
    n_bins = int(b.max()) + 1
    count = torch.bincount(b, minlength=n_bins)
    hits = torch.bincount(b, weights=c, minlength=n_bins)
    return [(i * span_bin, float(hits[i] / count[i]), int(count[i])) for i in range(n_bins) if count[i] > 0]


def mh_model(task, variant: str):
    """The ``gateloop-mh`` preset with the transition of ``variant`` (a key of ``VARIANTS``)."""
    from ..models import build_model

    mixer = {"transition_weight_decay": None, **VARIANTS[variant]}
    return build_model("gateloop-mh", vocab_size=task.vocab_size, mixer_kwargs={"gateloop": mixer})


def mh_run(config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Sweep run function: train as ``train_run`` does (resumable), then score the held-out "test" split
    (``test_size`` samples, every position) overall and per required memory span, and measure the mean transition
    magnitude |a| at reset tokens vs elsewhere per layer (paper Fig. 5). ``config["span_bin"]`` sets the bins."""
    import torch

    from ..sweep.train_run import fit

    model, task, metrics = fit(config, run_dir)
    x, y, spans = task.build_with_spans(task.test_size, int(config["seed"]), "test")
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
    return {
        **metrics,
        "test_accuracy": float(correct.double().mean()),
        "span_accuracy": span_accuracy(correct, spans, int(config["span_bin"])),
        "mean_mag_at_reset": [m[0] / max(m[1], 1) for m in mags.values()],
        "mean_mag_elsewhere": [m[2] / max(m[3], 1) for m in mags.values()],
    }


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


def _settings(opts: dict[str, Any]) -> Settings:
    """The Memory Horizon task, the paper's training protocol (AdamW betas 0.9/0.98, cosine to 0, clip 1) and the
    ``gateloop-mh`` model with each variant's transition (``mh_model``)."""
    task = {
        "name": "memory_horizon",
        "seq_len": opts["seq_len"],
        "n_resets": opts["n_resets"],
        "train_size": opts["train_size"],
        "test_size": opts["test_size"],
    }
    train = {
        "steps": opts["steps"],
        "batch_size": opts["batch_size"],
        "lr": opts["lr"],
        "warmup_steps": opts["warmup_steps"],
        "min_lr_ratio": 0.0,
        "weight_decay": opts["weight_decay"],
        "betas": [0.9, 0.98],
        "grad_clip": 1.0,
        "eval_every": opts["eval_every"],
        "eval_samples": opts["eval_samples"],
        "eval_batch_size": 64,
        "device": opts["device"],
        "precision": "fp32",
    }
    models = {
        v: {"model": {"builder": "seqzoo.experiments.gateloop:mh_model", "args": {"variant": v}}} for v in VARIANTS
    }
    info = {"task": task, "train": train, "span_bin": opts["span_bin"]}
    return Settings(
        base={"task": task, "train": train, "span_bin": opts["span_bin"]}, points={"variant": models}, info=info
    )


def _report(out: Path, opts: dict[str, Any], settings: Settings, records: list, rows: list) -> dict[str, Any]:
    """results.csv (magnitudes per layer as one cell), span_accuracy.csv (a row per span bin) and the figure."""
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "seed", "test_accuracy", "valid_accuracy", "train_seconds"]
                   + ["mean_mag_at_reset", "mean_mag_elsewhere"])  # fmt: skip
        for r in rows:
            w.writerow(
                [r["variant"], r["seed"], f"{r['test_accuracy']:.4f}", r["valid_accuracy"], r["train_seconds"]]
                + [" ".join(f"{m:.3f}" for m in r[k]) for k in ("mean_mag_at_reset", "mean_mag_elsewhere")]
            )
    with open(out / "span_accuracy.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["variant", "seed", "span_bin_start", "accuracy", "count"])
        for r in rows:
            for b, a, n in r["span_accuracy"]:
                w.writerow([r["variant"], r["seed"], b, f"{a:.4f}", n])
    title = f"Memory Horizon, L={opts['seq_len']}, {opts['steps']} steps (paper Fig. 7)"
    _plot(rows, out / "span_accuracy.png", title)
    return {"results": [{k: r[k] for k in ("variant", "seed", "test_accuracy")} for r in rows]}


MEMORY_HORIZON = register_grid(
    GridExperiment(
        name="gateloop-memory-horizon",
        description="GateLoop ablation: data-controlled vs fixed transitions on Memory Horizon, accuracy vs span",
        options={
            "variants": "data,fixed_zeros,fixed_lru",
            "seeds": "0",
            "seq_len": 256,
            "n_resets": 3,
            "train_size": 2000,
            "test_size": 500,
            "steps": 3000,
            "batch_size": 32,
            "lr": 2.5e-3,
            "warmup_steps": 300,
            "weight_decay": 0.05,
            "eval_every": 500,
            "eval_samples": 128,
            "span_bin": 10,
            "procs": 1,
            "device": "auto",
        },
        axes=(Axis("seed", "seeds", int), Axis("variant", "variants", str, tuple(VARIANTS))),
        settings=_settings,
        columns=(
            ("variant", "labels.variant"),
            ("seed", "labels.seed"),
            ("seq_len", "config.task.seq_len"),
            *((k, f"config.train.{k}") for k in ("steps", "batch_size", "lr")),
            *((k, f"metrics.{k}") for k in ("test_accuracy", "valid_accuracy", "valid_loss")),
            ("train_seconds", "metrics.train_s"),
            *((k, f"metrics.{k}") for k in ("span_accuracy", "mean_mag_at_reset", "mean_mag_elsewhere", "params")),
            ("run", "key"),
        ),
        fn="seqzoo.experiments.gateloop:mh_run",
        label_order=("variant", "seed"),
        report=_report,
    )
)
