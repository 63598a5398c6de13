"""Markdown tables of benchmark rows: the leading columns name the point, the metric columns are formatted
numbers ("-" when missing); a row with an ``error`` shows it in the first metric column."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def markdown_table(
    rows: list[dict[str, Any]], lead: list[tuple[str, Callable[[dict], Any]]], metrics: list[tuple[str, str, str]]
) -> list[str]:
    """``lead``: (header, row -> cell); ``metrics``: (header, key, format). Returns the table's lines."""

    def line(cells: list[Any]) -> str:
        return "|" + "".join(f" {c} |" if c != "" else " |" for c in cells)

    lines = [line([h for h, _ in lead] + [h for h, _, _ in metrics]), "|" + "---|" * (len(lead) + len(metrics))]
    for r in rows:
        cells = [fn(r) for _, fn in lead]
        if "error" in r:
            cells += [r["error"]] + [""] * (len(metrics) - 1)
        else:
            cells += ["-" if r.get(key) is None else fmt.format(r[key]) for _, key, fmt in metrics]
        lines.append(line(cells))
    return lines
