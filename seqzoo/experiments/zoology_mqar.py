"""``seqzoo experiment zoology-mqar``: Zoology's Fig. 2 protocol (Arora et al., arXiv:2312.04927) on cells a CPU affords.

MQAR drawn from Zoology's own distribution (``tasks/mqar_zoology.py``: distinct values, power-law query gaps with
``power_a`` 0.01, V = 8,192; filler 0 as in Zoology's Fig. 2 configurations, ``random_filler`` to change it), the
zoo's models (``zoo_models.py``: attention and the seed families mLSTM, xLSTM, GateLoop, Hawk, Griffin) at every
``d_model``, each trained at Zoology's four learning rates (``logspace(-4, -2, 4)``) for every seed. A cell
(model, T, pairs, d_model) reports the learning rate whose mean accuracy over the seeds is best, and at that rate
the mean, min and max over the seeds, as Zoology reports the best rate of its sweep.

A run whose loss diverges (possible at the highest rate) scores accuracy 0 and is counted in the ``diverged``
column (``zoology_mqar_run.py``) instead of stopping the sweep.

The LM head runs at the query positions only (``TrainConfig.scored_logits``): a 64-token sample has 4 to 16 scored
positions, so the 8,192-way head costs that many rows instead of 64.

Written under ``--out``: ``runs/<key>/`` (one per model, setting, width, rate and seed: keyed by the whole
configuration, skipped when done, resumed when cut), ``all_runs.*`` (every run), ``by_lr.*`` (seeds merged per
rate), ``results.*`` (the best rate per cell, with the recurrent state size), ``report.md`` (the table of
docs/calibration.md filled in), plots of accuracy against ``d_model`` and against the state size per (T, pairs).

State size: the real numbers held in the states a model returns after reading one sequence of length T (batch 1),
all layers together (a complex element counts two; position counters none): attention's key/value cache, the
recurrences' matrix or vector states, their short-conv and local-attention caches.
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

FAMILIES = ("attention", "mlstm", "xlstm", "gateloop", "hawk", "griffin")
ZOOLOGY_LRS = "1e-4,4.6416e-4,2.1544e-3,1e-2"  # numpy.logspace(-4, -2, 4), Zoology's Fig. 2 sweep


def cells(seq_lens: list[int], pairs: list[int]) -> list[tuple[int, int]]:
    """(T, pairs) settings Zoology's generator accepts (4·pairs <= T)."""
    return [(T, P) for T in seq_lens for P in pairs if 4 * P <= T]


def state_size(spec: dict[str, Any], task: dict[str, Any]) -> int:
    """Elements of the states the model returns after one sequence of ``task['seq_len']`` tokens (module doc)."""
    import torch

    from ..sweep.train_run import build

    model, t = build({"seed": 0, "model": spec, "task": task})
    model.eval()
    with torch.no_grad():
        states = model(t.build(1, 0, "valid")[0]).states

    def count(s) -> int:  # real numbers held: a complex element counts 2, integer counters and flags none
        if isinstance(s, torch.Tensor):
            return s.numel() * (2 if s.is_complex() else 1) if (s.is_floating_point() or s.is_complex()) else 0
        if isinstance(s, (list, tuple)):
            return sum(count(x) for x in s)
        if isinstance(s, dict):
            return sum(count(x) for x in s.values())
        if hasattr(s, "__dict__"):  # the mixers' state classes (KVCache, MLSTMState, RGLRUState, ...)
            return count(vars(s))
        return 0

    return count(states)


def best_rows(by_lr: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (model, T, pairs, d_model): the row of the rate with the best mean accuracy (ties: the smaller rate)."""
    best: dict[tuple, dict[str, Any]] = {}
    for r in sorted(by_lr, key=lambda r: r["lr"]):
        key = (r["model"], r["seq_len"], r["num_pairs"], r["d_model"])
        acc = r["valid_accuracy_mean"] if r["valid_accuracy_mean"] is not None else -1.0
        if key not in best or acc > best[key]["valid_accuracy_mean"]:
            best[key] = {**r, "valid_accuracy_mean": acc}
    return list(best.values())


def _same_cell(labels: dict[str, Any], row: dict[str, Any], with_lr: bool = False) -> bool:
    keys = ("model", "seq_len", "num_pairs", "d_model") + (("lr",) if with_lr else ())
    return all(labels[k] == row[k] for k in keys)


def report_table(rows: list[dict[str, Any]], settings: list[tuple[int, int]]) -> str:
    """Rows model × d_model, a column per (T, pairs): best-rate accuracy ``mean (min–max)`` over the seeds."""
    by = {(r["model"], r["d_model"], r["seq_len"], r["num_pairs"]): r for r in rows}
    models = list(dict.fromkeys(r["model"] for r in rows))
    widths = sorted({r["d_model"] for r in rows})
    table = []
    for m in models:
        for d in widths:
            line = {"model": m, "d_model": d}
            for T, P in settings:
                r = by.get((m, d, T, P))
                line[f"T={T}, {P} pairs"] = spread(r, "valid_accuracy") if r else "-"
            table.append(line)
    return markdown_table(table, list(table[0]) if table else ["model"])


def _plots(out: Path, rows: list[dict[str, Any]], settings: list[tuple[int, int]]) -> list[str]:
    from ..plots import plot_lines

    names = []
    for T, P in settings:
        here = [r for r in rows if r["seq_len"] == T and r["num_pairs"] == P]
        for x, xlabel, stem, logx in (
            ("d_model", "model dimension d_model", "acc_vs_d_model", False),
            ("state_size", "state size (real numbers, batch 1, all layers)", "acc_vs_state", True),
        ):
            series = {}
            for m in dict.fromkeys(r["model"] for r in here):
                pts = sorted((r[x], r["valid_accuracy_mean"]) for r in here if r["model"] == m)
                series[m] = ([p[0] for p in pts], [p[1] for p in pts])
            name = f"{stem}_T{T}_kv{P}.png"
            plot_lines(series, out / name, xlabel, "MQAR accuracy (best lr, seed mean)", f"T={T}, {P} pairs", logx=logx)
            names.append(name)
    return names


@register_experiment("zoology-mqar", "Zoology Fig. 2 protocol on MQAR: accuracy vs d_model and state size, best lr")
def zoology_mqar(
    out_dir: Path,
    models: str = ",".join(FAMILIES),
    seq_lens: str = "64,128",
    num_pairs: str = "4,8,16",
    d_models: str = "64,128,256",
    lrs: str = ZOOLOGY_LRS,
    seeds: str = "0,1",
    vocab_size: int = 8192,
    n_layers: int = 2,
    steps: int = 2000,
    batch_size: int = 64,
    eval_samples: int = 1000,
    eval_every: int = 500,
    power_a: float = 0.01,
    random_filler: bool = False,
    procs: int = 1,
) -> dict[str, Any]:
    """Every option is part of each run's key; ``--set steps=...`` etc. (docs/calibration.md)."""
    from ..sweep import as_bool
    from ..tasks import build_task
    from .zoo_models import model_spec

    out = Path(out_dir)
    kinds = choose(as_list(models), set(FAMILIES), "models")
    settings = cells(as_ints(seq_lens), as_ints(num_pairs))
    filler = as_bool(random_filler, "random_filler")
    tasks = {
        (T, P): {
            "name": "mqar",
            "protocol": "zoology",
            "vocab_size": int(vocab_size),
            "num_pairs": P,
            "seq_len": T,
            "power_a": float(power_a),
            "random_filler": filler,
        }
        for T, P in settings
    }
    if not settings:
        raise InputError(f"seq_lens x num_pairs: no setting with 4*num_pairs <= seq_len in {seq_lens} x {num_pairs}")
    for task in tasks.values():  # Zoology's asserts, before anything is trained or written
        build_task(**task)
    widths, rates, seed_list = as_ints(d_models), as_list(lrs, float), as_ints(seeds)
    train = {
        "steps": int(steps),
        "batch_size": int(batch_size),
        "warmup_steps": int(steps) // 10,
        "eval_every": int(eval_every),
        "eval_samples": int(eval_samples),
        "device": "cpu",
        "precision": "fp32",
        "weight_decay": 0.1,
        "scored_logits": True,
    }
    specs = [
        RunSpec.of(
            FN,
            {
                "seed": s,
                "model": model_spec(m, int(vocab_size), d, int(n_layers), T),
                "task": tasks[(T, P)],
                "train": {**train, "lr": lr},
            },
            {"model": m, "seq_len": T, "num_pairs": P, "d_model": d, "lr": lr, "seed": s},
        )
        for T, P in settings
        for m in kinds
        for d in widths
        for lr in rates
        for s in seed_list
    ]
    records = run_specs(out, specs, int(procs))
    task_at = {T: tasks[(T, P)] for T, P in reversed(settings)}  # the state does not depend on the pairs
    sizes = {
        (m, T, d): state_size(model_spec(m, int(vocab_size), d, int(n_layers), T), task)
        for m in kinds
        for T, task in task_at.items()
        for d in widths
    }
    flat = [
        {**r["labels"], **{k: r["metrics"].get(k) for k in ("valid_accuracy", "valid_loss", "params", "train_s")},
         "diverged": bool(r["metrics"].get("diverged"))}
        for r in records
    ]  # fmt: skip
    by_lr = aggregate(records, ["valid_accuracy", "valid_loss", "train_s"])
    for row in by_lr:  # runs whose loss diverged (scored 0, zoology_mqar_run.py)
        row["diverged"] = sum(
            1 for r in records if r["metrics"].get("diverged") and _same_cell(r["labels"], row, with_lr=True)
        )
    rows = best_rows(by_lr)
    for r in rows:
        r["state_size"] = sizes[(r["model"], r["seq_len"], r["d_model"])]
    write_rows(out, flat, "all_runs")
    write_rows(out, by_lr, "by_lr")
    write_rows(out, rows, "results")
    plots = _plots(out, rows, settings)
    (out / "report.md").write_text(
        "# zoology-mqar: best-rate MQAR accuracy, mean (min–max) over seeds\n\n"
        f"V = {vocab_size}, {n_layers} layers, {steps} steps of {batch_size}, rates {', '.join(map(str, rates))}, "
        f"seeds {', '.join(map(str, seed_list))}, accuracy on {eval_samples} held-out samples.\n\n"
        + report_table(rows, settings)
        + "\n"
    )
    (out / "config.json").write_text(
        json.dumps(
            {
                "tasks": [tasks[c] for c in settings],
                "models": kinds,
                "d_models": widths,
                "lrs": rates,
                "seeds": seed_list,
                "n_layers": int(n_layers),
                "train": train,
            },
            indent=2,
        )
        + "\n"
    )
    return {"rows": rows, "plots": plots}
