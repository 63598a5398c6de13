"""Held-out accuracy against training step, one line per (model, seed), for the runs of a sweep output folder.

    python tools/zoo_accuracy_curves.py OUT --probe rmt_mqar --png FIGURE.png [--setting -] [--title TEXT]

OUT is the ``--out`` folder of ``seqzoo zoo`` (or any sweep: its runs are ``OUT/runs/<key>/``, each with the
``config.json`` that names its labels and the ``done.json`` of a finished run, whose ``valid_curve`` holds
[step, loss, accuracy] per evaluation). The zoo's own report plots training loss; this draws the accuracy that
docs/zoo.md discusses step by step. It also prints one markdown row per run: labels, evaluations, last accuracy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from seqzoo.errors import InputError
from seqzoo.sweep.report import plot_series


def finished_runs(out: Path, probe: str, setting: str | None) -> list[tuple[dict, list]]:
    """``(labels, valid_curve)`` of every finished run of ``probe`` (and ``setting``) under ``out/runs``, sorted."""
    runs = out / "runs"
    if not runs.is_dir():
        raise InputError(f"OUT must be a sweep output folder holding runs/, got {str(out)!r}")
    found = []
    for run in sorted(runs.iterdir()):
        config, done = run / "config.json", run / "done.json"
        if not (config.is_file() and done.is_file()):
            continue  # not finished: no curve to draw yet
        labels = json.loads(config.read_text()).get("labels", {})
        if labels.get("probe") != probe or (setting is not None and labels.get("setting") != setting):
            continue
        found.append((labels, json.loads(done.read_text())["metrics"].get("valid_curve") or []))
    if not found:
        raise InputError(f"--probe: no finished run of probe {probe!r} (setting {setting!r}) under {runs}")
    return sorted(found, key=lambda r: (str(r[0].get("model")), int(r[0].get("seed", 0))))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="the sweep's output folder (seqzoo zoo --out)")
    ap.add_argument("--probe", required=True, help="the probe label of the runs to draw, e.g. rmt_mqar")
    ap.add_argument("--setting", default=None, help="only runs with this setting label (e.g. '-' or 'pairs=8')")
    ap.add_argument("--png", type=Path, required=True, help="where to write the figure")
    ap.add_argument("--title", default=None, help="the figure's title (default: the probe)")
    args = ap.parse_args(argv)
    if args.png.suffix != ".png":
        raise InputError(f"--png must name a .png file, got {str(args.png)!r}")
    runs = finished_runs(args.out, args.probe, args.setting)  # refuses before anything is written
    series = {}
    print("| model | seed | evaluations | last step | last accuracy |\n|---|---|---|---|---|")
    for labels, curve in runs:
        name = f"{labels.get('model')} seed {labels.get('seed')}"
        series[name] = ([p[0] for p in curve], [p[2] for p in curve])
        last = curve[-1] if curve else [None, None, None]
        print(f"| {labels.get('model')} | {labels.get('seed')} | {len(curve)} | {last[0]} | {last[2]} |")
    title = args.title or f"{args.probe}: held-out accuracy vs step"
    plot_series(args.png, series, "step", "held-out accuracy", title)


if __name__ == "__main__":
    from tool_errors import run_tool

    run_tool(main)
