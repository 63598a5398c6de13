"""What the training experiments share: their runs go through the sweep runner (seqzoo/sweep), one folder per run
under ``<out>/runs/<hash of the whole configuration>``, so a changed setting never reuses an old result, an identical
one is skipped, and a cut one resumes from its checkpoint. Plus option parsing and results tables as files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sweep import RunSpec, run_sweep, write_tables
from ..sweep.options import as_list

FN = "seqzoo.sweep.train_run:train_run"
__all__ = ["adamw_budget", "as_ints", "as_list", "run_specs", "train_runs", "write_rows"]


def as_ints(v: Any) -> list[int]:
    return as_list(v, int)


def adamw_budget(opts: dict[str, Any]) -> dict[str, Any]:
    """The training settings of the families' MQAR comparisons from their options: AdamW with weight decay 0.1,
    a warm-up of a tenth of the steps, fp32 on the CPU."""
    return {
        "steps": int(opts["steps"]),
        "batch_size": int(opts["batch_size"]),
        "lr": float(opts["lr"]),
        "warmup_steps": int(opts["steps"]) // 10,
        "eval_every": int(opts["eval_every"]),
        "eval_samples": int(opts["eval_samples"]),
        "device": "cpu",
        "precision": "fp32",
        "weight_decay": 0.1,
    }


def write_rows(out: Path, rows: list[dict[str, Any]], stem: str = "results") -> None:
    """``<stem>.json`` (everything), ``<stem>.csv`` and ``<stem>.md`` (the scalar columns)."""
    write_tables(rows, out, stem)


def train_runs(
    out: Path, runs: list[tuple[dict, dict]], task: dict, train: dict, procs: int = 1, eval: dict | None = None
) -> list[dict[str, Any]]:
    """``runs``: (labels with ``seed``, model entry of sweep/train_run.py) pairs, all on ``task`` with ``train``;
    returns the sweep records in order. A failed run raises (an experiment table with a hole would mislead)."""
    specs = [
        RunSpec.of(
            FN,
            {
                "seed": int(labels["seed"]),
                "model": model,
                "task": task,
                "train": train,
                **({"eval": eval} if eval else {}),
            },
            labels,
        )
        for labels, model in runs
    ]
    return run_specs(out, specs, procs)


def run_specs(out: Path, specs: list[RunSpec], procs: int = 1) -> list[dict[str, Any]]:
    """:func:`run_sweep` under ``out``; a failed run raises (an experiment table with a hole would mislead)."""
    records = run_sweep(specs, out, procs=procs)
    bad = [r for r in records if r["status"] == "error"]
    if bad:
        raise RuntimeError(
            f"{len(bad)} run(s) failed, first: {bad[0]['labels']}: {bad[0]['error']} ({bad[0]['run_dir']})"
        )
    return records
