"""Trained at one length, scored at longer ones: the machinery shared by ``griffin-copying`` (Griffin,
arXiv:2402.19427 §6.2) and ``xlstm-formal`` (xLSTM, arXiv:2405.04517 §4.1).

A :class:`LengthStudy` names its tasks (arguments at the training length), models (zoo names,
``zoo_models.py``), evaluation lengths as multiples of the training length, a budget and the claims to judge.
Each task becomes a zoo :class:`~seqzoo.experiments.zoo_probes.Probe` whose ``eval.task_lengths`` rebuilds the
task at every longer ``seq_len`` (``seqzoo/sweep/train_run.py``), and the grid comes from the zoo's own
``probe_specs`` (``zoo.py``), so a run here is configured exactly like the zoo's run of the same probe. The sweep
skips finished runs, so a rerun trains nothing.

Files in ``out``: ``results.{json,csv,md}`` (one row per task × model × evaluation length: accuracy and loss
mean / min / max over seeds, parameters; ``seqzoo/sweep/merge.py``), ``figures/<task>_accuracy.png`` (accuracy vs
evaluation length, one line per model, band = min–max over seeds), ``verdicts.json`` and ``report.md`` /
``report.html`` (settings, per-task table beside its figure, the verdict lines). Every verdict is computed from
the rows: a difference counts only where the seed ranges do not overlap (``merge.separations``), and a task
counts as evidence only where the attention reference learns it at the training length (worst seed >= 0.95).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..sweep import Report, aggregate, plot_series, resolve_options, run_sweep, separations, write_tables
from ..sweep.merge import markdown_table, spread
from ..sweep.options import as_list, choose
from .zoo import positive_int, probe_specs
from .zoo_models import DESCRIPTIONS, LM_MODELS
from .zoo_probes import Probe

LEARNED = 0.95  # the reference must reach this at the training length (worst seed) for a task to count
METRICS = ["accuracy", "loss", "params", "params_non_emb", "train_s"]


@dataclass(frozen=True)
class LengthStudy:
    name: str  # the experiment's name (``seqzoo experiment NAME``)
    title: str
    claim: str  # the paper's claim, one sentence (report and docs)
    tasks: dict[str, dict[str, Any]]  # task name -> build_task arguments at the training length (with seq_len)
    models: tuple[str, ...]  # zoo model names, the reference first
    factors: tuple[int, ...]  # evaluation lengths as multiples of the training length (1 = the training length)
    budget: dict[str, Any]  # training settings (TrainConfig fields) of every run
    above: tuple[tuple[str, str], ...] = ()  # (A, B): verdict "B below A at Nx beyond the seed spread"
    samples: int = 512  # held-out samples per evaluation length
    reference: str = "attention"
    default_tasks: tuple[str, ...] = ()  # run when ``tasks`` is not given (empty: every task)
    notes: tuple[str, ...] = field(default_factory=tuple)  # report lines on how to read the numbers


def options(study: LengthStudy) -> dict[str, Any]:
    """The experiment's options (``--set key=value``); empty / None means the study's default."""
    return {
        "tasks": "",  # comma list, default: every task of the study
        "models": "",  # comma list of zoo LM models, default: the study's
        "seeds": "0,1",
        "lengths": "",  # evaluation lengths as multiples of the training length, e.g. "4,8,16" (1 is always added)
        "seq_len": None,  # training length of every task (default: each task's own)
        "steps": None,
        "batch_size": None,
        "lr": None,
        "samples": None,  # held-out samples per evaluation length
        "procs": None,  # None: min(2, CPU count); one torch thread per process, so numbers do not depend on it
        "d_model": 64,
        "n_layers": 2,
        "device": None,
        "progress": True,
    }


def _ints(name: str, value: Any, lo: int) -> list[int]:
    try:
        out = as_list(value, int)
    except (TypeError, ValueError):
        out = []
    if not out or any(v < lo for v in out):
        raise InputError(f"{name}: expected a comma list of ints >= {lo}, got {value!r}")
    return out


def build(study: LengthStudy, opts: dict[str, Any]):
    """(specs, settings) of the resolved options: one zoo probe per task, trained at its length, scored at every
    multiple of it."""
    tasks = choose(as_list(opts["tasks"]) or list(study.default_tasks or study.tasks), set(study.tasks), "tasks")
    models = choose(as_list(opts["models"]) or list(study.models), set(LM_MODELS), "models")
    seeds = _ints("seeds", opts["seeds"], 0)
    factors = sorted({1, *(_ints("lengths", opts["lengths"], 1) if opts["lengths"] else study.factors)})
    for k in ("seq_len", "steps", "batch_size", "samples", "procs", "d_model", "n_layers"):
        if opts[k] is not None:
            opts[k] = positive_int(k, opts[k])
    if opts["lr"] is not None and not float(opts["lr"]) > 0:
        raise InputError(f"lr must be > 0, got {opts['lr']!r}")
    casts = (("steps", int), ("batch_size", int), ("lr", float), ("device", str))
    overrides = {k: cast(opts[k]) for k, cast in casts if opts[k] is not None}
    samples = opts["samples"] or study.samples
    probes, train_len = [], {}
    for name in tasks:
        args = {**study.tasks[name], **({"seq_len": opts["seq_len"]} if opts["seq_len"] else {})}
        train_len[name] = T = int(args["seq_len"])
        ev = {"task_lengths": [f * T for f in factors], "samples": samples}
        probes.append(Probe(name, study.claim, args, eval=ev))
    specs, _, info = probe_specs(probes, models, seeds, opts["d_model"], opts["n_layers"], study.budget, overrides)
    settings = {
        "tasks": tasks,
        "models": models,
        "seeds": seeds,
        "factors": factors,
        "train_len": train_len,
        "d_model": opts["d_model"],
        "n_layers": opts["n_layers"],
        "probes": info,
        "samples": samples,
    }
    return specs, settings


def length_records(records: list[dict[str, Any]], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """One record per (run, evaluation length) with labels task / model / x / eval_len / seed, so that
    ``merge.aggregate`` over seeds gives mean, min and max per (task, model, length). A failed run gives an error
    record at every length (counted in ``errors``, not in the numbers)."""
    out = []
    for r in records:
        lab = r["labels"]
        task, T = lab["probe"], settings["train_len"][lab["probe"]]
        m = r.get("metrics") or {}
        by_len = {int(L): (loss, acc) for L, loss, acc in m.get("acc_by_length") or []}
        for f in settings["factors"]:
            loss, acc = by_len.get(f * T, (None, None))
            labels = {"task": task, "model": lab["model"], "x": f, "eval_len": f * T, "seed": lab["seed"]}
            metrics = {"accuracy": acc, "loss": loss, **{k: m.get(k) for k in METRICS[2:]}}
            out.append({"labels": labels, "status": r.get("status"), "metrics": metrics})
    return out


def _row(rows: list[dict[str, Any]], **labels) -> dict[str, Any] | None:
    return next((r for r in rows if all(r.get(k) == v for k, v in labels.items())), None)


def _rng(r: dict[str, Any] | None) -> str:
    if r is None or r.get("accuracy_mean") is None:
        return "-"
    return f"[{r['accuracy_min']:.3g}, {r['accuracy_max']:.3g}]"


def verdicts(study: LengthStudy, rows: list[dict[str, Any]], settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Claims judged from the aggregated rows: does the reference learn each task (worst seed >= 0.95 at 1x),
    which models hold >= 0.95 at each length (worst seed), and for each (A, B) of ``study.above``, is B below A
    beyond the seed spread (A's worst seed above B's best; needs >= 2 seeds on both sides)."""
    models = settings["models"]
    seps = separations(rows, "accuracy", by="model", within=["task", "x"])
    out = []
    for task in settings["tasks"]:
        ref = _row(rows, task=task, model=study.reference, x=1)
        learned = None if ref is None or ref["accuracy_min"] is None else ref["accuracy_min"] >= LEARNED
        if learned is not None:
            answer = "yes" if learned else "no"
            out.append(
                {
                    "task": task,
                    "x": 1,
                    "claim": f"{study.reference} learns {task} at the training length (worst seed >= {LEARNED})",
                    "answer": answer,
                    "text": f"{answer} (worst seed {ref['accuracy_min']:.3g})",
                }
            )
        caveat = {
            True: "",
            False: " (not evidence: the reference did not learn the task)",
            None: f" (no {study.reference} run: whether the task was learnable is not checked)",
        }[learned]
        for f in settings["factors"]:
            held = [
                f"{m} {'yes' if r['accuracy_min'] >= LEARNED else 'no'}"
                for m in models
                if (r := _row(rows, task=task, model=m, x=f)) is not None and r["accuracy_min"] is not None
            ]
            if held:
                out.append(
                    {
                        "task": task,
                        "x": f,
                        "claim": f"worst seed >= {LEARNED} at {f}x",
                        "answer": ", ".join(held),
                        "text": ", ".join(held),
                    }
                )
            if f == 1:
                continue
            for a, b in study.above:
                ra, rb = _row(rows, task=task, model=a, x=f), _row(rows, task=task, model=b, x=f)
                if a not in models or b not in models or ra is None or rb is None:
                    continue
                if ra["accuracy_mean"] is None or rb["accuracy_mean"] is None:
                    answer = "not measured (no finished run)"
                elif ra["n"] < 2 or rb["n"] < 2:
                    answer = "not measured (one seed: no spread)"
                else:
                    hit = any(
                        s["better"] == a and s["worse"] == b and s["group"] == {"task": task, "x": f} for s in seps
                    )
                    answer = "yes" if hit else "no"
                out.append(
                    {
                        "task": task,
                        "x": f,
                        "claim": f"{b} below {a} at {f}x beyond the seed spread",
                        "answer": answer,
                        "text": f"{answer}: {a} {_rng(ra)}, {b} {_rng(rb)}{caveat}",
                    }
                )
    return out


def write_outputs(study: LengthStudy, out: Path, records: list[dict[str, Any]], settings: dict[str, Any]) -> dict:
    """results.{json,csv,md}, figures, verdicts.json, report.md / report.html; returns rows and verdicts."""
    import json

    rows = aggregate(length_records(records, settings), METRICS)
    write_tables(rows, out, "results")
    found = verdicts(study, rows, settings)
    (out / "verdicts.json").write_text(json.dumps(found, indent=2) + "\n")
    rep = Report(f"seqzoo {study.name}: {study.title}")
    rep.heading("Settings")
    budget = settings["probes"][0]["train"] if settings["probes"] else {}
    rep.bullets(
        [
            f"claim: {study.claim}",
            f"models: {', '.join(f'{m} ({DESCRIPTIONS.get(m, m)})' for m in settings['models'])}",
            f"width d_model={settings['d_model']}, depth {settings['n_layers']} blocks, seeds {settings['seeds']}",
            "tasks: " + ", ".join(f"{i['probe'].name} {i['task']}" for i in settings["probes"]),
            f"evaluated at {settings['factors']} x the training length, {settings['samples']} held-out samples each",
            f"training: {budget}",
            *study.notes,
        ]
    )
    rep.heading("Verdicts (computed from the table)")
    rep.bullets([f"{v['task']}: {v['claim']}: {v['text']}" for v in found] or ["no finished runs"])
    figs = out / "figures"
    text = []  # what the CLI prints: each task's table, then the verdicts
    for task in settings["tasks"]:
        T = settings["train_len"][task]
        sub = [r for r in rows if r["task"] == task]
        table = []
        series: dict[str, tuple] = {}
        for m in settings["models"]:
            rs = [r for r in sub if r["model"] == m and r["accuracy_mean"] is not None]
            if not rs:
                continue
            table.append(
                {
                    "model": m,
                    "params": int(rs[0]["params_mean"]) if rs[0]["params_mean"] is not None else None,
                    "seeds": rs[0]["n"],
                    **{f"{r['x']}x (T={r['eval_len']})": spread(r, "accuracy") for r in rs},
                }
            )
            xs = [r["eval_len"] for r in rs]
            series[m] = (xs, [r["accuracy_mean"] for r in rs])
            series[m + " spread"] = (xs, [r["accuracy_min"] for r in rs], [r["accuracy_max"] for r in rs])
        rep.heading(f"{task}: accuracy, mean (min–max over seeds); trained at T={T}")
        if not table:
            rep.text("No finished runs.")
            continue
        cols = list(dict.fromkeys(k for r in table for k in r))
        rep.table(table, cols)
        text += [f"{task} (trained at T={T}): accuracy, mean (min–max over seeds)", markdown_table(table, cols), ""]
        png = plot_series(
            figs / f"{task}_accuracy.png",
            series,
            "evaluation length",
            "accuracy",
            f"{study.name}: {task}, trained at T={T}",
            logx=True,
        )
        rep.figure(png, f"{task}: accuracy vs evaluation length (mean; band = min–max over seeds)")
    errors = [r for r in records if r.get("status") == "error"]
    if errors:
        rep.heading("Errors")
        rep.bullets([f"{r['labels']}: {r['error']} ({r['run_dir']}/error.txt)" for r in errors])
    _, page = rep.write(out)
    text += [f"{v['task']}: {v['claim']}: {v['text']}" for v in found]
    return {"rows": rows, "verdicts": found, "errors": len(errors), "report": str(page), "table": "\n".join(text)}


def run_study(study: LengthStudy, out_dir: str | Path, given: dict[str, Any]) -> dict[str, Any]:
    """Resolve the options, run the grid through the sweep (done runs skipped), write the files."""
    opts = resolve_options(options(study), given, study.name)
    specs, settings = build(study, opts)
    out = Path(out_dir)
    log = print if opts["progress"] else (lambda *_: None)
    procs = opts["procs"] or min(2, os.cpu_count() or 1)
    records = run_sweep(specs, out, procs=procs, log=log)
    res = write_outputs(study, out, records, settings)
    ran = sum(r.get("status") == "ran" for r in records)
    return {**res, "runs": len(records), "ran": ran, "out_dir": str(out)}


def register_study(study: LengthStudy, description: str):
    """Register ``study`` as ``seqzoo experiment <study.name>`` (options: :func:`options`); returns its function."""
    from . import register_experiment

    def run(out_dir: str | Path = f"results/{study.name}", **given: Any) -> dict[str, Any]:
        return run_study(study, out_dir, given)

    run.__name__ = run.__qualname__ = "run_" + study.name.replace("-", "_")
    register_experiment(study.name, description)(run)
    return run
