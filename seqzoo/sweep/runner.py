"""Run a list of :class:`RunSpec` into ``<root>/runs/<key>/``: skip what is done, resume what was cut, run the rest.

Each run folder holds ``config.json`` (fn, resolved config, labels, code version, key), whatever the run function
writes (the trainer's checkpoint and metrics under ``train/``), and, once it finished, ``done.json`` (its metrics
and wall time) written atomically. A run with ``done.json`` is skipped; one without it is started again by its
function, which resumes from the trainer's checkpoint in the same folder (the trainer restores model, optimiser,
RNG and step exactly). A run that raises is recorded with status ``error`` and no ``done.json``, so the next call
retries it. SIGINT (Ctrl-C) or SIGTERM, to the parent or to any worker, stops the whole sweep: every process shares
the first signal (``train/interrupt.py: sharing_stop``), each run under way finishes its step and saves it, no
further run starts, and ``run_sweep`` raises :class:`~seqzoo.errors.TrainingInterrupted` carrying the signal; the
same call again resumes the cut runs. ``procs > 1`` runs in that many spawned processes; every process (the parent
too, when ``procs == 1``) is pinned to one torch thread so the numbers do not depend on ``procs``. A progress bar over
all runs of the grid (runs found done count as done) estimates the time left from the runs finished in this call;
turn it off with ``progress=False`` or, for every sweep inside a block (an experiment's),
``with progress_bars(False):``.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import json
import logging
import multiprocessing as mp
import os
import random
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from ..errors import TrainingInterrupted, require
from ..train.interrupt import STOP_NOW, StopRequest, share_stop_for_life, sharing_stop
from .grid import RunSpec, code_version

_SHOW_PROGRESS = contextvars.ContextVar("seqzoo_sweep_progress", default=True)


@contextlib.contextmanager
def progress_bars(show: bool):
    """Whether the sweeps started inside the block show their progress bar (``seqzoo -q experiment``: none)."""
    token = _SHOW_PROGRESS.set(show)
    try:
        yield
    finally:
        _SHOW_PROGRESS.reset(token)


def _progress_bar(total: int, done: int, show: bool | None):
    """The bar over a grid's runs. ``initial=done``: tqdm's rate counts only the runs of this call, so runs found
    done do not shorten the estimate; ``smoothing=0``: the mean time per run, as runs differ in length."""
    from tqdm.auto import tqdm

    show = _SHOW_PROGRESS.get() if show is None else show
    return tqdm(total=total, initial=done, desc="runs", unit="run", smoothing=0, disable=not show, dynamic_ncols=True)


def seed_everything(seed: int) -> None:
    """Python, numpy and torch RNGs from ``seed``: called before a run builds its model, so init is reproducible."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _pin_one_thread() -> None:
    import torch

    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def _init_worker(log_level: int = logging.WARNING, stop_signal: Any = None) -> None:
    """A spawned worker: one thread, the command line's malloc setting (host_memory.py) and its ``seqzoo`` log level,
    which a new process does not inherit: under ``seqzoo -v`` the workers too say which implementation each op runs.
    The parent keeps whatever malloc its caller chose. ``stop_signal``: the sweep's shared stop signal."""
    from ..host_memory import apply_malloc_setting

    if stop_signal is not None:
        share_stop_for_life(stop_signal)
    apply_malloc_setting()
    _pin_one_thread()
    if log_level < logging.WARNING:
        logger = logging.getLogger("seqzoo")
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(log_level)


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str) + "\n")
    tmp.replace(path)  # atomic: a reader sees the old file or the whole new one


def _call(fn: str, config: dict, run_dir: Path) -> dict:
    mod, name = fn.split(":")
    return getattr(importlib.import_module(mod), name)(config, run_dir)


def _execute(job: dict[str, Any]) -> dict[str, Any]:
    """One run in this process (worker or parent). Under a :class:`StopRequest`, so that a stop signal that arrives
    outside the training loop (while a model is built) stops the sweep too instead of killing the process."""
    _pin_one_thread()
    run_dir = Path(job["run_dir"])
    record = {"key": job["key"], "labels": job["labels"], "run_dir": str(run_dir)}
    t0 = time.time()
    with StopRequest(notice=False) as stop:
        if stop.requested:  # the sweep is stopping: a queued run does not start
            return {**record, "status": "not started"}
        try:
            metrics = _call(job["fn"], job["config"], run_dir)
        except TrainingInterrupted as e:  # its step is saved, no done.json: the next call resumes it
            return {**record, "status": "interrupted", "error": str(e), "signum": e.signum, "step": e.step}
        except Exception as e:  # one failing run must not lose the others; the next call retries it
            (run_dir / "error.txt").write_text(traceback.format_exc())
            return {**record, "status": "error", "error": f"{type(e).__name__}: {e}"}
    wall = round(time.time() - t0, 2)
    _write_json(run_dir / "done.json", {"metrics": metrics, "wall_s": wall})
    return {**record, "status": "ran", "metrics": metrics, "wall_s": wall}


def _stopped(records: list[dict[str, Any] | None], signum: int) -> TrainingInterrupted:
    """The sweep's stop: which runs were cut at which step, and how to go on."""
    cut = [r for r in records if r is not None and r.get("status") == "interrupted"]
    waiting = sum(1 for r in records if r is not None and r.get("status") == "not started")
    where = ", ".join(f"{_label({'labels': r['labels'], 'key': r['key']})} at step {r['step']}" for r in cut) or "none"
    return TrainingInterrupted(
        f"sweep stopped by {signal.Signals(signum).name}: runs cut (step saved): {where}; {waiting} run(s) not "
        "started; run the same command again to resume",
        cut[0]["step"] if cut else 0,
        None,
        signum,
    )


def run_sweep(
    specs: list[RunSpec],
    root: str | Path,
    procs: int = 1,
    log=print,
    code: str | None = None,
    train: bool = True,
    progress: bool | None = None,
) -> list[dict[str, Any]]:
    """Run ``specs`` under ``root``; returns one record per spec, in order: key, labels, run_dir, status
    (``skipped`` = found done, ``ran``, ``error``), metrics and wall_s. ``code`` overrides the code version
    (tests). ``train=False`` runs nothing and writes nothing: runs not found done get status ``missing`` (for a
    report of a sweep that is still under way; a run being trained elsewhere counts as missing until it ends).
    ``progress``: the bar over all runs (None: on, unless inside ``progress_bars(False)``). A SIGINT or SIGTERM stops
    the sweep (module docstring) with :class:`~seqzoo.errors.TrainingInterrupted` instead of returning."""
    require(isinstance(procs, int) and procs >= 1, f"procs must be an int >= 1, got {procs!r}")
    runs = Path(root) / "runs"
    if train:  # collect only writes nothing, not even the folder
        runs.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any] | None] = [None] * len(specs)
    jobs, seen = [], {}
    for i, spec in enumerate(specs):
        version = code if code is not None else code_version(spec.fn)
        key = spec.key(version)
        run_dir = runs / key
        if key in seen:  # the same configuration twice in one grid is one run
            records[i] = {"dup_of": seen[key]}
            continue
        seen[key] = i
        done = run_dir / "done.json"
        if done.is_file():
            d = json.loads(done.read_text())
            records[i] = {
                "key": key,
                "labels": spec.labels,
                "run_dir": str(run_dir),
                "status": "skipped",
                "metrics": d["metrics"],
                "wall_s": d["wall_s"],
            }
            continue
        if not train:
            records[i] = {"key": key, "labels": spec.labels, "run_dir": str(run_dir), "status": "missing"}
            continue
        run_dir.mkdir(parents=True, exist_ok=True)
        meta = {"key": key, "fn": spec.fn, "code_version": version, "labels": spec.labels, "config": spec.config}
        _write_json(run_dir / "config.json", meta)
        jobs.append(
            (i, {"key": key, "fn": spec.fn, "config": spec.config, "labels": spec.labels, "run_dir": str(run_dir)})
        )
    if not train:
        n_missing = sum(1 for r in records if r is not None and r.get("status") == "missing")
        log(f"[sweep] {len(specs)} runs: {len(specs) - n_missing} done, {n_missing} not trained (collect only)")
    else:
        log(f"[sweep] {len(specs)} runs: {len(specs) - len(jobs)} done before, {len(jobs)} to run, {procs} process(es)")
    # a run to do counts once for every spec it stands for (a configuration twice in one grid is one run)
    weight = {i: 1 + sum(1 for r in records if r is not None and r.get("dup_of") == i) for i, _ in jobs}
    bar = _progress_bar(len(specs), len(specs) - sum(weight.values()), progress if jobs else False)

    def finished(i: int, rec: dict[str, Any]) -> None:
        records[i] = rec
        if rec["status"] == "not started":  # the sweep is stopping
            return
        bar.update(weight[i])
        with bar.external_write_mode():  # the line above the bar, not through it
            log(f"[sweep] {_label(rec)}: {rec['status']}")

    if procs > 1 and len(jobs) > 1:
        ctx = mp.get_context("spawn")
        shared = ctx.Value("i", 0)  # the sweep's stop signal, seen by the parent and every worker
        level = logging.getLogger("seqzoo").getEffectiveLevel()
        with (
            sharing_stop(shared),
            StopRequest(notice=False),
            ctx.Pool(min(procs, len(jobs)), initializer=_init_worker, initargs=(level, shared)) as pool,
        ):
            try:
                for (i, _), rec in zip(jobs, pool.imap(_execute, [j for _, j in jobs])):
                    finished(i, rec)
                # let the workers exit on their own: the with-block's terminate() kills them before their finalisers
                # run, and a semaphore a run had made (an Orchid sweep's did) was reported as leaked at exit
                pool.close()
                pool.join()
            except BaseException:
                # a second signal (stop now) or a bug: terminate() sends SIGTERM, which a worker in a run must take as
                # a second signal and stop at once; as a first one it would save and then wait forever for a job
                shared.value = STOP_NOW
                raise
    else:
        shared = type("SharedStop", (), {"value": 0})()
        with sharing_stop(shared), StopRequest(notice=False):
            for i, job in jobs:
                finished(i, _execute(job))
    bar.close()
    if shared.value:
        raise _stopped(records, shared.value)
    bar.close()
    for i, rec in enumerate(records):
        if "dup_of" in rec:  # the shared run's result under this spec's own labels (a copy, not the same dict)
            records[i] = {**records[rec["dup_of"]], "labels": specs[i].labels}
    return records  # type: ignore[return-value]


def _label(rec: dict[str, Any]) -> str:
    text = " ".join(f"{k}={v}" for k, v in rec["labels"].items()) or rec["key"]
    return text + (f" ({rec['error']})" if rec.get("status") in ("error", "interrupted") else "")
