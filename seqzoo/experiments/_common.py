"""Small helpers every experiment uses: option parsing from ``--set`` and results tables as files."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any


def as_list(v: Any) -> list[str]:
    """``"a,b"`` or ``["a", "b"]`` -> ``["a", "b"]`` (``--set`` passes comma lists as strings)."""
    if isinstance(v, (list, tuple)):
        return list(v)
    return [s.strip() for s in str(v).split(",") if s.strip()]


def as_ints(v: Any) -> list[int]:
    return [int(s) for s in as_list(v)]


def write_rows(out: Path, rows: list[dict[str, Any]], stem: str = "results") -> None:
    """``<stem>.json`` (everything) and ``<stem>.csv`` (the scalar columns, in first-seen order)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=2) + "\n")
    if rows:
        keys = list(dict.fromkeys(k for r in rows for k in r if not isinstance(r[k], (list, dict))))
        with open(out / f"{stem}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
