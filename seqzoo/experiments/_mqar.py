"""What the families' equal-size MQAR comparisons (``griffin-mqar``, ``xlstm-mqar``) declare alike: the task and
budget options, the settings (task, equal-size models, AdamW budget), the grid (model × seed), the closing result
columns and the validation-accuracy figure."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..sweep import choose
from ._runs import adamw_budget, as_list
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


def lm_entry(config: Any, kind: str) -> dict[str, Any]:
    """The run's model section of a language model built from ``config`` with the default initialisation."""
    return {"type": "lm", "config": config.to_dict()}


def mqar_settings(
    opts: dict[str, Any],
    kinds: tuple[str, ...],
    equal_size_configs: Callable[..., dict[str, Any]],
    size_options: tuple[str, ...],
    model_entry: Callable[[Any, str], dict[str, Any]],
) -> Settings:
    """The MQAR task, the equal-size model of each kind asked for in ``opts["models"]``, AdamW budget
    (``adamw_budget``). ``equal_size_configs(vocab_size, **{o: opts[o] for o in size_options}, kinds=...)`` gives
    the family's ModelConfigs; ``model_entry(config, kind)`` makes a run's model section (e.g. with an init)."""
    from ..tasks import build_task

    task = mqar_task(opts)
    chosen = choose(as_list(opts["models"]), set(kinds), "models")
    sizes = {o: opts[o] for o in size_options}
    configs = equal_size_configs(build_task(**task).vocab_size, **sizes, kinds=chosen)
    train = adamw_budget(opts)
    info = {"task": task, "models": {k: c.to_dict() for k, c in configs.items()}, "train": train}
    models = {k: {"model": model_entry(c, k)} for k, c in configs.items()}
    return Settings(base={"task": task, "train": train}, points={"model": models}, info=info)


def mqar_comparison(
    name: str,
    description: str,
    options: dict[str, Any],
    kinds: tuple[str, ...],
    equal_size_configs: Callable[..., dict[str, Any]],
    size_options: tuple[str, ...],
    columns: tuple[tuple[str, str], ...],
    title: str,
    shown: dict[str, dict[Any, str]] | None = None,
    model_entry: Callable[[Any, str], dict[str, Any]] = lm_entry,
) -> GridExperiment:
    """``options`` (the family's model options and any default it changes) over ``MQAR_OPTIONS``; the grid's
    settings are ``mqar_settings`` with ``equal_size_configs``, ``size_options`` and ``model_entry``; ``columns``
    come before ``RUN_COLUMNS``; ``title`` (formatted with the options) heads the accuracy figure."""
    settings = partial(
        mqar_settings,
        kinds=kinds,
        equal_size_configs=equal_size_configs,
        size_options=size_options,
        model_entry=model_entry,
    )
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
