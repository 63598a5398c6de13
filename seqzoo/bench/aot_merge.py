"""Merge the rows of a one-op compile check into the committed compile table (``seqzoo kernels merge``).

A full ``seqzoo kernels check`` compiles thousands of configs (hours on a small machine). When one op's kernels
change, ``seqzoo kernels check --ops slstm --out DIR`` recompiles only that op, and this module replaces that op's
rows in the committed table with them:

- ``compile_table.csv``: every row of the merged ops is dropped and the new rows appended (the ``COLUMNS`` of
  ``aot.py``, as ``write_outputs`` writes them without the scenario and compile-time columns);
- ``compile_table.md`` (beside it): in "## Summary", the counts become old − those of the dropped rows + those of
  the new rows, the "launch without a kept config" and "not launched" lines of the merged ops are replaced; the
  "## Per kernel, launch and target" table gets the new launches' rows in place of the dropped kernels' rows,
  sorted as ``aot.launch_summary`` sorts them. The prose above "## Summary" is not touched.

The dropped rows carry no scenario (the CSV leaves it out), so their launches are counted as distinct
(kernel, dtype, launch, target): what ``aot.summary`` counts when each launch comes from one scenario, as the
sLSTM's do (``aot.scenarios`` calls each width class once per dtype, mode and packing).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from ..errors import InputError
from .aot import COLUMNS, launch_summary, summary

COUNTS = ("compiled", "errors", "kept", "pruned", "known_faults", "kept_with_spills", "i32_offsets", "launches")
NO_KEPT = "- launch without a kept config: "
NOT_LAUNCHED = "- not launched on any GPU (PyTorch path): "


def _typed(r: dict) -> dict:
    """A CSV row with the types ``aot.check`` gives it (ints, bools), for ``aot.summary``."""
    out = dict(r)
    for k in ("registers", "spill_bytes", "shared", "smem_limit", "i32_offsets"):
        out[k] = int(r[k]) if str(r.get(k, "")).strip() else 0
    for k in ("fits", "kept", "known_fault"):
        out[k] = str(r.get(k, "")).lower() == "true"
    out["launch_has_kept"] = True  # recomputed below from the group
    return out


def _dropped_summary(rows: list[dict]) -> dict:
    typed = [_typed(r) for r in rows]
    groups: dict[tuple, list[dict]] = {}
    for r in typed:
        r["scenario"] = r["dtype"]  # one scenario per launch (module docstring)
        groups.setdefault((r["kernel"], r["dtype"], r["constexprs"], r["target"]), []).append(r)
    for grp in groups.values():
        has = any(g["kept"] for g in grp)
        for g in grp:
            g["launch_has_kept"] = has
    return summary(typed)


def read_rows(path: str | Path) -> tuple[list[dict], dict]:
    """The rows and meta of a check's ``kernels_aot.json``."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--rows={str(path)!r} is not a file: pass the kernels_aot.json of `seqzoo kernels check`")
    try:
        data = json.loads(path.read_text())
        rows, meta = data["rows"], data.get("meta", {})
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"--rows={str(path)!r} is not a kernels_aot.json of `seqzoo kernels check`: {e}") from e
    if not rows or not all({"op", "kernel", "target", "status"} <= set(r) for r in rows):
        raise InputError(f"--rows={str(path)!r} holds no compile rows (op, kernel, target, status)")
    return rows, meta


def merge(table: str | Path, rows: list[dict], meta: dict) -> dict:
    """Replace the ops of ``rows`` in ``table`` (the CSV) and in the markdown beside it; -> the merged counts."""
    table = Path(table)
    md = table.with_suffix(".md")
    for p, what in ((table, "--table"), (md, "the markdown beside --table")):
        if not p.is_file():
            raise InputError(f"{what}: {str(p)!r} is not a file (the committed compile table, .csv and .md)")
    with open(table, newline="") as fh:
        old = list(csv.DictReader(fh))
    if not old or set(COLUMNS) - set(old[0]):
        raise InputError(f"--table={str(table)!r} is not a compile table: it needs the columns {list(COLUMNS)}")
    text = md.read_text()
    if "## Summary" not in text or "## Per kernel, launch and target" not in text:
        raise InputError(f"{str(md)!r} has no '## Summary' / '## Per kernel, launch and target' sections")
    ops = {r["op"] for r in rows}
    dropped = [r for r in old if r["op"] in ops]
    kernels = {r["kernel"] for r in dropped} | {r["kernel"] for r in rows}
    gone, new = _dropped_summary(dropped), summary(rows)

    with open(table, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(COLUMNS), extrasaction="ignore")
        w.writeheader()
        w.writerows([r for r in old if r["op"] not in ops] + rows)

    head, rest = text.split("## Summary", 1)
    bullets, launches = rest.split("## Per kernel, launch and target", 1)
    counts, no_kept, not_launched = {}, [], []
    for line in bullets.splitlines():
        if line.startswith(NO_KEPT):
            if line[len(NO_KEPT) :].split(" ", 1)[0] not in kernels:
                no_kept.append(line)
        elif line.startswith(NOT_LAUNCHED):
            if line[len(NOT_LAUNCHED) :].split(" ", 1)[0] not in ops:
                not_launched.append(line)
        elif line.startswith("- ") and ": " in line:
            k, v = line[2:].split(": ", 1)
            counts[k] = int(v)
    missing = [k for k in COUNTS if k not in counts]
    if missing:
        raise InputError(f"{str(md)!r}: '## Summary' lacks the counts {missing}")
    merged = {k: counts[k] - gone[k] + new[k] for k in COUNTS}
    no_kept = sorted(no_kept + [NO_KEPT + x for x in new["launches_without_kept_config"]])
    not_launched += [NOT_LAUNCHED + x for x in meta.get("not_launched", []) if x.split(" ", 1)[0] in ops]
    lines = [f"- {k}: {merged[k]}" for k in COUNTS] + no_kept + not_launched

    table_lines = [x for x in launches.splitlines() if x.startswith("| ") and not x.startswith("| kernel |")]
    kept_lines = [x for x in table_lines if x.split("|")[1].strip() not in kernels]
    new_lines = [x for x in launch_summary(rows).splitlines()[2:] if x.startswith("| ")]
    body = sorted(kept_lines + new_lines, key=lambda x: tuple(c.strip() for c in x.split("|")[1:5]))
    header = launch_summary([]).splitlines()[:2]
    md.write_text(
        head
        + "## Summary\n\n"
        + "\n".join(lines)
        + "\n\n## Per kernel, launch and target\n\n"
        + "\n".join(header + body)
        + "\n"
    )
    return merged


__all__ = ["merge", "read_rows"]
