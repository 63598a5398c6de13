"""``seqzoo experiment calibration``: the published numbers (``published.py``) beside what seqzoo measured, with a
verdict per cell; the section "Published and measured" of docs/calibration.md.

    seqzoo experiment calibration --out results/calibration --set zoology=results/zoology-mqar --set mad=results/mad

Reads the output folders of ``seqzoo experiment zoology-mqar`` (option ``zoology``) and ``seqzoo experiment mad``
(option ``mad``), any subset: an option left empty means that experiment was not run. The runs are read from the
folders' ``runs/`` (``calibration_measured.py``), so a sweep still under way is reported with what has finished.

A cell of the reference family (attention, against Zoology's Attention and MAD's Transformer) gets a verdict:

* ``calibrated``: the mean over the seeds is within the anchor's tolerance of the published value (0.05 accuracy,
  inclusive) and at least 2 seeds finished (CONTRIBUTING.md, "At least 2 seeds per claim"); for MAD, over all of
  the task's settings, as a published MAD score is;
* ``not calibrated``, with every reason the data states: below (or above) the published value by X; fewer samples
  trained than the paper's N (stated where the cell is off the published value); only one seed; MAD scored over
  fewer settings than the published score;
* ``not run`` (no finished run of the cell) or ``no published value`` (the cell's published number was not found,
  or the source has no such setting).

Every other family is context, without a verdict, beside the published rows of the other architectures. Written
under ``--out``: ``calibration.md`` (the section) and ``calibration.json`` (every cell, with its source and kind).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..sweep.merge import markdown_table
from . import register_experiment
from .published import ANCHORS, Anchor, Published, entries

EPS = 1e-9  # the tolerance is inclusive; accuracies are means of float32 counts
RULES = (
    "Each published number beside seqzoo's measurement of the same setting (mean (min–max) over the seeds, with the "
    "seeds, the rates tried and the samples trained: seqzoo's budget is not the papers'). Only the reference cells "
    "(attention, against the published Attention or Transformer) get a verdict: **calibrated** where the seed mean "
    "is within the tolerance of the published value and at least 2 seeds finished; **not calibrated** with the "
    "reasons the data states; **not run** where no run of the cell finished; **no published value** where the "
    "source's number was not found or the source has no such setting. The other architectures are context."
)


def measured_text(m: dict[str, Any] | None, prefix: str = "valid_accuracy") -> str:
    """``mean (min–max), n seeds`` or ``not run``."""
    if m is None or m.get(f"{prefix}_mean") is None:
        return "not run"
    mean, lo, hi = (m[f"{prefix}_{k}"] for k in ("mean", "min", "max"))
    spread = f" ({lo:.3f}–{hi:.3f})" if m["n"] > 1 else ""
    return f"{mean:.3f}{spread}, {m['n']} seed{'s' if m['n'] != 1 else ''}"


def published_text(p: Published | None) -> str:
    if p is None or p.value is None:
        return "not found"
    return f"{p.value:.2f} ({p.kind}, ±{p.precision:g})" if p.precision else f"{p.value:.2f} ({p.kind})"


def paper_samples(anchor: Anchor, train_size: int | None = None) -> int | None:
    """Samples one of the paper's runs saw: its epochs × its training set (the setting's own where the anchor's
    is per setting); None where the budget was not found."""
    size = anchor.train_size if anchor.train_size is not None else train_size
    return anchor.epochs * size if anchor.epochs and size else None


def verdict(
    published: float | None,
    mean: float | None,
    seeds: int,
    tolerance: float,
    ours: int | None = None,
    paper: int | None = None,
    missing: str = "",
) -> tuple[str, str]:
    """``(verdict, reason)`` of one reference cell (module docstring). ``ours`` / ``paper``: samples trained;
    ``missing``: what the measurement lacks against the published one (MAD settings), stated as a reason."""
    if mean is None:
        return "not run", "no finished run"
    if published is None:
        return "no published value", "the published number was not found"
    diff = mean - published
    reasons = []
    if abs(diff) > tolerance + EPS:
        reasons.append(f"{'below' if diff < 0 else 'above'} the published value by {abs(diff):.3f}")
        if ours is not None and paper is not None and ours < paper:
            reasons.append(f"fewer samples trained ({ours:,}) than the paper's budget ({paper:,})")
    if seeds < 2:
        reasons.append("only one seed")
    if missing:
        reasons.append(missing)
    if reasons:
        return "not calibrated", "; ".join(reasons)
    return "calibrated", f"within {tolerance:g} of the published value ({diff:+.3f})"


def curves_table(curves: list[dict[str, Any]]) -> str:
    """One row per run (T, pairs, d_model, lr, seed), a column per evaluation step: the held-out accuracy there."""
    steps = sorted({step for r in curves for step, _ in r["curve"]})
    rows = []
    for r in curves:
        at = dict(r["curve"])
        row = {"T, pairs, d_model": f"{r['seq_len']}, {r['num_pairs']}, {r['d_model']}", "lr": f"{r['lr']:g}"}
        row["seed"] = r["seed"]
        rows.append({**row, **{f"step {s:,}": f"{at[s]:.3f}" if s in at else "–" for s in steps}})
    return markdown_table(rows, list(rows[0])) if rows else ""


def zoology_section(cells: list[dict[str, Any]] | None, command: str) -> tuple[str, dict[str, Any]]:
    """Zoology's Fig. 2: the Attention cells with their verdicts, then the reference runs' held-out accuracy at each
    evaluation (is the budget enough: still rising at the last step, or flat), then the other families as
    context."""
    anchor = ANCHORS["zoology-mqar"]
    pub = entries("zoology-mqar")
    ref = {p.key: p for p in pub if p.model == anchor.reference}
    ours = {(c["seq_len"], c["num_pairs"], c["d_model"]): c for c in cells or [] if c["model"] == anchor.family}
    curves = [run for key in sorted(ours) for run in ours[key].get("runs", [])]
    rows = []
    for key in sorted(set(ref) | set(ours)):
        p, m = ref.get(key), ours.get(key)
        mean = m.get("valid_accuracy_mean") if m else None
        v, why = verdict(
            p.value if p else None,
            mean,
            m["n"] if m else 0,
            anchor.tolerance,
            m.get("samples") if m else None,
            paper_samples(anchor),
        )
        if m and m.get("diverged"):
            why += f"; {m['diverged']} run(s) at the best rate diverged (scored 0)"
        if m and m.get("unfinished"):
            why += f"; {m['unfinished']} run(s) of this cell not finished"
        rows.append(
            {
                "T, pairs, d_model": ", ".join(map(str, key)),
                "published (Attention)": published_text(p),
                "measured (attention)": measured_text(m),
                "best lr (rates tried)": f"{m['lr']:g} ({m['lrs']})" if m and mean is not None else "–",
                "steps × batch = samples": (
                    f"{m['steps']} × {m['batch_size']} = {m['samples']:,}" if m and mean is not None else "–"
                ),
                "verdict": v,
                "reason": why,
                "_key": key,
                "_published": p.value if p else None,
                "_measured": m,
            }
        )
    context = _zoology_context(pub, cells or [], anchor)
    cols = [c for c in rows[0] if not c.startswith("_")] if rows else []
    text = [
        "### Zoology MQAR (arXiv:2312.04927, Fig. 2): attention is the calibration",
        "",
        f"Published: {pub[0].source}; read off the plot to ±{pub[0].precision:g} (how: `seqzoo/experiments/"
        f"published.py`). Zoology's training budget: {anchor.budget}, at most "
        f"{paper_samples(anchor):,} samples per run. Tolerance {anchor.tolerance:g}. Measured: "
        f"{'not run' if cells is None else 'the best rate of the sweep, mean (min–max) over the seeds'}.",
        "",
        markdown_table(rows, cols),
        "",
    ]
    if curves:
        text += [
            f"Held-out accuracy of each finished {anchor.family} run (every rate, the largest budget of its cell) at "
            "each evaluation: whether the budget is enough (still rising at the last step, or flat).",
            "",
            curves_table(curves),
            "",
        ]
    text += [
        "Context (no verdict): the other architectures of Fig. 2, published, and seqzoo's other families, measured "
        "(best rate, mean (min–max) over seeds).",
        "",
        context,
        "",
    ]
    data = {"anchor": anchor.name, "tolerance": anchor.tolerance, "budget": anchor.budget, "command": command}
    data["cells"] = [{k: r[k] for k in ("_key", "_published", "_measured", "verdict", "reason")} for r in rows]
    data["curves"] = curves
    return "\n".join(text), data


def _zoology_context(pub: list[Published], cells: list[dict[str, Any]], anchor: Anchor) -> str:
    others = list(dict.fromkeys(p.model for p in pub if p.model != anchor.reference))
    families = list(dict.fromkeys(c["model"] for c in cells if c["model"] != anchor.family))
    by_pub = {(p.model, p.key): p for p in pub}
    by_ours = {(c["model"], (c["seq_len"], c["num_pairs"], c["d_model"])): c for c in cells}
    keys = sorted({p.key for p in pub if p.value is not None} | {k for (_, k) in by_ours})
    rows = []
    for key in keys:
        row = {"T, pairs, d_model": ", ".join(map(str, key))}
        row.update({f"{m} (published)": published_text(by_pub.get((m, key))) for m in others})
        row.update({f"{f} (measured)": measured_text(by_ours.get((f, key))) for f in families})
        rows.append(row)
    return markdown_table(rows, list(rows[0])) if rows else "(none)"


def mad_section(cells: list[dict[str, Any]] | None, command: str) -> tuple[str, dict[str, Any]]:
    """MAD's per-task scores: the transformer against attention's measured score, the rest as context."""
    from .mad import task_settings

    anchor = ANCHORS["mad"]
    pub = entries("mad")
    ref = {p.key[0]: p for p in pub if p.model == anchor.reference}
    ours = {c["task"]: c for c in cells or [] if c["model"] == anchor.family}
    rows = []
    for task in ref:
        p, m = ref[task], ours.get(task)
        full = [name for name, _ in task_settings(task, "all", {})]
        missing, short = "", None
        if m:
            if len(m["settings"]) < len(full):
                missing = f"scored over {len(m['settings'])} of the task's {len(full)} settings"
            short = [
                (s, n, paper_samples(anchor, m["train_sizes"][s]))
                for s, n in m["samples"].items()
                if paper_samples(anchor, m["train_sizes"][s]) and n < paper_samples(anchor, m["train_sizes"][s])
            ]
        v, why = verdict(
            p.value,
            m["score_mean"] if m else None,
            m["n"] if m else 0,
            anchor.tolerance,
            short[0][1] if short else None,
            short[0][2] if short else None,
            missing,
        )
        rows.append(
            {
                "task": task,
                "published (Transformer)": published_text(p),
                "measured (attention)": measured_text(m, "score"),
                "settings": f"{len(m['settings'])} of {len(full)}" if m else "–",
                "samples per setting": ", ".join(f"{s}: {n:,}" for s, n in m["samples"].items()) if m else "–",
                "verdict": v,
                "reason": why,
                "_published": p.value,
                "_measured": m,
            }
        )
    families = list(dict.fromkeys(c["model"] for c in cells or [] if c["model"] != anchor.family))
    by_ours = {(c["model"], c["task"]): c for c in cells or []}
    context = []
    for task in ref:
        row = {"task": task}
        for p in pub:
            if p.key[0] == task and p.model != anchor.reference:
                row[f"{p.model} (published)"] = published_text(p)
        row.update({f"{f} (measured)": measured_text(by_ours.get((f, task)), "score") for f in families})
        context.append(row)
    cols = [c for c in rows[0] if not c.startswith("_")]
    text = [
        "### MAD (arXiv:2403.17844): the transformer is the calibration",
        "",
        f"Published: {pub[0].source}: not found (`seqzoo/experiments/published.py` says where it was looked for). "
        f"MAD's training budget: {anchor.budget}. Tolerance {anchor.tolerance * 100:g} points. Measured: "
        f"{'not run' if cells is None else 'the MAD score (mean over the settings measured), mean (min–max) over seeds'}.",
        "",
        markdown_table(rows, cols),
        "",
        "Context (no verdict): the other architectures of the MAD table, published, and seqzoo's other families.",
        "",
        markdown_table(context, list(context[0])),
        "",
    ]
    data = {"anchor": anchor.name, "tolerance": anchor.tolerance, "budget": anchor.budget, "command": command}
    data["cells"] = [
        {"task": r["task"], **{k: r[k] for k in ("_published", "_measured", "verdict", "reason")}} for r in rows
    ]
    return "\n".join(text), data


def xlstm_section() -> tuple[str, dict[str, Any]]:
    pub = entries("xlstm-mqar")
    text = [
        "### xLSTM MQAR (arXiv:2405.04517, §4.1): the second anchor",
        "",
        f"Published: {pub[0].source}: not found, neither the values nor the figure's settings "
        f"({', '.join(p.model for p in pub)} rows); no cell has a verdict.",
        "",
    ]
    return "\n".join(text), {"anchor": "xlstm-mqar", "cells": [{"model": p.model, "kind": p.kind} for p in pub]}


@register_experiment("calibration", "published numbers beside measured ones, a verdict per cell (docs/calibration.md)")
def calibration(out_dir: Path, zoology: str = "", mad: str = "") -> dict[str, Any]:
    """``zoology`` / ``mad``: output folders of those experiments (empty: not run). Writes calibration.{md,json}."""
    from .calibration_measured import mad_cells, zoology_cells

    zoology_rows = zoology_cells(str(zoology), "zoology") if zoology else None  # refusals before anything is written
    mad_rows = mad_cells(str(mad), "mad") if mad else None
    sets = [f"--set {k}={v}" for k, v in (("zoology", zoology), ("mad", mad)) if v]
    command = " ".join(["seqzoo experiment calibration --out", str(out_dir), *sets])
    parts = [zoology_section(zoology_rows, command), xlstm_section(), mad_section(mad_rows, command)]
    text = "\n".join(
        ["## Published and measured", "", RULES, "", "Regenerate this section with:", "", "```bash", command, "```", ""]
        + [t for t, _ in parts]
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.md").write_text(text.rstrip() + "\n")
    data = {"command": command, "anchors": [d for _, d in parts]}
    (out / "calibration.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    return {"table": text, **data}
