"""``seqzoo bench``: time and peak memory of mixers (and their modes) vs sequence length.

Every figure is also given as a ratio to the baseline (attention, default mode) at the same length,
measured in the same run. Results go to ``bench.csv`` / ``bench.json`` and ``bench.png``.

``doc_length`` (``--doc-length N``): every point is also timed on packed rows, documents of N tokens
(``segment_pos`` to the mixer), and those rows get ``packed = N`` and ``<figure>_vs_unpacked``: the ratio to the
same mixer, mode and length on unpacked rows, measured in the same run.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..errors import InputError
from ..mixers import MIXERS
from .measure import measure_point
from .table import markdown_table

FIELDS = ("fwd_ms", "fwdbwd_ms", "fwd_mem_mb", "fwdbwd_mem_mb")


def _run_point(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    if spec["device"].startswith("cuda"):
        try:
            return measure_point(**spec)
        except Exception as e:  # e.g. out of memory: recorded, the sweep goes on
            return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "seqzoo.bench.measure", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timeout > {timeout:.0f}s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_mixer_bench(
    mixers: list[str],
    lengths: list[int],
    modes: str | list[str] = "default",
    d_model: int = 64,
    batch: int = 1,
    mixer_kwargs: dict[str, dict] | None = None,
    baseline: str | None = "attention",
    device: str = "cpu",
    dtype: str = "float32",
    backward: bool = True,
    timeout: float = 300.0,
    min_run_time: float = 0.3,
    threads: int | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    doc_length: int | None = None,
) -> list[dict[str, Any]]:
    """Measure every (mixer, mode, length); ``modes`` is "default", "all" or a list of mode names; with
    ``doc_length`` also on rows packing documents of that many tokens (module docstring)."""
    for name in mixers + ([baseline] if baseline else []):
        if name not in MIXERS:
            raise InputError(f"unknown mixer {name!r}; registered mixers: {sorted(MIXERS)}")
    if doc_length is not None:
        if not isinstance(doc_length, int) or isinstance(doc_length, bool) or doc_length < 1:
            raise InputError(f"doc_length must be a positive int (tokens per packed document), got {doc_length!r}")
        unpackable = sorted(
            {n for n in mixers + ([baseline] if baseline else []) if not MIXERS[n].supports_segment_pos}
        )
        if unpackable:
            raise InputError(f"doc_length: mixer(s) {unpackable} do not take segment_pos (packed documents)")
    if not lengths or any(int(t) <= 0 for t in lengths):
        raise InputError(f"lengths must be positive ints, got {lengths}")
    if modes not in ("default", "all"):
        known = {m for name in mixers for m in MIXERS[name].modes}
        unknown = [m for m in modes if m not in known]
        if unknown:
            raise InputError(f"--modes: unknown mode(s) {unknown} for mixers {mixers} (their modes: {sorted(known)})")
    mixer_kwargs = mixer_kwargs or {}
    points: list[tuple[str, str | None]] = []
    if baseline and not (baseline in mixers and modes == "default"):
        points.append((baseline, None))
    for name in mixers:
        cls = MIXERS[name]
        if modes == "default":
            chosen = [None]
        elif modes == "all":
            chosen = list(cls.modes)
        else:
            chosen = [m for m in modes if m in cls.modes]
            if not chosen:
                raise InputError(f"none of the modes {modes} belongs to {name} (modes: {cls.modes})")
        points += [(name, m) for m in chosen]
    rows = []
    packings = [None] if doc_length is None else [None, doc_length]
    todo = [(n, m, T, p) for T in lengths for n, m in points for p in packings]
    for name, mode, T, packed in tqdm(todo, desc="bench", disable=not progress):
        spec = {
            "mixer": name,
            "mode": mode,
            "T": int(T),
            "d_model": d_model,
            "batch": batch,
            "mixer_kwargs": mixer_kwargs.get(name, {}),
            "device": device,
            "dtype": dtype,
            "backward": backward,
            "min_run_time": min_run_time,
            "threads": threads,
            **({"doc_length": packed} if packed else {}),
        }
        res = _run_point(spec, timeout)
        packing = {} if doc_length is None else {"packed": packed or 0}
        rows.append({"mixer": name, "mode": mode or "default", "T": int(T), **packing, **res})
    add_ratios(rows, baseline)
    add_packed_ratios(rows)
    if out_dir is not None:
        write_results(
            rows,
            Path(out_dir),
            meta={
                "d_model": d_model,
                "batch": batch,
                "device": device,
                "dtype": dtype,
                "baseline": baseline,
                "mixer_kwargs": mixer_kwargs,
                "doc_length": doc_length,
            },
        )
    return rows


def add_ratios(rows: list[dict[str, Any]], baseline: str | None) -> None:
    if not baseline:
        return
    # packed rows against the baseline on packed rows of the same length
    base = {(r["T"], r.get("packed")): r for r in rows if r["mixer"] == baseline and r["mode"] == "default"}
    for r in rows:
        b = base.get((r["T"], r.get("packed")))
        for f in FIELDS:
            if b and f in r and b.get(f):
                r[f"{f}_ratio"] = r[f] / b[f]


def add_packed_ratios(rows: list[dict[str, Any]], point=("mixer", "mode", "T"), fields=FIELDS) -> None:
    """``<field>_vs_unpacked``: each packed row's figures over those of the same point (the ``point`` keys: mixer,
    mode and length here; bench, family and length in the model suite) on unpacked rows, measured in the same run."""
    unpacked = {tuple(r[k] for k in point): r for r in rows if r.get("packed") == 0 and "error" not in r}
    for r in rows:
        u = unpacked.get(tuple(r[k] for k in point)) if r.get("packed") else None
        for f in fields:
            if u and f in r and u.get(f):
                r[f"{f}_vs_unpacked"] = r[f] / u[f]


def write_results(rows: list[dict[str, Any]], out: Path, meta: dict[str, Any]) -> None:
    from ..plots import plot_bench

    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    cols = ["mixer", "mode", "T", "packed", *FIELDS, *(f"{f}_ratio" for f in FIELDS)]
    cols += [*(f"{f}_vs_unpacked" for f in FIELDS), "error"]
    with open(out / "bench.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    plot_bench(rows, out / "bench.png", title=f"d_model={meta['d_model']}, batch={meta['batch']}, {meta['device']}")


def format_table(rows: list[dict[str, Any]]) -> str:
    lead = [("mixer", lambda r: r["mixer"]), ("mode", lambda r: r["mode"]), ("T", lambda r: r["T"])]
    if any("packed" in r for r in rows):
        lead.append(("packed docs", lambda r: r["packed"] or "-"))
    metrics = [
        ("fwd ms", "fwd_ms", "{:.2f}"),
        ("fwd+bwd ms", "fwdbwd_ms", "{:.2f}"),
        ("fwd+bwd peak MB", "fwdbwd_mem_mb", "{:.1f}"),
        ("fwd+bwd time / baseline", "fwdbwd_ms_ratio", "{:.2f}"),
        ("memory / baseline", "fwdbwd_mem_mb_ratio", "{:.2f}"),
    ]
    if any("packed" in r for r in rows):
        metrics.append(("fwd+bwd time / unpacked", "fwdbwd_ms_vs_unpacked", "{:.2f}"))
    return "\n".join(markdown_table(rows, lead, metrics))
