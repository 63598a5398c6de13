"""``seqzoo experiment mad``: the MAD protocol (Poli et al., arXiv:2403.17844; mad-lab's
``benchmark.py`` and task configurations) over the zoo's models.

For each task (``tasks/mad/``) MAD trains at its baseline setting and at every change of one variable away from it
(vocabulary size, sequence length, training-set size, noise fraction, tokens to copy: ``SETTINGS``), each at every
point of a 3 × 2 grid of learning rate (1e-4, 5e-4, 1e-3) and weight decay (0, 0.1), with AdamW, batch 128, a cosine
schedule from the rate down to 1e-6 over the epochs (no warm-up), on a fixed training set for 200 epochs, and scores
accuracy on 1,280 test samples. A model is 2 blocks of width 128 (a sequence mixer and an MLP each). MAD keeps the
best grid point per setting and reports, per task, the mean over the settings (the task's MAD score).

Here: the zoo's models (``zoo_models.py``: attention, the reference, and the seed families mLSTM, xLSTM, GateLoop,
Hawk, Griffin), attention with MAD's 16 heads; one run per (model, task, setting, rate, weight decay, seed) through
the sweep runner, keyed by its whole configuration, skipped when done and resumed when cut. Seeds are merged per grid
point; a setting reports the grid point whose mean accuracy over the seeds is best (ties: the smaller rate, then the
smaller decay) with the mean, min and max over the seeds there; a task's score is the mean over its settings, with
min and max over the seeds of the same mean per seed. Compression trains the autoencoder of ``mad_models.py``.
A run whose loss diverges scores 0 (``zoology_mqar_run.py``).

Written under ``--out``: ``runs/<key>/``, ``all_runs.*`` (every run), ``by_grid.*`` (seeds merged per grid point),
``results.*`` (the best grid point per setting), ``scores.*`` (MAD score per model and task), ``report.md`` and
``config.json``. Every option is a ``--set`` key; the defaults are MAD's protocol (docs/mad.md gives CPU-sized ones).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..sweep import RunSpec, aggregate, choose
from ..sweep.merge import markdown_table, spread
from . import register_experiment
from ._runs import as_ints, as_list, run_specs, write_rows
from .zoology_mqar_run import FN

MODELS = ("attention", "mlstm", "xlstm", "gateloop", "hawk", "griffin")
MAD_LRS = "1e-4,5e-4,1e-3"
MAD_WEIGHT_DECAYS = "0,0.1"
TRAIN_SIZES = [6400, 3200, 1600, 800]
# task label -> (registered task, baseline arguments, the changes: one argument varied at a time), as mad-lab's
# configs/tasks/*.yml (num_train_examples -> train_size, num_tokens_to_copy as is)
SETTINGS: dict[str, tuple[str, dict[str, Any], dict[str, list]]] = {
    "recall": (
        "mad-recall",
        {"vocab_size": 16, "seq_len": 128, "train_size": 12_800},
        {"vocab_size": [32, 64, 128], "seq_len": [256, 512, 1024], "train_size": TRAIN_SIZES},
    ),
    "fuzzy-recall": (
        "mad-fuzzy-recall",
        {"vocab_size": 16, "seq_len": 128, "train_size": 12_800, "k_motif_size": 3, "v_motif_size": 3},
        {"vocab_size": [32, 64, 128], "seq_len": [256, 512, 1024], "train_size": TRAIN_SIZES},
    ),
    "noisy-recall": (
        "mad-noisy-recall",
        {"vocab_size": 32, "noise_vocab_size": 16, "seq_len": 128, "train_size": 12_800, "frac_noise": 0.2},
        {
            "vocab_size": [48, 80, 144],
            "seq_len": [256, 512, 1024],
            "train_size": TRAIN_SIZES,
            "frac_noise": [0.4, 0.6, 0.8],
        },
    ),
    "selective-copy": (
        "mad-selective-copy",
        {"vocab_size": 16, "seq_len": 256, "num_tokens_to_copy": 16, "train_size": 12_800},
        {
            "vocab_size": [32, 64, 128],
            "seq_len": [512, 1024],
            "train_size": TRAIN_SIZES,
            "num_tokens_to_copy": [32, 64, 96],
        },
    ),
    "compression": (
        "mad-compression",
        {"vocab_size": 16, "seq_len": 32, "train_size": 12_800},
        {"vocab_size": [32, 64, 128], "seq_len": [64, 128, 256], "train_size": TRAIN_SIZES},
    ),
    "memorization": (
        "mad-memorization",
        {"vocab_size": 256, "seq_len": 32, "train_size": 256},
        {"vocab_size": [512, 1024, 2048, 4096, 8192]},
    ),
}


def parse_overrides(text: str, labels: list[str]) -> dict[str, dict[str, Any]]:
    """``"seq_len=32,memorization.vocab_size=64"`` -> per task label, the task arguments to replace in every setting
    (a bare key applies to every chosen task). Values are ints where they read as ints, else floats."""
    out: dict[str, dict[str, Any]] = {label: {} for label in labels}
    for item in as_list(text):
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"experiment mad: task_args item {item!r} must be key=value or task.key=value")
        label, _, arg = key.rpartition(".")
        if label and label not in SETTINGS:
            raise InputError(f"experiment mad: task_args names unknown task {label!r}; tasks: {', '.join(SETTINGS)}")
        try:
            parsed: Any = int(value)
        except ValueError:
            try:
                parsed = float(value)
            except ValueError:
                raise InputError(f"experiment mad: task_args {key}={value!r} must be a number") from None
        for target in [label] if label else labels:
            if target in out:
                out[target][arg] = parsed
    return out


def task_settings(label: str, which: str, overrides: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(setting name, task arguments)`` of task ``label``: the baseline, and with ``which="all"`` every change.
    ``overrides`` replace arguments in every setting; settings that become the same are kept once."""
    name, base, changes = SETTINGS[label]
    out = [("baseline", {**base, **overrides})]
    if which == "all":
        out += [(f"{k}={v}", {**base, k: v, **overrides}) for k, values in changes.items() for v in values]
    unique: dict[str, tuple[str, dict[str, Any]]] = {}
    for setting, args in out:
        unique.setdefault(json.dumps(args, sort_keys=True), (setting, {"name": name, **args}))
    return list(unique.values())


def model_entry(kind: str, task, d_model: int, n_layers: int, attention_heads: int) -> dict[str, Any]:
    """The run's ``model`` entry: the zoo model ``kind`` for ``task``, inside the autoencoder for compression."""
    from .zoo_models import model_spec

    spec = model_spec(kind, task.vocab_size, d_model, n_layers, task.seq_len, attention_heads)
    if getattr(task, "needs_autoencoder", False):
        return {"builder": "seqzoo.experiments.mad_models:compression_autoencoder", "args": {"encoder": spec}}
    return spec


def train_config(
    task, lr: float, wd: float, epochs: int, batch_size: int, min_lr: float, test_samples: int, device: str
) -> dict[str, Any]:
    """MAD's optimisation for one grid point: AdamW (torch's betas, no clipping), cosine from ``lr`` to ``min_lr``
    without warm-up over ``epochs`` passes of the fixed training set (the trainer's epoch: ``train_size //
    batch_size`` batches), one evaluation at the end."""
    per_epoch = max(1, (task.train_size or batch_size) // batch_size)
    return {
        "steps": epochs * per_epoch,
        "batch_size": batch_size,
        "lr": lr,
        "weight_decay": wd,
        "warmup_steps": 0,
        "min_lr_ratio": min_lr / lr,
        "betas": [0.9, 0.999],
        "grad_clip": None,
        "eval_every": 0,
        "eval_samples": test_samples,
        "device": device,
        "precision": "fp32",
    }


def best_rows(by_grid: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, task, setting): the grid point with the best mean accuracy (ties: smaller rate, then decay)."""
    best: dict[tuple, dict[str, Any]] = {}
    for r in sorted(by_grid, key=lambda r: (r["lr"], r["weight_decay"])):
        key = (r["model"], r["task"], r["setting"])
        acc = r["valid_accuracy_mean"] if r["valid_accuracy_mean"] is not None else -1.0
        if key not in best or acc > best[key]["valid_accuracy_mean"]:
            best[key] = {**r, "valid_accuracy_mean": acc}
    return list(best.values())


def mad_scores(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, task): the mean over settings of the best mean accuracy, and the same mean per seed (its min and
    max are the score's spread over the seeds)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["model"], r["task"]), []).append(r)
    scores = []
    for (model, task), rs in groups.items():
        n = min(len(r["valid_accuracy_values"]) for r in rs)
        per_seed = [sum(r["valid_accuracy_values"][i] for r in rs) / len(rs) for i in range(n)]
        mean = sum(r["valid_accuracy_mean"] for r in rs) / len(rs)
        scores.append(
            {
                "model": model,
                "task": task,
                "settings": len(rs),
                "n": n,
                "score_mean": mean,
                "score_min": min(per_seed) if per_seed else None,
                "score_max": max(per_seed) if per_seed else None,
                "score_values": per_seed,
            }
        )
    return scores


def report_table(scores: list[dict[str, Any]], labels: list[str]) -> str:
    """Rows: models; a column per task: MAD score ``mean (min–max)`` over the seeds."""
    by = {(s["model"], s["task"]): s for s in scores}
    models = list(dict.fromkeys(s["model"] for s in scores))
    table = [{"model": m, **{t: spread(by[(m, t)], "score") if (m, t) in by else "-" for t in labels}} for m in models]
    return markdown_table(table, ["model", *labels])


@register_experiment("mad", "MAD protocol: six synthetic tasks, best of the lr x weight-decay grid, MAD score per task")
def mad(
    out_dir: Path,
    models: str = ",".join(MODELS),
    tasks: str = ",".join(SETTINGS),
    settings: str = "all",
    task_args: str = "",
    d_model: int = 128,
    n_layers: int = 2,
    attention_heads: int = 16,
    epochs: int = 200,
    batch_size: int = 128,
    lrs: str = MAD_LRS,
    weight_decays: str = MAD_WEIGHT_DECAYS,
    min_lr: float = 1e-6,
    seeds: str = "0,1",
    test_samples: int = 1280,
    device: str = "cpu",
    procs: int = 1,
) -> dict[str, Any]:
    """Every option is part of each run's key; docs/mad.md."""
    from ..tasks import build_task

    out = Path(out_dir)
    kinds = choose(as_list(models), set(MODELS), "models")
    labels = choose(as_list(tasks), set(SETTINGS), "tasks")
    if settings not in ("all", "baseline"):
        raise InputError(f"experiment mad: settings must be 'all' or 'baseline', got {settings!r}")
    rates, decays, seed_list = as_list(lrs, float), as_list(weight_decays, float), as_ints(seeds)
    if not rates or not decays or not seed_list:
        raise InputError("experiment mad: lrs, weight_decays and seeds need at least one value each")
    if any(not 0 < min_lr <= lr for lr in rates):
        raise InputError(f"experiment mad: min_lr must be in (0, every lr], got {min_lr} for lrs {rates}")
    if any(wd < 0 for wd in decays):
        raise InputError(f"experiment mad: weight_decays must be >= 0, got {decays}")
    for name, value in (("epochs", epochs), ("batch_size", batch_size), ("d_model", d_model), ("n_layers", n_layers)):
        if int(value) < 1:
            raise InputError(f"experiment mad: {name} must be a positive int, got {value}")
    extra = parse_overrides(task_args, labels)
    grid = {label: task_settings(label, settings, extra[label]) for label in labels}
    built = {}
    for label, cells in grid.items():  # every setting's checks, before anything is trained or written
        for setting, task in cells:
            args = dict(task)
            built[(label, setting)] = build_task(args.pop("name"), **args)

    specs = [
        RunSpec.of(
            FN,
            {
                "seed": s,
                "model": model_entry(m, built[(label, setting)], int(d_model), int(n_layers), int(attention_heads)),
                "task": task,
                "train": train_config(
                    built[(label, setting)],
                    lr,
                    wd,
                    int(epochs),
                    int(batch_size),
                    float(min_lr),
                    int(test_samples),
                    device,
                ),
            },
            {"model": m, "task": label, "setting": setting, "lr": lr, "weight_decay": wd, "seed": s},
        )
        for label in labels
        for setting, task in grid[label]
        for m in kinds
        for lr in rates
        for wd in decays
        for s in seed_list
    ]
    records = run_specs(out, specs, int(procs))
    flat = [
        {**r["labels"], **{k: r["metrics"].get(k) for k in ("valid_accuracy", "valid_loss", "params", "train_s")},
         "diverged": bool(r["metrics"].get("diverged"))}
        for r in records
    ]  # fmt: skip
    by_grid = aggregate(records, ["valid_accuracy", "valid_loss", "train_s"])
    rows = best_rows(by_grid)
    scores = mad_scores(rows)
    write_rows(out, flat, "all_runs")
    write_rows(out, by_grid, "by_grid")
    write_rows(out, rows, "results")
    write_rows(out, scores, "scores")
    (out / "report.md").write_text(
        "# mad: MAD score per task (mean over its settings of the best grid point's accuracy), mean (min–max) over "
        "seeds\n\n"
        f"d_model {d_model}, {n_layers} blocks, {epochs} epochs of batch {batch_size}, rates {', '.join(map(str, rates))}"
        f" × weight decays {', '.join(map(str, decays))}, seeds {', '.join(map(str, seed_list))}, settings: {settings}, "
        f"accuracy on {test_samples} test samples per setting.\n\n" + report_table(scores, labels) + "\n"
    )
    (out / "config.json").write_text(
        json.dumps(
            {
                "models": kinds,
                "tasks": {label: [t for _, t in grid[label]] for label in labels},
                "lrs": rates,
                "weight_decays": decays,
                "seeds": seed_list,
                "d_model": int(d_model),
                "n_layers": int(n_layers),
                "attention_heads": int(attention_heads),
                "epochs": int(epochs),
                "batch_size": int(batch_size),
            },
            indent=2,
        )
        + "\n"
    )
    return {"rows": rows, "scores": scores}
