"""What the families' equal-size MQAR comparisons (``griffin-mqar``, ``xlstm-mqar``) declare alike: the task and
budget options, the grid (model × seed), the closing result columns and the validation-accuracy figure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .launcher import Axis, CurvePlot, GridExperiment, Settings

MQAR_OPTIONS: dict[str, Any] = {
    "vocab_size": 64,
    "num_pairs": 8,
    "seq_len": 64,
    "steps": 400,
    "batch_size": 32,
    "lr": 3e-3,
    "eval_every": 100,
    "eval_samples": 256,
    "seeds": "0",
    "procs": 1,
}
RUN_COLUMNS = (
    ("valid_accuracy", "metrics.valid_accuracy"),
    ("valid_loss", "metrics.valid_loss"),
    ("train_s", "metrics.train_s"),
    ("run", "key"),
)


def mqar_task(opts: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "mqar",
        "vocab_size": opts["vocab_size"],
        "num_pairs": opts["num_pairs"],
        "seq_len": opts["seq_len"],
    }


def mqar_comparison(
    name: str,
    description: str,
    options: dict[str, Any],
    kinds: tuple[str, ...],
    settings: Callable[[dict[str, Any]], Settings],
    columns: tuple[tuple[str, str], ...],
    title: str,
    shown: dict[str, dict[Any, str]] | None = None,
) -> GridExperiment:
    """``options`` (the family's model options and any default it changes) over ``MQAR_OPTIONS``; ``columns`` come
    before ``RUN_COLUMNS``; ``title`` (formatted with the options) heads the accuracy figure."""
    curve = CurvePlot(
        "mqar_accuracy.png", "valid_curve", 0, 2, "step", "valid accuracy (queried positions)", title, "{model} s{seed}"
    )
    return GridExperiment(
        name=name,
        description=description,
        options={**options, **{k: v for k, v in MQAR_OPTIONS.items() if k not in options}},  # the family's first
        axes=(Axis("model", "models", str, kinds), Axis("seed", "seeds", int)),
        settings=settings,
        columns=(*columns, *RUN_COLUMNS),
        summary=("valid_accuracy", "valid_loss"),
        plots=(curve,),
        shown=shown or {},
    )
