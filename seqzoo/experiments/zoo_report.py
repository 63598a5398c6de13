"""The zoo report: the findings table (each paper claim against the measured numbers, ``zoo_findings.py``), settings, summary (probe × model, spread over seeds, parameters, wall time, tokens/s),
accuracy-vs-difficulty, loss-vs-position, learning curves, and which differences exceed the seed spread (at the
training length and at the longest evaluated length). Each probe's reference (``Probe.reference``: attention, or the
encoder attention for the encoder probe) is checked for learning it. Everything is drawn from the sweep's run
records; tables are also written as csv / json / md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sweep import Report, aggregate, mean_curve, plot_series, separations, write_tables
from ..sweep.grid import code_version
from ..sweep.merge import markdown_table, spread
from .zoo_findings import findings
from .zoo_models import DESCRIPTIONS

METRICS = ["valid_accuracy", "valid_loss", "params", "train_s", "tokens_per_s"]
MIN_GAP = 0.02  # separations closer than this (e.g. 0.998 vs 1.000) are listed in separations.json only
LONGEST = "at_longest"  # the probe's metric at its longest evaluated length (see longest_length_value)


def _higher(metric: str) -> bool:
    return "acc" in metric


def longest_length_value(record: dict[str, Any], probe) -> float | None:
    """The probe's metric at its longest evaluated length: the accuracy of ``acc_by_length`` ([L, loss, accuracy])
    for probes rebuilt longer, the loss of ``by_length`` ([L, loss]) for the text probe; None where not measured."""
    metrics = record.get("metrics") or {}
    if (probe.eval or {}).get("task_lengths") and metrics.get("acc_by_length"):
        return float(max(metrics["acc_by_length"], key=lambda row: row[0])[2])
    if (probe.eval or {}).get("lengths") and metrics.get("by_length"):
        return float(max(metrics["by_length"], key=lambda row: row[0])[1])
    return None


def _with_longest(records: list[dict[str, Any]], probes: dict[str, Any]) -> list[dict[str, Any]]:
    """The records with ``at_longest`` added to their metrics (new dicts: the run records are not touched)."""
    out = []
    for r in records:
        p = probes.get(r["labels"].get("probe"))
        v = longest_length_value(r, p) if p is not None else None
        out.append(r if v is None else {**r, "metrics": {**r["metrics"], LONGEST: v}})
    return out


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
                "at longest length": (
                    f"{spread(r, LONGEST)} at {probes[r['probe']].longest_length()}"
                    if r.get(f"{LONGEST}_mean") is not None
                    else "-"
                ),
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
    missing = [r for r in records if r.get("status") == "missing"]  # collect-only: not trained (yet)
    records = _with_longest([r for r in records if r.get("status") != "missing"], probes)
    rows = aggregate(records, [*METRICS, LONGEST])
    write_tables(rows, out, "results")
    summary = _summary_rows(rows, probes)
    write_tables(summary, out, "summary")
    figs = out / "figures"
    rep = Report(f"seqzoo zoo — suite {settings['suite']}")

    found = findings(rows, probes, LONGEST, MIN_GAP)
    write_tables(found, out, "findings")
    rep.heading("Findings: each paper claim against what was measured")
    if found:
        rep.table(found, ["probe", "setting", "claim", "measured", "verdict", "calibrated"])
    else:
        rep.text("No probe of this run states a claim as a comparison of two of its models.")

    rep.heading("Settings")
    rep.bullets(
        [
            f"width d_model={settings['d_model']}, depth {settings['n_layers']} blocks, seeds "
            f"{', '.join(str(s) for s in settings['seeds'])}, attention heads {settings.get('attention_heads', '-')}",
            f"code version {code_version('seqzoo.sweep.train_run:train_run')}; runs under {out / 'runs'}",
            *(f"skipped probe — {s}" for s in settings["skipped"]),
            *(
                [f"text corpus {settings['text']} (sha256 {settings['text_sha256']})"]
                if settings.get("text_sha256")
                else []
            ),
            *(
                [f"{len(missing)} runs of the grid are not trained yet (collect only): listed at the end"]
                if missing
                else []
            ),
        ]
    )
    rep.table([{"model": m, "what it is": DESCRIPTIONS.get(m, m)} for m in settings["models"]], ["model", "what it is"])
    probe_rows = [
        {
            "probe": info["probe"].name,
            "claim": info["probe"].claim,
            "task": _settings_text(info["task"]),
            "difficulty": f"{info['probe'].axis} ∈ {', '.join(map(str, info['probe'].values))}"
            if info["probe"].axis
            else "-",
            "budget": _settings_text(info["train"]),
        }
        for info in settings["probes"]
    ]
    if probe_rows:
        rep.table(probe_rows, list(probe_rows[0]))

    rep.heading("Summary (mean over seeds, min–max in brackets)")
    rep.table(summary, list(summary[0]) if summary else ["probe"])

    rep.heading("Does the reference (attention; the encoder attention on the encoder probe) learn each probe?")
    checks = []
    for r in rows:
        if r["model"] != probes[r["probe"]].reference:
            continue
        m = probes[r["probe"]].metric
        if _higher(m):
            ok = r[f"{m}_min"] is not None and r[f"{m}_min"] >= 0.95
            verdict = "learned" if ok else "NOT learned (no claim from this setting)"
            checks.append(f"{r['probe']} {r['setting']}: {r['model']} worst seed {m} {_f(r[f'{m}_min'])} — {verdict}")
        else:
            best = min(
                (
                    x[f"{m}_mean"]
                    for x in rows
                    if x["probe"] == r["probe"] and x["setting"] == r["setting"] and x[f"{m}_mean"] is not None
                ),
                default=None,
            )
            checks.append(
                f"{r['probe']} {r['setting']}: {r['model']} mean {m} {_f(r[f'{m}_mean'])} (best of all models {_f(best)})"
            )
    rep.bullets(checks or ["no probe's reference is in this run"])

    rep.heading("Differences beyond the seed spread")
    seps = []
    for name, p in probes.items():
        sub = [r for r in rows if r["probe"] == name]
        seps += separations(sub, p.metric, by="model", within=["probe", "setting"], higher_is_better=_higher(p.metric))
        if p.longest_length() is not None:
            far = separations(sub, LONGEST, by="model", within=["probe", "setting"], higher_is_better=_higher(p.metric))
            seps += [{**s, "metric": f"{p.metric} at length {p.longest_length()}"} for s in far]
    measured = [s for s in seps if not s["n1"]]
    wide = [s for s in measured if _gap(s) >= MIN_GAP]
    if wide:
        rep.bullets(_sep_lines(wide))
    else:
        rep.text(f"None measured: no pair of models with ≥ 2 seeds each has ranges apart by ≥ {MIN_GAP}.")
    if len(wide) < len(measured):
        rep.text(
            f"{len(measured) - len(wide)} further pairs have ranges that do not overlap but lie less than {MIN_GAP} "
            "apart (models at the same ceiling); they are in separations.json."
        )
    if any(s["n1"] for s in seps):
        rep.text(f"With one seed there is no spread: {sum(s['n1'] for s in seps)} one-seed differences are not listed.")
    write_tables(seps, out, "separations")

    for name, p in probes.items():
        if p.axis and len(p.values) > 1:  # one difficulty value: a plot with one point says nothing a table does not
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
        title = name if hardest is None else f"{name} {label}"
        curves = {m: mean_curve(rs, "curve") for m, rs in _by_model(records, probe=name, setting=label).items()}
        png = plot_series(
            figs / f"{name}_curves.png", curves, "step", "train loss", f"{title}: learning curves", logy=True
        )
        rep.heading(f"{title}: learning curves")
        rep.figure(png, f"{title}: training loss (mean over seeds)")

    if missing:
        rep.heading("Not trained yet")
        rep.bullets([" ".join(f"{k}={v}" for k, v in r["labels"].items()) for r in missing])
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
        "missing": len(missing),
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


def _settings_text(d: dict[str, Any]) -> str:
    """Settings as ``key value`` pairs for a table cell, not a Python dict."""
    return ", ".join(f"{k} {v}" for k, v in d.items())


def _f(v: Any) -> str:
    return "-" if v is None else f"{v:.4g}"


def _gap(s: dict[str, Any]) -> float:
    """The distance between the two seed ranges of a separation (≥ 0)."""
    (b_lo, b_hi), (w_lo, w_hi) = s["better_range"], s["worse_range"]
    return max(b_lo - w_hi, w_lo - b_hi)


def _sep_lines(seps: list[dict[str, Any]]) -> list[str]:
    """One line per (probe, setting, metric, better model): ``A [lo, hi] beats B [lo, hi], C [lo, hi]``."""
    grouped: dict[tuple, list[dict]] = {}
    for s in seps:
        grouped.setdefault((*s["group"].values(), s["metric"], s["better"]), []).append(s)
    lines = []
    for key, group in grouped.items():
        *g, metric, better = key
        lo, hi = group[0]["better_range"]
        worse = ", ".join(f"{s['worse']} [{s['worse_range'][0]:.3g}, {s['worse_range'][1]:.3g}]" for s in group)
        lines.append(
            f"{' '.join(str(v) for v in g if v != '-')}, {metric}: {better} [{lo:.3g}, {hi:.3g}] beats {worse}"
        )
    return lines
