"""What the calibration page measured: the finished runs of a ``zoology-mqar`` or ``mad`` output folder, merged per
cell the way those experiments merge them (``zoology_mqar.best_rows``; ``mad.best_rows`` and ``mad.mad_scores``).

The runs are read from ``<folder>/runs/<key>/`` (``config.json``: labels and the resolved configuration;
``done.json``: the metrics), not from the folder's ``results.json``: that file is written only once the whole sweep
has finished, and a sweep still under way (or stopped) has finished runs worth reporting. Runs without
``done.json`` are counted as unfinished. Where one cell holds runs of several training budgets (the same folder
reused with other ``steps`` or ``batch_size``), only the runs of the largest budget (samples = steps × batch) count;
of several finished runs with the same labels (a configuration rerun after a code change gets a new key), the one
finished last counts; the others are counted as set aside. A diverged run scored 0 (``zoology_mqar_run.py``) counts
as 0, as in the experiments' own tables, and is counted in ``diverged``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingFileError
from ..sweep import aggregate

ZOOLOGY_LABELS = ("model", "seq_len", "num_pairs", "d_model", "lr", "seed")
MAD_LABELS = ("model", "task", "setting", "lr", "weight_decay", "seed")


def load_runs(folder: str | Path, option: str, labels: tuple[str, ...], experiment: str) -> list[dict[str, Any]]:
    """Every run folder under ``folder/runs``: ``{"labels", "train", "task", "metrics" (None when unfinished)}``.
    Refused, naming ``option``: a path that is not a folder, a folder without ``runs/``, runs whose labels are not
    ``experiment``'s."""
    path = Path(folder)
    if not path.is_dir():
        raise MissingFileError(f"{option}={str(folder)!r}: no such folder (a `seqzoo experiment {experiment}` --out)")
    if not (path / "runs").is_dir():
        raise InputError(f"{option}={str(folder)!r} is not a `seqzoo experiment {experiment}` output: no runs/ inside")
    runs = []
    for run in sorted(p for p in (path / "runs").iterdir() if (p / "config.json").is_file()):
        meta = json.loads((run / "config.json").read_text())
        if set(meta.get("labels", {})) != set(labels):
            raise InputError(
                f"{option}={str(folder)!r}: run {run.name} has labels {sorted(meta.get('labels', {}))}, "
                f"not those of {experiment} ({', '.join(labels)})"
            )
        done = run / "done.json"
        config = meta.get("config", {})
        runs.append(
            {
                "labels": meta["labels"],
                "train": config.get("train", {}),
                "task": config.get("task", {}),
                "metrics": json.loads(done.read_text())["metrics"] if done.is_file() else None,
                "finished_at": done.stat().st_mtime_ns if done.is_file() else None,
            }
        )
    return runs


def samples(run: dict[str, Any]) -> int:
    """Training samples a run saw: steps × batch size."""
    return int(run["train"].get("steps", 0)) * int(run["train"].get("batch_size", 0))


def _largest_budget(runs: list[dict[str, Any]], cell: tuple[str, ...]) -> tuple[list[dict[str, Any]], dict]:
    """The finished runs of the largest budget in each cell (labels ``cell``), one per label set (the one finished
    last, where code changes left several runs with the same labels: they would count as extra seeds), and per cell
    the count of finished runs set aside (smaller budgets, older duplicates) and of unfinished runs."""
    by_cell: dict[tuple, list[dict[str, Any]]] = {}
    for r in runs:
        by_cell.setdefault(tuple(r["labels"][k] for k in cell), []).append(r)
    kept, counts = [], {}
    for key, rs in by_cell.items():
        done = [r for r in rs if r["metrics"] is not None]
        top = max((samples(r) for r in done), default=0)
        latest: dict[tuple, dict[str, Any]] = {}
        for r in sorted((r for r in done if samples(r) == top), key=lambda r: r["finished_at"]):
            latest[tuple(sorted(r["labels"].items()))] = r
        kept += latest.values()
        counts[key] = {"set_aside": len(done) - len(latest), "unfinished": len(rs) - len(done)}
    return kept, counts


def _records(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sweep's record shape (``sweep/merge.py: aggregate``)."""
    return [{"labels": r["labels"], "metrics": r["metrics"], "status": "done"} for r in runs]


def _budget(rows: list[dict[str, Any]]) -> dict[str, Any]:
    steps = sorted({int(r["train"].get("steps", 0)) for r in rows})
    batch = sorted({int(r["train"].get("batch_size", 0)) for r in rows})
    return {"steps": steps[0] if len(steps) == 1 else steps, "batch_size": batch[0] if len(batch) == 1 else batch}


def zoology_cells(folder: str | Path, option: str = "zoology") -> list[dict[str, Any]]:
    """One row per (model, seq_len, num_pairs, d_model): the best rate's accuracy over the seeds (``n``,
    ``valid_accuracy_mean/min/max/values``), ``lr``, ``lrs`` (rates tried), ``diverged`` (runs at that rate),
    ``steps``, ``batch_size``, ``samples``, ``set_aside`` and ``unfinished`` run counts, and ``runs``: each counted
    run's labels and ``curve`` = ``[(step, accuracy), ...]`` at its evaluations."""
    from .zoology_mqar import best_rows

    cell = ("model", "seq_len", "num_pairs", "d_model")
    runs = load_runs(folder, option, ZOOLOGY_LABELS, "zoology-mqar")
    kept, counts = _largest_budget(runs, cell)
    best = best_rows(aggregate(_records(kept), ["valid_accuracy"]))
    out = []
    for row in best:
        key = tuple(row[k] for k in cell)
        here = [r for r in kept if tuple(r["labels"][k] for k in cell) == key]
        out.append(
            {
                **{k: row[k] for k in cell},
                **{k: row[k] for k in ("lr", "n", "valid_accuracy_mean", "valid_accuracy_min", "valid_accuracy_max")},
                "valid_accuracy_values": row["valid_accuracy_values"],
                "lrs": len({r["labels"]["lr"] for r in here}),
                "diverged": sum(1 for r in here if r["labels"]["lr"] == row["lr"] and r["metrics"].get("diverged")),
                **_budget(here),
                "samples": samples(here[0]),
                **counts[key],
                # every counted run's held-out accuracy per evaluation (empty for a diverged run)
                "runs": [
                    {
                        **r["labels"],
                        "curve": [(int(step), acc) for step, _, acc in r["metrics"].get("valid_curve") or []],
                    }
                    for r in sorted(here, key=lambda r: tuple(r["labels"][k] for k in ZOOLOGY_LABELS))
                ],
            }
        )
    for key, c in counts.items():  # cells with no finished run: listed, so the page can say they are under way
        if not any(tuple(r[k] for k in cell) == key for r in out):
            out.append({**dict(zip(cell, key)), "n": 0, "valid_accuracy_mean": None, **c})
    return out


def mad_cells(folder: str | Path, option: str = "mad") -> list[dict[str, Any]]:
    """One row per (model, task): the MAD score over the settings measured (``n`` seeds, ``score_mean/min/max``),
    ``settings`` (the names measured), ``samples`` and ``paper_train_sizes`` per setting, run counts."""
    from .mad import best_rows, mad_scores

    cell = ("model", "task", "setting")
    runs = load_runs(folder, option, MAD_LABELS, "mad")
    kept, counts = _largest_budget(runs, cell)
    scores = mad_scores(best_rows(aggregate(_records(kept), ["valid_accuracy"])))
    out = []
    for s in scores:
        here = [r for r in kept if (r["labels"]["model"], r["labels"]["task"]) == (s["model"], s["task"])]
        per_setting = {r["labels"]["setting"]: r for r in here}
        mine = [c for k, c in counts.items() if k[:2] == (s["model"], s["task"])]
        out.append(
            {
                **s,
                "settings": sorted(per_setting),
                "samples": {name: samples(r) for name, r in per_setting.items()},
                "train_sizes": {name: r["task"].get("train_size") for name, r in per_setting.items()},
                "set_aside": sum(c["set_aside"] for c in mine),
                "unfinished": sum(c["unfinished"] for c in mine),
            }
        )
    return out
