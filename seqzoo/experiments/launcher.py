"""Experiments as data: a :class:`GridExperiment` declares its options, the settings every run shares, the axes of
its grid, the columns to collect and the figures to draw; :func:`run_grid` is the one launcher that runs any of them.

    GridExperiment(
        name="mqar-widths",
        description="attention at two widths on MQAR",
        options={"widths": "16,32", "seeds": "0", "steps": 20, "procs": 1},      # --set KEY=VALUE, typed by default
        axes=(Axis("d_model", "widths", int), Axis("seed", "seeds", int)),        # outermost first
        settings=lambda o: Settings(
            base={"task": {"name": "mqar", "num_pairs": 2, "seq_len": 16}, "train": {"steps": o["steps"]}},
            points={"d_model": {d: {"model": {"preset": "attention-tiny", "d_model": d}} for d in (16, 32)}}),
        columns=(("d_model", "labels.d_model"), ("valid_accuracy", "metrics.valid_accuracy"), ("run", "key")),
    )

A run is ``base`` deep-merged with the patch of each axis value (``Settings.points``), a
:class:`~seqzoo.train.spec.RunSpec` labelled by its axis values; a patch may be a function of the whole point
(``Settings.point``) where one axis's settings depend on another's. An axis labelled ``seed`` sets the run's seed.
The launcher resolves the options strictly (unknown keys refused by name, values cast to the default's type,
``sweep/options.py``), builds every spec before anything is written, runs them through the sweep runner (done runs
skipped, cut ones resumed), and writes
``config.json`` (the resolved options and ``Settings.info``), ``results.{json,csv,md}`` (one row per run, the
declared columns), ``summary.{json,csv,md}`` (the declared ``summary`` metrics merged over seeds: mean, min, max),
the declared figures and ``report.md``; an experiment whose report is computed from the merged runs (a best rate
per cell) declares its own ``report`` function instead of the last three.

A column's source is a dotted path into the run's record: ``labels.X``, ``shown.X`` (the label's display name,
``GridExperiment.shown``), ``metrics.X``, ``config.X.Y`` (the run's resolved configuration), ``options.X`` (the
resolved options) or ``key``; or a function of that record.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..overrides import deep_merge
from ..sweep import aggregate, resolve_options
from ..sweep.merge import markdown_table, spread
from ..sweep.options import as_list, choose
from ..train.spec import TRAIN_RUN, RunSpec
from ._runs import run_specs, write_rows


@dataclass(frozen=True)
class Axis:
    """A grid axis: the run label ``label`` takes each value of option ``option`` (a comma list), cast by ``cast``;
    ``choices`` (when given) are the values allowed."""

    label: str
    option: str
    cast: Callable[[Any], Any] = str
    choices: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Settings:
    """What the resolved options make: ``base`` (run sections every run shares), ``points`` (axis label -> value ->
    the sections that value sets), ``point`` (the whole point's labels -> sections, where axes interact; None leaves
    the point out) and ``info`` (written to ``config.json`` beside the options)."""

    base: dict[str, Any]
    points: dict[str, dict[Any, dict[str, Any]]] = field(default_factory=dict)
    point: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None  # None for a point left out of the grid
    info: dict[str, Any] = field(default_factory=dict)
    shared: dict[str, Any] = field(default_factory=dict)  # what the settings hand to a ``report`` (not written)


@dataclass(frozen=True)
class CurvePlot:
    """One line per run from a curve metric (a list of points): x = ``point[x]``, y = ``point[y]``. ``title`` is
    formatted with the resolved options, ``label`` with the run's shown labels."""

    file: str
    metric: str
    x: int
    y: int
    xlabel: str
    ylabel: str
    title: str
    label: str
    logx: bool = False


@dataclass(frozen=True)
class GridExperiment:
    name: str
    description: str
    options: dict[str, Any]  # every --set option with its default (its type types the option)
    axes: tuple[Axis, ...]  # outermost first: the order of the runs and of the result rows
    settings: Callable[[dict[str, Any]], Settings]  # resolved options -> the runs' settings (may refuse them)
    columns: tuple[tuple[str, Any], ...]  # results column -> source: a path in the run's record, or a function of it
    summary: tuple[str, ...] = ()  # metrics merged over seeds in summary.* and report.md
    plots: tuple[CurvePlot, ...] = ()
    shown: dict[str, dict[Any, str]] = field(default_factory=dict)  # label -> display name of each value
    fn: str = TRAIN_RUN  # the run function
    title: str = ""  # report.md heading (default: the description)
    rows_stem: str = "results"  # the per-run table's files: <rows_stem>.{json,csv,md}
    label_order: tuple[str, ...] = ()  # the labels' order in tables, where it differs from the axes' order
    # a report of its own, called with out, opts, settings, records (the sweep's) and rows (the declared columns)
    # instead of summary.* and report.md; what it returns is the experiment's result
    report: Callable[..., dict[str, Any]] | None = None
    aliases: tuple[str, ...] = ()  # former names of the experiment


def _axis_values(exp: GridExperiment, opts: dict[str, Any]) -> list[list[Any]]:
    values = []
    for axis in exp.axes:
        try:
            vals = as_list(opts[axis.option], axis.cast)
        except (TypeError, ValueError):
            raise InputError(f"{exp.name}: option {axis.option}={opts[axis.option]!r}: expected a comma list") from None
        if axis.choices:
            choose([str(v) for v in vals], {str(c) for c in axis.choices}, axis.option)  # names the bad ones
        elif not vals:
            raise InputError(f"{exp.name}: option {axis.option} needs at least one value")
        values.append(vals)
    return values


def build_specs(exp: GridExperiment, opts: dict[str, Any]) -> tuple[list[RunSpec], Settings]:
    """Every run of the grid of resolved options ``opts``, in axis order; nothing is written."""
    settings = exp.settings(opts)
    specs = []
    for combo in itertools.product(*_axis_values(exp, opts)):
        labels = {axis.label: value for axis, value in zip(exp.axes, combo)}
        labels = {k: labels[k] for k in exp.label_order or labels}
        patch = settings.point(labels) if settings.point is not None else {}
        if patch is None:
            continue
        config = settings.base
        for axis, value in zip(exp.axes, combo):
            config = deep_merge(config, settings.points.get(axis.label, {}).get(value, {}))
        config = deep_merge(config, patch)
        if "seed" in labels:  # a seed axis seeds its runs
            config = {**config, "seed": labels["seed"]}
        specs.append(RunSpec.of(exp.fn, config, labels))
    return specs, settings


def _source(record: dict[str, Any], path: Any) -> Any:
    if callable(path):
        return path(record)
    node: Any = record
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _record(exp: GridExperiment, spec: RunSpec, rec: dict[str, Any], opts: dict[str, Any]) -> dict[str, Any]:
    shown = {k: exp.shown.get(k, {}).get(v, v) for k, v in spec.labels.items()}
    return {"labels": spec.labels, "shown": shown, "metrics": rec.get("metrics") or {}, "key": rec["key"],
            "config": spec.config, "options": opts}  # fmt: skip


def _plot(exp: GridExperiment, plot: CurvePlot, out: Path, runs: list[dict[str, Any]], opts: dict[str, Any]) -> Path:
    from ..plots import plot_lines

    series = {}
    for r in runs:
        points = r["metrics"].get(plot.metric) or []
        series[plot.label.format(**r["shown"])] = ([p[plot.x] for p in points], [p[plot.y] for p in points])
    path = out / plot.file
    plot_lines(series, path, plot.xlabel, plot.ylabel, plot.title.format(**opts), logx=plot.logx)
    return path


def _report(exp: GridExperiment, out: Path, opts: dict[str, Any], rows: list, summary: list, figures: list) -> str:
    lines = [f"# {exp.name}: {exp.title or exp.description}", ""]
    lines += ["Options: " + ", ".join(f"{k}={v}" for k, v in opts.items()) + ".", ""]
    if summary:
        groups = [a.label for a in exp.axes if a.label != "seed"]
        table = [
            {**{g: r[g] for g in groups}, "seeds": r["n"], **{m: spread(r, m) for m in exp.summary}} for r in summary
        ]
        lines += ["## Mean (min–max) over seeds", "", markdown_table(table, [*groups, "seeds", *exp.summary]), ""]
    cols = [c for c, _ in exp.columns]
    lines += ["## Every run", "", markdown_table(rows, cols), ""]
    lines += [f"![{p.stem}]({p.name})" for p in figures]
    text = "\n".join(lines).rstrip() + "\n"
    (out / "report.md").write_text(text)
    return markdown_table(rows, cols)


def run_grid(exp: GridExperiment, out_dir: str | Path, given: dict[str, Any]) -> dict[str, Any]:
    """Resolve the options, build every run (refusals come here, before anything is written), run the sweep under
    ``out_dir`` and write the tables, figures and report (module docstring). Returns rows, summary and table."""
    opts = resolve_options(exp.options, given, exp.name)
    specs, settings = build_specs(exp, opts)
    out = Path(out_dir)
    records = run_specs(out, specs, int(opts.get("procs", 1)))
    runs = [_record(exp, s, r, opts) for s, r in zip(specs, records)]
    rows = [{col: _source(r, src) for col, src in exp.columns} for r in runs]
    (out / "config.json").write_text(json.dumps({"options": opts, **settings.info}, indent=2, default=str) + "\n")
    write_rows(out, rows, exp.rows_stem)
    if exp.report is not None:
        return exp.report(out=out, opts=opts, settings=settings, records=records, rows=rows)
    summary = aggregate(records, list(exp.summary)) if exp.summary else []
    if summary:
        write_rows(out, summary, "summary")
    figures = [_plot(exp, p, out, runs, opts) for p in exp.plots]
    table = _report(exp, out, opts, rows, summary, figures)
    return {"rows": rows, "summary": summary, "table": table, "report": str(out / "report.md")}


def register_grid(exp: GridExperiment) -> GridExperiment:
    """``seqzoo experiment <exp.name>``: :func:`run_grid` with the ``--set`` options; returns the declaration."""
    from . import register_experiment

    def run(out_dir: str | Path = f"results/{exp.name}", **given: Any) -> dict[str, Any]:
        return run_grid(exp, out_dir, given)

    run.__name__ = run.__qualname__ = "run_" + exp.name.replace("-", "_")
    register_experiment(exp.name, exp.description, aliases=exp.aliases)(run)
    return exp
