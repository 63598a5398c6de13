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

A declaration for the experiment launcher (``launcher.py``): the options, the grid (T × pairs × model × d_model ×
rate × seed) and a report function of its own. Written under ``--out``: ``runs/<key>/`` (one per model, setting,
width, rate and seed: keyed by the whole configuration, skipped when done, resumed when cut), ``all_runs.*`` (every
run), ``by_lr.*`` (seeds merged per rate), ``results.*`` (the best rate per cell, with the recurrent state size),
``report.md`` (the best-rate table), plots of accuracy against ``d_model`` and against the
state size per (T, pairs).

State size: the real numbers held in the states a model returns after reading one sequence of length T (batch 1),
all layers together (a complex element counts two; position counters none): attention's key/value cache, the
recurrences' matrix or vector states, their short-conv and local-attention caches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError
from ..sweep import aggregate
from ..sweep.merge import markdown_table, spread
from ._runs import as_ints, as_list, write_rows
from .launcher import Axis, GridExperiment, Settings, register_grid
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


def _settings(opts: dict[str, Any]) -> Settings:
    """Zoology's task at each (T, pairs) cell (checked by building it: Zoology's asserts), the zoo's model of each
    family at each width, the AdamW budget at each rate; cells with 4·pairs > T are left out."""
    from ..tasks import build_task
    from .zoo_models import model_spec

    settings = cells(as_ints(opts["seq_lens"]), as_ints(opts["num_pairs"]))
    if not settings:
        raise InputError(
            f"seq_lens x num_pairs: no setting with 4*num_pairs <= seq_len in {opts['seq_lens']} x {opts['num_pairs']}"
        )
    tasks = {
        (T, P): {
            "name": "mqar",
            "protocol": "zoology",
            "vocab_size": opts["vocab_size"],
            "num_pairs": P,
            "seq_len": T,
            "power_a": opts["power_a"],
            "random_filler": opts["random_filler"],
        }
        for T, P in settings
    }
    for task in tasks.values():  # Zoology's asserts, before anything is trained or written
        build_task(**task)
    train = {
        "steps": opts["steps"],
        "batch_size": opts["batch_size"],
        "warmup_steps": opts["steps"] // 10,
        "eval_every": opts["eval_every"],
        "eval_samples": opts["eval_samples"],
        "device": "cpu",
        "precision": "fp32",
        "weight_decay": 0.1,
        "scored_logits": True,
    }

    def point(labels: dict[str, Any]) -> dict[str, Any] | None:
        cell = (labels["seq_len"], labels["num_pairs"])
        if cell not in tasks:
            return None
        model = model_spec(labels["model"], opts["vocab_size"], labels["d_model"], opts["n_layers"], cell[0])
        return {"model": model, "task": tasks[cell], "train": {"lr": labels["lr"]}}

    info = {
        "tasks": [tasks[c] for c in settings],
        "models": as_list(opts["models"]),
        "d_models": as_ints(opts["d_models"]),
        "lrs": as_list(opts["lrs"], float),
        "seeds": as_ints(opts["seeds"]),
        "n_layers": opts["n_layers"],
        "train": train,
    }
    return Settings(base={"train": train}, point=point, info=info, shared={"cells": settings, "tasks": tasks})


def _report(out: Path, opts: dict[str, Any], settings: Settings, records: list, rows: list) -> dict[str, Any]:
    """by_lr.* (seeds merged per rate, diverged runs counted), results.* (the best rate per cell, with the state
    size), the plots and report.md."""
    from .zoo_models import model_spec

    cells_run, tasks = settings.shared["cells"], settings.shared["tasks"]
    kinds, widths = settings.info["models"], settings.info["d_models"]
    task_at = {T: tasks[(T, P)] for T, P in reversed(cells_run)}  # the state does not depend on the pairs
    n_layers, vocab = opts["n_layers"], opts["vocab_size"]
    sizes = {
        (m, T, d): state_size(model_spec(m, vocab, d, n_layers, T), task)
        for m in kinds
        for T, task in task_at.items()
        for d in widths
    }
    by_lr = aggregate(records, ["valid_accuracy", "valid_loss", "train_s"])
    for row in by_lr:  # runs whose loss diverged (scored 0, zoology_mqar_run.py)
        row["diverged"] = sum(
            1 for r in records if r["metrics"].get("diverged") and _same_cell(r["labels"], row, with_lr=True)
        )
    best = best_rows(by_lr)
    for r in best:
        r["state_size"] = sizes[(r["model"], r["seq_len"], r["d_model"])]
    write_rows(out, by_lr, "by_lr")
    write_rows(out, best, "results")
    plots = _plots(out, best, cells_run)
    table = report_table(best, cells_run)
    (out / "report.md").write_text(
        "# zoology-mqar: best-rate MQAR accuracy, mean (min–max) over seeds\n\n"
        f"V = {vocab}, {n_layers} layers, {opts['steps']} steps of {opts['batch_size']}, "
        f"rates {', '.join(map(str, settings.info['lrs']))}, seeds {', '.join(map(str, settings.info['seeds']))}, "
        f"accuracy on {opts['eval_samples']} held-out samples.\n\n" + table + "\n"
    )
    return {"rows": best, "plots": plots, "table": table}


ZOOLOGY_MQAR = register_grid(
    GridExperiment(
        name="zoology-mqar",
        description="Zoology Fig. 2 protocol on MQAR: accuracy vs d_model and state size, best lr",
        options={  # every option is part of each run's key; --set steps=... etc. (docs/calibration.md)
            "models": ",".join(FAMILIES),
            "seq_lens": "64,128",
            "num_pairs": "4,8,16",
            "d_models": "64,128,256",
            "lrs": ZOOLOGY_LRS,
            "seeds": "0,1",
            "vocab_size": 8192,
            "n_layers": 2,
            "steps": 8000,  # the budget at which attention reaches Zoology's accuracy (docs/calibration.md)
            "batch_size": 64,
            "eval_samples": 1000,
            "eval_every": 1000,
            "power_a": 0.01,
            "random_filler": False,
            "procs": 1,
        },
        axes=(
            Axis("seq_len", "seq_lens", int),
            Axis("num_pairs", "num_pairs", int),
            Axis("model", "models", str, FAMILIES),
            Axis("d_model", "d_models", int),
            Axis("lr", "lrs", float),
            Axis("seed", "seeds", int),
        ),
        settings=_settings,
        columns=(
            *((label, f"labels.{label}") for label in ("model", "seq_len", "num_pairs", "d_model", "lr", "seed")),
            *((name, f"metrics.{name}") for name in ("valid_accuracy", "valid_loss", "params", "train_s")),
            ("diverged", lambda run: bool(run["metrics"].get("diverged"))),
        ),
        fn=FN,
        rows_stem="all_runs",
        label_order=("model", "seq_len", "num_pairs", "d_model", "lr", "seed"),
        report=_report,
    )
)
