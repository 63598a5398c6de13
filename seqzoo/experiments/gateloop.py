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
import json
from pathlib import Path
from typing import Any

from ..plots import plot_lines
from ..sweep import RunSpec, choose
from . import register_experiment
from ._runs import as_ints, as_list, run_specs

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
    procs: int = 1,
    device: str = "auto",
) -> dict[str, Any]:
    """Runs go through the sweep runner (one folder per configuration hash under ``runs/``; ``procs`` processes)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    variants, seeds = choose(as_list(variants), set(VARIANTS), "variants"), as_ints(seeds)
    task = {
        "name": "memory_horizon",
        "seq_len": int(seq_len),
        "n_resets": int(n_resets),
        "train_size": int(train_size),
        "test_size": int(test_size),
    }
    train = {
        "steps": int(steps),
        "batch_size": int(batch_size),
        "lr": float(lr),
        "warmup_steps": int(warmup_steps),
        "min_lr_ratio": 0.0,
        "weight_decay": float(weight_decay),
        "betas": [0.9, 0.98],
        "grad_clip": 1.0,
        "eval_every": int(eval_every),
        "eval_samples": int(eval_samples),
        "eval_batch_size": 64,
        "device": device,
        "precision": "fp32",
    }
    (out / "config.json").write_text(
        json.dumps(
            {"variants": variants, "seeds": seeds, "task": task, "train": train, "span_bin": int(span_bin)}, indent=2
        )
        + "\n"
    )
    specs = [
        RunSpec.of(
            "seqzoo.experiments.gateloop:mh_run",
            {
                "seed": s,
                "model": {"builder": "seqzoo.experiments.gateloop:mh_model", "args": {"variant": v}},
                "task": task,
                "train": train,
                "span_bin": int(span_bin),
            },
            {"variant": v, "seed": s},
        )
        for s in seeds
        for v in variants
    ]
    rows = []
    for r in run_specs(out, specs, int(procs)):
        m = r["metrics"]
        rows.append(
            {
                **r["labels"],
                "seq_len": task["seq_len"],
                **{k: train[k] for k in ("steps", "batch_size", "lr")},
                "test_accuracy": m["test_accuracy"],
                "valid_accuracy": m["valid_accuracy"],
                "valid_loss": m["valid_loss"],
                "train_seconds": m["train_s"],
                "span_accuracy": m["span_accuracy"],
                "mean_mag_at_reset": m["mean_mag_at_reset"],
                "mean_mag_elsewhere": m["mean_mag_elsewhere"],
                "params": m["params"],
                "run": r["key"],
            }
        )
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
