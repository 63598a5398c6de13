"""Merge seeds: runs with the same labels except ``seed`` form a group; each scalar metric gets mean, min, max, n.

Tables are files: ``<stem>.json`` (every column), ``<stem>.csv`` and ``<stem>.md``. Curves (lists such as
``curve`` or ``per_position``) are averaged point by point over the seeds that have the same x values.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any


def _group_key(labels: dict[str, Any], drop: str) -> tuple:
    return tuple((k, v) for k, v in labels.items() if k != drop)


def aggregate(records: list[dict[str, Any]], metrics: list[str], over: str = "seed") -> list[dict[str, Any]]:
    """One row per label group (records with status ``error`` are counted in ``errors``, not in the numbers):
    ``{**labels without over, "n": n, "<m>_mean", "<m>_min", "<m>_max", "<m>_values", "errors"}``."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault(_group_key(r["labels"], over), []).append(r)
    rows = []
    for key, recs in groups.items():
        ok = [r for r in recs if r.get("status") != "error"]
        row: dict[str, Any] = {**dict(key), "n": len(ok), "errors": len(recs) - len(ok)}
        for m in metrics:
            vals = [r["metrics"].get(m) for r in ok]
            vals = [float(v) for v in vals if isinstance(v, (int, float)) and math.isfinite(v)]
            row[f"{m}_values"] = vals
            row[f"{m}_mean"] = sum(vals) / len(vals) if vals else None
            row[f"{m}_min"] = min(vals) if vals else None
            row[f"{m}_max"] = max(vals) if vals else None
        rows.append(row)
    return rows


def mean_curve(records: list[dict[str, Any]], name: str) -> tuple[list, list]:
    """Point-wise mean of the metric ``name`` (a list of [x, y, ...]) over the records that have it."""
    by_x: dict[Any, list[float]] = {}
    for r in records:
        for p in (r.get("metrics") or {}).get(name) or []:
            by_x.setdefault(p[0], []).append(float(p[1]))
    xs = sorted(by_x)
    return xs, [sum(by_x[x]) / len(by_x[x]) for x in xs]


def fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def spread(row: dict[str, Any], m: str) -> str:
    """``mean (min–max)``, or just the value for one seed."""
    if row.get(f"{m}_mean") is None:
        return "-"
    if row["n"] <= 1:
        return fmt(row[f"{m}_mean"])
    return f"{fmt(row[f'{m}_mean'])} ({fmt(row[f'{m}_min'])}–{fmt(row[f'{m}_max'])})"


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_tables(rows: list[dict[str, Any]], out: str | Path, stem: str) -> None:
    """``<stem>.json`` (all columns), ``<stem>.csv`` and ``<stem>.md`` (scalar columns, first-seen order)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=2, default=str) + "\n")
    cols = list(dict.fromkeys(k for r in rows for k, v in r.items() if not isinstance(v, (list, dict))))
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    (out / f"{stem}.md").write_text(markdown_table(rows, cols) + "\n")


def separations(rows: list[dict[str, Any]], metric: str, by: str, within: list[str], higher_is_better: bool = True):
    """Pairs (A, B) inside each ``within`` group where A's worst seed beats B's best seed on ``metric``
    (A's min > B's max; for a loss, A's max < B's min). Only groups with n ≥ 2 on both sides count as measured
    spread; one-seed pairs are returned with ``n1 = True`` so callers can say no spread was measured."""
    out = []
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in within), []).append(r)
    for gkey, rs in groups.items():
        for a in rs:
            for b in rs:
                if a is b or a.get(f"{metric}_mean") is None or b.get(f"{metric}_mean") is None:
                    continue
                beats = (
                    a[f"{metric}_min"] > b[f"{metric}_max"]
                    if higher_is_better
                    else a[f"{metric}_max"] < b[f"{metric}_min"]
                )
                if beats:
                    out.append(
                        {
                            "group": dict(zip(within, gkey)),
                            "better": a[by],
                            "worse": b[by],
                            "metric": metric,
                            "better_range": (a[f"{metric}_min"], a[f"{metric}_max"]),
                            "worse_range": (b[f"{metric}_min"], b[f"{metric}_max"]),
                            "n1": a["n"] < 2 or b["n"] < 2,
                        }
                    )
    return out
