"""The GPU scoreboard: every kernel target of seqzoo timed against its same-run yardstick, in one file per GPU run.

    seqzoo kernels scoreboard --out benchmarks/gpu          # on a GPU: about 7.5 minutes, every target
    seqzoo kernels scoreboard --smoke --out /tmp/sb         # on a CPU: tiny shapes, Triton interpreter (plumbing)
    seqzoo kernels scoreboard --table                       # the docs table of the newest file

Targets (``TARGETS``; B·T = 65,536 tokens at T = 4096 and 16384, bf16; ``scoreboard_measure.py`` for the shapes):

* ``mlstm``: the Triton mLSTM (``ops/mlstm/triton.py``) forward+backward ≤ 1.25 × NX-AI mlstm_kernels'
  ``chunkwise--triton_xl_chunk`` (TFLA, arXiv:2503.14376) in the same run; where that peer cannot run, against the
  published TFLA time at the same token count (``PUBLISHED``), marked ``"baseline": "published"``.
* ``gateloop_real`` / ``gateloop_complex``: the chunked GLA kernel (real gates) ≤ 1.25 × and GateLoop with complex
  gates (``gateloop(mode="triton")``) ≤ 2.5 × flash-linear-attention ``chunk_gla``, forward+backward.
* ``rglru_scan_*`` / ``rglru_fused_*``: bytes the op must move / its time ≥ 0.6 × bytes / time of a plain copy of
  one activation in the same run (forward, and forward+backward).
* ``slstm``: the Triton sLSTM (``slstm(mode="triton")``) ≥ 10 × faster than the PyTorch step loop
  (``mode="fused"``, what ``auto`` runs on a GPU), forward+backward; NX-AI xlstm's CUDA sLSTM cell beside it where
  it compiles in its part's time.

Each part (``scoreboard_parts.PARTS``) runs in its own child process with a time budget (``PART_BUDGET_S`` plus what
earlier parts left, cut to what is left of ``--time-limit``): a compiler abort, a CUDA fault or a timeout costs that
part, and its targets are written with the reason. The result file is rewritten after every part and when the run
is interrupted, so a run stopped from outside keeps what finished. Children run with ``SEQZOO_AUTOTUNE=first`` by
default (one kept config per launch, no tuning: the minutes go to the measurements); ``--tune-parts`` names parts
run with ``all``, ``--autotune all`` tunes every part. Every implementation is checked against the float64 PyTorch
path before its time counts (``scoreboard_measure.py``).

The file ``<out>/<date>-<gpu>.json``: ``{"targets": {name: {"ratio", "goal", "met", ...}}, "records": [raw
times per implementation], "versions", "gpu", "commit", "date", "shapes", "dtype", ...}``;
``scoreboard_table.py`` renders the docs table from the newest one.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .. import settings
from ..errors import InputError, require
from . import scoreboard_parts as parts
from .scoreboard_measure import GPU_SHAPES, SMOKE_SHAPES

# seconds each part may take on the GPU (compiles included, SEQZOO_AUTOTUNE=first), 440 s in all; a part also gets
# what the parts before it left unused
PART_BUDGET_S = {
    "rglru": 40,
    "mlstm": 70,
    "mlstm_peer": 60,
    "gla": 80,
    "gla_peer": 60,
    "slstm": 90,
    "slstm_official": 40,  # NX-AI's CUDA sLSTM compiles with nvcc at first use: where it does not fit, it says so
}
SMOKE_PART_BUDGET_S = 300  # the interpreter on a loaded CPU: a few seconds a part, with room
DEFAULT_TIME_LIMIT_S = 450  # the whole run, under the 8 minutes the device check is sized for
MIN_PART_S = 5  # a part is not started with less time left than this

# TFLA's mLSTMexp (sigmoid forget, exponential input gate, chunk 128) forward+backward on an H100, B·T = 65,536,
# H = 16, K = 128, V = 256, bf16 (arXiv:2503.14376, NX-AI mlstm_kernels benchmark data): 15.25 ms at T = 2K,
# 15.23 at 8K, 15.44 at 32K. Each T here takes the smaller published neighbour (the stricter yardstick).
PUBLISHED = {
    "mlstm": {
        4096: (15.23, "TFLA mLSTMexp (chunk 128) fwd+bwd on an H100, B·T = 65,536, T = 8K (2K: 15.25)"),
        16384: (15.23, "TFLA mLSTMexp (chunk 128) fwd+bwd on an H100, B·T = 65,536, T = 8K (32K: 15.44)"),
    }
}


def published(name: str, T: int) -> tuple[float, str]:
    """The published figure of target ``name`` at the length nearest T (exact on the GPU shapes; the smoke run's
    tiny lengths borrow the nearest one, which only exercises the plumbing)."""
    table = PUBLISHED[name]
    near = min(table, key=lambda k: abs(math.log(k / T)))
    ms, source = table[near]
    return ms, source if near == T else f"{source}; published at T = {near}, not T = {T}"


@dataclass(frozen=True)
class Target:
    """One goal: ``kind`` ``slowdown`` (ours / base time ≤ goal), ``speedup`` (base / ours time ≥ goal) or
    ``bandwidth`` (ours bytes/ms ÷ base bytes/ms ≥ goal)."""

    name: str
    kind: str
    ours: str  # implementation keys (scoreboard_ops.py, Impl.key)
    base: str
    goal: float
    phase: str
    what: str
    missing_base: str = "failed"  # when the base cannot run: "published" (PUBLISHED), "skipped" or "failed"
    beside: tuple[str, ...] = ()  # implementations shown next to the ratio (their time, or why there is none)

    @property
    def compare(self) -> str:
        return "<=" if self.kind == "slowdown" else ">="


TARGETS = (
    Target("mlstm", "slowdown", "mlstm", "mlstm_kernels", 1.25, "fwdbwd", "mLSTM Triton / TFLA xl_chunk", "published"),
    Target(
        "gateloop_real",
        "slowdown",
        "gla_real",
        "fla_chunk_gla",
        1.25,
        "fwdbwd",
        "GLA Triton / fla chunk_gla",
        "skipped",
    ),
    Target(
        "gateloop_complex",
        "slowdown",
        "gateloop_complex",
        "fla_chunk_gla",
        2.5,
        "fwdbwd",
        "GateLoop complex Triton / fla chunk_gla",
        "skipped",
    ),
    Target("rglru_scan_fwd", "bandwidth", "scan", "copy", 0.6, "fwd", "scan bytes/s ÷ copy bytes/s"),
    Target("rglru_scan_fwdbwd", "bandwidth", "scan", "copy", 0.6, "fwdbwd", "scan fwd+bwd bytes/s ÷ copy bytes/s"),
    Target("rglru_fused_fwd", "bandwidth", "rglru_fused", "copy", 0.6, "fwd", "fused RG-LRU bytes/s ÷ copy bytes/s"),
    Target(
        "rglru_fused_fwdbwd", "bandwidth", "rglru_fused", "copy", 0.6, "fwdbwd", "fused RG-LRU fwd+bwd ÷ copy bytes/s"
    ),
    Target(
        "slstm",
        "speedup",
        "slstm_triton",
        "slstm_loop",
        10.0,
        "fwdbwd",
        "sLSTM PyTorch loop / Triton",
        beside=("slstm_official",),
    ),
)


# ------------------------------------------------------------------------------------------------ scoring
def _find(records: list[dict], impl: str, T: int, phase: str) -> dict | None:
    for r in records:
        if r.get("impl") == impl and r.get("T") == T and r.get("phase") in (phase, "copy"):
            return r
    return None


def _why_missing(records: list[dict], impl: str, T: int, phase: str, part_errors: dict[str, str]) -> str | None:
    """None when ``impl`` has a timed record at (T, phase); else why not (its record's error, or its part's)."""
    r = _find(records, impl, T, phase)
    if r is not None:
        return None if r.get("status") == "ok" else f"{impl}: {r.get('status')}: {r.get('error')}"
    return f"{impl}: {part_errors.get(owner(impl), 'not run')}"


def owner(impl: str) -> str | None:
    """The part that measures implementation ``impl``."""
    return next((name for name, (keys, _) in parts.PARTS.items() if impl in keys), None)


def score(target: Target, T: int, records: list[dict], part_errors: dict[str, str]) -> dict[str, Any]:
    """The target's entry: ratio, goal, met, and the times, baseline and reason behind them."""
    entry: dict[str, Any] = {
        "ratio": None,
        "goal": target.goal,
        "met": False,
        "compare": target.compare,
        "what": target.what,
        "ours": target.ours,
        "T": T,
        "phase": target.phase,
        "baseline": "same run",
        "times_ms": {},
    }
    for key in target.beside:
        why = _why_missing(records, key, T, target.phase, part_errors)
        entry.setdefault("beside", {})[key] = why or _find(records, key, T, target.phase)["ms"]
    ours_err = _why_missing(records, target.ours, T, target.phase, part_errors)
    base_err = _why_missing(records, target.base, T, target.phase, part_errors)
    ours = _find(records, target.ours, T, target.phase)
    base = _find(records, target.base, T, target.phase)
    for r in (ours, base):
        if r is not None and r.get("status") == "ok":
            entry["times_ms"][r["impl"]] = r["ms"]
    if ours_err is not None:
        entry.update(status="failed", error=ours_err)
        return entry
    if base_err is not None:
        if target.missing_base == "published":
            ms, source = published(target.name, T)
            entry.update(baseline="published", published_ms=ms, source=source, base_error=base_err)
            entry["times_ms"][f"{target.base} (published)"] = ms
            return _finish(entry, ours["ms"] / ms, target)
        entry.update(status="skipped" if target.missing_base == "skipped" else "failed", error=base_err)
        if target.missing_base == "skipped":
            entry["baseline"] = "skipped"
        return entry
    if target.kind == "slowdown":
        ratio = ours["ms"] / base["ms"]
    elif target.kind == "speedup":
        ratio = base["ms"] / ours["ms"]
    else:
        ours_bw, base_bw = ours["bytes"] / ours["ms"], base["bytes"] / base["ms"]
        entry["GBps"] = {target.ours: ours_bw / 1e6, target.base: base_bw / 1e6}
        ratio = ours_bw / base_bw
    return _finish(entry, ratio, target)


def _finish(entry: dict[str, Any], ratio: float, target: Target) -> dict[str, Any]:
    met = ratio <= target.goal if target.kind == "slowdown" else ratio >= target.goal
    entry.update(ratio=ratio, met=bool(met), status="met" if met else "not met")
    return entry


def score_all(records: list[dict], part_errors: dict[str, str], lengths: tuple[int, ...]) -> dict[str, dict]:
    return {f"{t.name}_T{T}": score(t, T, records, part_errors) for t in TARGETS for T in lengths}


# ------------------------------------------------------------------------------------------------ running
def _child_command(part: str, records: Path, smoke: bool) -> list[str]:
    """The command of one part (a seam for the tests, which substitute a process that fails)."""
    return [sys.executable, "-m", "seqzoo.bench.scoreboard_parts", "--part", part, "--records", str(records)] + (
        ["--smoke"] if smoke else []
    )


def _read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_part_isolated(part: str, records: Path, smoke: bool, autotune: str, budget_s: float) -> str | None:
    """Part ``part`` in a child process, killed after ``budget_s``; None, or why it did not finish."""
    env = {**os.environ, "SEQZOO_AUTOTUNE": autotune, "PYTHONUNBUFFERED": "1"}
    if smoke:
        env["TRITON_INTERPRET"] = "1"  # a child of a CPU run: the kernels in Triton's interpreter
    try:
        done = subprocess.run(
            _child_command(part, records, smoke), capture_output=True, text=True, timeout=budget_s, env=env
        )
    except subprocess.TimeoutExpired:
        return f"part {part} timed out after {budget_s:.0f} s"
    if done.returncode != 0:
        from .kernels import child_failure

        return f"part {part}: {child_failure(done)}"
    return None


def check_args(
    out: str | Path, smoke: bool, time_limit_s: float, autotune: str, only: list[str] | None, option: str = "--parts"
) -> None:
    from ..outputs import check_output_dir

    check_output_dir(out, "--out")
    require(time_limit_s > 0, f"--time-limit must be > 0 seconds, got {time_limit_s}")
    require(autotune in ("first", "all"), f"--autotune must be first or all, got {autotune!r}")
    unknown = [p for p in only or [] if p not in parts.PARTS]
    require(not unknown, f"{option}: unknown {unknown}; choose from {', '.join(parts.PARTS)}")
    if not smoke and not torch.cuda.is_available():
        raise InputError("scoreboard: needs a CUDA GPU (none is visible); --smoke runs it on the CPU at tiny shapes")


def run_scoreboard(
    out: str | Path = "benchmarks/gpu",
    smoke: bool = False,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    autotune: str = "first",
    tune_parts: list[str] | None = None,
    isolate: bool = True,
    only: list[str] | None = None,
    commit: str | None = None,
    command: str = "",
) -> Path:
    """Run the parts (all, or ``only``), score the targets, write ``<out>/<date>-<gpu>.json``; returns its path.
    Isolated parts run with ``SEQZOO_AUTOTUNE=autotune``, those in ``tune_parts`` with ``all``; in-process
    (``isolate=False``) they keep this process's setting."""
    check_args(out, smoke, time_limit_s, autotune, only)
    check_args(out, smoke, time_limit_s, autotune, tune_parts, option="--tune-parts")
    deadline = time.monotonic() + time_limit_s
    device = torch.device("cpu" if smoke else "cuda")
    meta = environment(device, smoke, autotune, commit, command)
    path = Path(out) / f"{meta['date'][:10]}-{_slug(meta['gpu'])}.json"
    Path(out).mkdir(parents=True, exist_ok=True)
    records: list[dict] = []
    part_log: dict[str, dict] = {}
    names = [p for p in parts.PARTS if only is None or p in only]
    with tempfile.TemporaryDirectory(prefix="seqzoo-scoreboard-") as tmp:
        for j, name in enumerate(names):
            t0 = time.monotonic()
            left = deadline - t0
            budget = min(left, max(_budget(name, smoke), left - sum(_budget(n, smoke) for n in names[j + 1 :])))
            rec_file = Path(tmp) / f"{name}.jsonl"
            try:
                if budget < MIN_PART_S:
                    part_log[name] = {"error": f"part {name} not run: the {time_limit_s:.0f} s time limit was spent"}
                elif isolate:
                    mode = "all" if name in (tune_parts or ()) else autotune
                    err = run_part_isolated(name, rec_file, smoke, mode, budget)
                    records += _read_records(rec_file)
                    part_log[name] = {"seconds": round(time.monotonic() - t0, 1), "budget_s": round(budget)}
                    part_log[name].update(autotune=mode, error=err)
                else:
                    parts.run_part(name, device, smoke, records.append)
                    part_log[name] = {"seconds": round(time.monotonic() - t0, 1), "autotune": settings.autotune()}
                    part_log[name]["error"] = None
            except KeyboardInterrupt:  # stopped from outside (the device script's time limit): keep what is known
                records += _read_records(rec_file) if isolate else []
                part_log[name] = {"error": f"part {name} interrupted after {time.monotonic() - t0:.0f} s"}
                write(path, meta, records, part_log, names)
                raise
            write(path, meta, records, part_log, names)
    return path


def _budget(part: str, smoke: bool) -> float:
    return SMOKE_PART_BUDGET_S if smoke else PART_BUDGET_S[part]


def write(path: Path, meta: dict, records: list[dict], part_log: dict[str, dict], names: list[str]) -> None:
    """The result file as it stands: parts not yet run are scored as ``not run``."""
    errors = {n: (part_log.get(n) or {}).get("error") or "not run" for n in parts.PARTS}
    for n, log in part_log.items():
        if not log.get("error"):
            errors[n] = "no record (the part finished without measuring it)"
    shapes = SMOKE_SHAPES if meta["smoke"] else GPU_SHAPES
    targets = score_all(records, errors, shapes.lengths)
    for entry in targets.values():  # how the timed kernel got its config: tuned over all, or the first that fits
        entry["autotune"] = part_log.get(owner(entry["ours"]) or "", {}).get("autotune")
    data = {
        "targets": targets,
        **meta,
        "parts": {n: part_log.get(n, {"error": "not run"}) for n in names},
        "shapes": {k: (str(v).replace("torch.", "") if k == "dtype" else v) for k, v in vars(shapes).items()},
        "dtype": str(shapes.dtype).replace("torch.", ""),
        "records": records,
    }
    tmp = path.with_suffix(".json.partial")
    tmp.write_text(json.dumps(_strict(data), indent=1, default=str, allow_nan=False) + "\n")
    tmp.replace(path)  # whole files only: a run killed mid-write keeps the previous one


def _strict(x: Any) -> Any:
    """``x`` with every non-finite float (a gap of a NaN output, say) written as the string "inf", "-inf" or "nan":
    strict JSON has no such numbers."""
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, dict):
        return {k: _strict(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_strict(v) for v in x]
    return x


# ------------------------------------------------------------------------------------------------ environment
def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def _dist_version(name: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _driver_version() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({type(e).__name__})"
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else "unknown"


def _git_commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def environment(device: torch.device, smoke: bool, autotune: str, commit: str | None, command: str) -> dict:
    """Date, GPU, versions and settings of this run."""
    from .. import __version__

    cuda = device.type == "cuda"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gpu": torch.cuda.get_device_name(device) if cuda else f"cpu-smoke ({platform.machine()})",
        "smoke": smoke,
        "commit": commit or _git_commit(),
        "seqzoo": __version__,
        "command": command,
        "autotune": autotune,
        "timing": "CUDA events, L2 flushed before each call, median of at least 3 calls after a warm-up"
        if cuda
        else "time.perf_counter, one call after the check (plumbing only)",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "triton": _dist_version("triton"),
            "flash-linear-attention": _dist_version("flash-linear-attention"),
            "fla-core": _dist_version("fla-core"),
            "mlstm_kernels": _dist_version("mlstm_kernels"),
            "xlstm": _dist_version("xlstm"),
            "cuda": torch.version.cuda or "none",
            "driver": _driver_version() if cuda else "none",
        },
    }
