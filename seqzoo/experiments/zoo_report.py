"""The zoo report: settings, summary (probe × model, spread over seeds, parameters, wall time, tokens/s),
accuracy-vs-difficulty, loss-vs-position, learning curves, and which differences exceed the seed spread.
Everything is drawn from the sweep's run records; tables are also written as csv / json / md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sweep import Report, aggregate, mean_curve, plot_series, separations, write_tables
from ..sweep.grid import code_version
from ..sweep.merge import markdown_table, spread
from .zoo_models import DESCRIPTIONS

METRICS = ["valid_accuracy", "valid_loss", "params", "train_s", "tokens_per_s"]
REFERENCE = "attention"


def _higher(metric: str) -> bool:
    return "acc" in metric


def _summary_rows(rows: list[dict[str, Any]], probes: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        m = probes[r["probe"]].metric
        out.append(
            {
                "probe": r["probe"],
                "setting": r["setting"],
                "model": r["model"],
                "seeds": r["n"],
                "metric": m.replace("valid_", ""),
                "mean (min–max)": spread(r, m),
                "params": int(r["params_mean"]) if r["params_mean"] is not None else None,
                "wall s": r["train_s_mean"],
                "train tokens/s": r["tokens_per_s_mean"],
                "errors": r["errors"],
            }
        )
    return out


def _by_model(records, **labels) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in records:
        if all(r["labels"].get(k) == v for k, v in labels.items()) and r.get("status") != "error":
            out.setdefault(r["labels"]["model"], []).append(r)
    return out


def write_zoo_report(out: Path, records: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    probes = {i["probe"].name: i["probe"] for i in settings["probes"]}
    rows = aggregate(records, METRICS)
    write_tables(rows, out, "results")
    summary = _summary_rows(rows, probes)
    write_tables(summary, out, "summary")
    figs = out / "figures"
    rep = Report(f"seqzoo zoo — suite {settings['suite']}")

    rep.heading("Settings")
    rep.bullets(
        [
            f"models: {', '.join(f'{m} ({DESCRIPTIONS.get(m, m)})' for m in settings['models'])}",
            f"width d_model={settings['d_model']}, depth {settings['n_layers']} blocks, seeds {settings['seeds']}",
            f"code version {code_version('seqzoo.sweep.train_run:train_run')}; runs under {out / 'runs'}",
            *(f"skipped probe — {s}" for s in settings["skipped"]),
        ]
    )
    for info in settings["probes"]:
        p = info["probe"]
        axis = f"; difficulty {p.axis} ∈ {list(p.values)}" if p.axis else ""
        rep.text(f"{p.name}: {p.claim}. Task {info['task']}{axis}. Budget {info['train']}.")

    rep.heading("Summary (mean over seeds, min–max in brackets)")
    rep.table(summary, list(summary[0]) if summary else ["probe"])

    rep.heading("Does the attention reference learn each probe?")
    checks = []
    for r in rows:
        if r["model"] != REFERENCE:
            continue
        m = probes[r["probe"]].metric
        if _higher(m):
            ok = r[f"{m}_min"] is not None and r[f"{m}_min"] >= 0.95
            verdict = "learned" if ok else "NOT learned (no claim from this setting)"
            checks.append(f"{r['probe']} {r['setting']}: worst seed {m} {_f(r[f'{m}_min'])} — {verdict}")
        else:
            best = min(
                (
                    x[f"{m}_mean"]
                    for x in rows
                    if x["probe"] == r["probe"] and x["setting"] == r["setting"] and x[f"{m}_mean"] is not None
                ),
                default=None,
            )
            checks.append(f"{r['probe']} {r['setting']}: mean {m} {_f(r[f'{m}_mean'])} (best of all models {_f(best)})")
    rep.bullets(checks or ["attention is not in this run"])

    rep.heading("Differences beyond the seed spread")
    seps = []
    for name, p in probes.items():
        sub = [r for r in rows if r["probe"] == name]
        seps += separations(sub, p.metric, by="model", within=["probe", "setting"], higher_is_better=_higher(p.metric))
    measured = [s for s in seps if not s["n1"]]
    if measured:
        rep.bullets([_sep_text(s) for s in measured])
    else:
        rep.text("None measured: no pair of models with ≥ 2 seeds each has non-overlapping ranges.")
    if any(s["n1"] for s in seps):
        rep.text(f"With one seed there is no spread: {sum(s['n1'] for s in seps)} one-seed differences are not listed.")

    for name, p in probes.items():
        if p.axis:
            series = {}
            for model, recs in _by_model(records, probe=name).items():
                pts = [(r["labels"]["setting"], r["metrics"].get(p.metric)) for r in recs]
                xs = sorted({float(s.split("=")[1]) for s, _ in pts})
                vals = {x: [v for s, v in pts if float(s.split("=")[1]) == x and v is not None] for x in xs}
                series[model] = (xs, [sum(vals[x]) / len(vals[x]) for x in xs])
                series[model + " spread"] = (xs, [min(vals[x]) for x in xs], [max(vals[x]) for x in xs])
            png = plot_series(
                figs / f"{name}_difficulty.png", series, p.axis, p.metric, f"{name}: {p.metric} vs {p.axis}"
            )
            rep.heading(f"{name}: {p.metric} vs difficulty")
            rep.figure(png, f"{name}: {p.metric} vs {p.axis} (mean, band = min–max over seeds)")
        if p.eval and p.eval.get("lengths"):
            by_model = _by_model(records, probe=name)
            pos = {m: mean_curve(rs, "per_position") for m, rs in by_model.items()}
            png = plot_series(
                figs / f"{name}_per_position.png",
                pos,
                "position",
                "loss (nats/token)",
                f"{name}: loss per position in {max(p.eval['lengths'])}-token windows; trained at T={p.task['seq_len']}",
            )
            rep.heading(f"{name}: loss per position past the training length")
            rep.figure(png, f"{name}: mean loss per position (bins), trained at {p.task['seq_len']}")
            lens = {m: mean_curve(rs, "by_length") for m, rs in by_model.items()}
            png = plot_series(
                figs / f"{name}_by_length.png",
                lens,
                "evaluation length",
                "loss",
                f"{name}: loss vs evaluation length",
                logx=True,
            )
            rep.figure(png, f"{name}: held-out loss vs evaluation length")
        if p.eval and p.eval.get("task_lengths"):
            _length_section(rep, figs, name, p, _by_model(records, probe=name))
        hardest = p.settings()[-1]
        label = "-" if hardest is None else f"{p.axis}={hardest}"
        curves = {m: mean_curve(rs, "curve") for m, rs in _by_model(records, probe=name, setting=label).items()}
        png = plot_series(
            figs / f"{name}_curves.png", curves, "step", "train loss", f"{name} {label}: learning curves", logy=True
        )
        rep.heading(f"{name}: learning curves ({label})")
        rep.figure(png, f"{name} {label}: training loss (mean over seeds)")

    errors = [r for r in records if r.get("status") == "error"]
    if errors:
        rep.heading("Errors")
        rep.bullets([f"{r['labels']}: {r['error']} ({r['run_dir']}/error.txt)" for r in errors])
    md, page = rep.write(out)

    table = markdown_table(summary, list(summary[0])) if summary else "(no runs)"
    return {
        "rows": rows,
        "summary": summary,
        "table": table,
        "report": str(page),
        "errors": len(errors),
        "out_dir": str(out),
    }


def _length_section(rep: Report, figs: Path, name: str, p, by_model: dict[str, list[dict]]) -> None:
    """Accuracy at each evaluation length of a probe trained at ``p.task["seq_len"]`` (the task rebuilt longer):
    a table (mean over seeds) and a figure, like the text probe's loss vs length."""
    lengths = list(p.eval["task_lengths"])
    acc = {}
    for model, recs in by_model.items():
        pts = [[row[0], row[2]] for r in recs for row in (r.get("metrics") or {}).get("acc_by_length") or []]
        acc[model] = mean_curve([{"metrics": {"a": pts}}], "a")
    rows = [{"model": m, **{f"T={L}": _f(dict(zip(*acc[m])).get(L)) for L in lengths}} for m in acc if acc[m][0]]
    rep.heading(f"{name}: accuracy at longer lengths (trained at seq_len={p.task['seq_len']})")
    if not rows:
        rep.text("No finished runs.")
        return
    rep.table(rows, list(rows[0]))
    png = plot_series(
        figs / f"{name}_by_length.png",
        acc,
        "evaluation seq_len",
        "accuracy",
        f"{name}: accuracy vs length; trained at {p.task['seq_len']}",
        logx=True,
    )
    rep.figure(png, f"{name}: held-out accuracy at each evaluation length (mean over seeds)")


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.4g}"


def _sep_text(s: dict[str, Any]) -> str:
    g = " ".join(str(v) for v in s["group"].values())
    lo, hi = s["better_range"], s["worse_range"]
    return (
        f"{g}: {s['better']} [{lo[0]:.3g}, {lo[1]:.3g}] beats {s['worse']} [{hi[0]:.3g}, {hi[1]:.3g}] on {s['metric']}"
    )
