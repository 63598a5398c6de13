"""The short summary of the ahead-of-time compile table: one row per kernel x target (``seqzoo kernels summary``).

The full table (``bench/aot.py: write_outputs``, one row per compile) is thousands of rows; the docs show this
summary instead: over the *kept* configs of each kernel on each target (the ones the autotune hook may launch), the
range of registers per thread, of shared memory and of theoretical occupancy, and the largest spill among all its
compiles (kept configs never spill).

Occupancy is the CUDA occupancy calculator's, from the compile's resources alone (no GPU):

    blocks/SM = min(32, ⌊64 / w⌋, ⌊(65536 / R_warp) / w⌋, ⌊S_SM / (S + 1024)⌋),   occupancy = blocks·w / 64

with w warps per block (the config's ``num_warps``), R_warp = 256·⌈32·r / 256⌉ registers per warp for r registers
per thread, S bytes of shared memory per block plus the 1 KB the driver reserves per block, and S_SM the shared
memory of one SM (``SM_SHARED``). All three targets have 64K registers, 64 warps and 32 blocks per SM.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from pathlib import Path

from ..errors import InputError

MAX_WARPS = 64  # resident warps per SM on sm_80, sm_90 and sm_100
MAX_BLOCKS = 32  # resident blocks per SM on the three targets
REGISTERS = 65536  # 32-bit registers per SM
REGISTER_UNIT = 256  # registers are allocated to a warp in units of 256
RESERVED_SHARED = 1024  # shared memory the driver reserves per block (sm_80 and later)
SM_SHARED = {"sm_80": 167936, "sm_90": 233472, "sm_100": 233472}  # shared memory per SM: 164 KB, 228 KB, 228 KB

_WARPS = re.compile(r"(?:^|,)w(\d+),s\d+$")


def warps(config: str) -> int:
    """The warps per block of a config label (``prune.config_label``: ``"BV=16,w8,s1"`` -> 8)."""
    m = _WARPS.search(config)
    if m is None:
        raise InputError(f"config label {config!r} has no ',w<warps>,s<stages>' ending (prune.config_label)")
    return int(m.group(1))


def occupancy(registers: int, shared: int, num_warps: int, target: str) -> float:
    """Theoretical occupancy (resident warps / 64) of a block of ``num_warps`` warps using ``registers`` per thread
    and ``shared`` bytes of shared memory on ``target`` (the formula of the module docstring)."""
    if target not in SM_SHARED:
        raise InputError(f"target must be one of {', '.join(SM_SHARED)}, got {target!r}")
    per_warp = REGISTER_UNIT * -(-32 * max(registers, 1) // REGISTER_UNIT)
    blocks = min(
        MAX_BLOCKS,
        MAX_WARPS // num_warps,
        (REGISTERS // per_warp) // num_warps,
        SM_SHARED[target] // (shared + RESERVED_SHARED),
    )
    return blocks * num_warps / MAX_WARPS


def _flag(v) -> bool:
    return v is True or str(v).lower() in ("true", "yes", "1")


def _span(values: list, fmt=str) -> str:
    if not values:
        return "–"
    lo, hi = min(values), max(values)
    return fmt(lo) if lo == hi else f"{fmt(lo)}–{fmt(hi)}"


def summary_rows(rows: Iterable[dict]) -> list[dict]:
    """One dict per (op, kernel, target), sorted: compiles, kept, and the ranges over the kept configs (the table's
    rows as ``aot.check`` returns them or as ``csv.DictReader`` reads the written CSV)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["op"], r["kernel"], r["target"]), []).append(r)
    out = []
    for (op, kernel, target), grp in sorted(groups.items(), key=lambda kv: (kv[0][:2], int(kv[0][2][3:]))):
        ok = [r for r in grp if r["status"] == "ok"]
        kept = [r for r in ok if _flag(r["kept"])]
        out.append(
            {
                "op": op,
                "kernel": kernel,
                "target": target,
                "compiles": len(grp),
                "kept": len(kept),
                "registers": [int(r["registers"]) for r in kept],
                "shared": [int(r["shared"]) for r in kept],
                "occupancy": [
                    occupancy(int(r["registers"]), int(r["shared"]), warps(r["config"]), target) for r in kept
                ],
                "kept_spill": max((int(r["spill_bytes"]) for r in kept), default=0),
                "largest_spill": max((int(r["spill_bytes"]) for r in ok), default=0),
            }
        )
    return out


def summary_markdown(rows: Iterable[dict]) -> str:
    """The summary as a markdown table (``summary_rows``)."""
    lines = [
        "| op | kernel | target | compiles | kept | registers / thread | shared memory (KB) | occupancy "
        "| spill (B), kept / largest |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary_rows(rows):
        occupancy_pct = _span([round(100 * o) for o in s["occupancy"]])
        lines.append(
            f"| {s['op']} | `{s['kernel']}` | {s['target']} | {s['compiles']} | {s['kept']} "
            f"| {_span(s['registers'])} | {_span(s['shared'], lambda b: f'{b / 1024:.1f}')} "
            f"| {occupancy_pct}{' %' if s['kept'] else ''} | {s['kept_spill']} / {s['largest_spill']} |"
        )
    return "\n".join(lines) + "\n"


def read_table(path: str | Path) -> list[dict]:
    """The rows of a compile table CSV written by ``seqzoo kernels check`` (``kernels_aot.csv``)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"--table={str(path)!r} is not a file: pass the kernels_aot.csv of `seqzoo kernels check`")
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    need = {"op", "kernel", "target", "config", "status", "registers", "spill_bytes", "shared", "kept"}
    if not rows or not need <= set(rows[0]):
        raise InputError(f"--table={str(path)!r} is not a compile table: it needs the columns {sorted(need)}")
    return rows
