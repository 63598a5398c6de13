"""SIGTERM (a cluster's preemption) or SIGINT to a sweep stops the whole sweep: each run under way saves its step, no
queued run starts, nothing is recorded as an error, the process exits with 128 + the signal, and the same sweep run
again resumes the cut runs and ends with the numbers of an uninterrupted sweep.

Before, SIGTERM killed the sweep at once (each run lost its steps since its last periodic checkpoint). The signal goes
either to the parent alone (``kill PID``, Kubernetes) or to the whole process group (Ctrl-C, ``timeout``, Slurm); the
processes then share the first signal so that neither case loses a step nor counts as "stop now".
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from seqzoo.sweep import RunSpec, run_sweep

FN = "seqzoo.sweep.train_run:train_run"
REPO = Path(__file__).resolve().parents[1]
STEPS = 60


def specs() -> list[RunSpec]:
    out = []
    for seed in range(3):
        cfg = {
            "seed": seed,
            "model": {
                "type": "lm",
                "config": {"vocab_size": 16, "d_model": 16, "n_layers": 1, "pattern": ["attention"], "mlp_ratio": 2.0},
            },
            "task": {"name": "mqar", "vocab_size": 16, "num_pairs": 2, "seq_len": 16},
            "train": {
                "steps": STEPS,
                "batch_size": 8,
                "lr": 3e-3,
                "warmup_steps": 1,
                "eval_every": 0,
                "eval_samples": 16,
                "log_every": 1,
            },
        }
        out.append(RunSpec.of(FN, cfg, {"seed": seed}))
    return out


# the sweep in a child process, exiting as the CLI does: one line on stderr and 128 + the signal when stopped
SCRIPT = textwrap.dedent(
    """
    import sys
    from seqzoo.errors import TrainingInterrupted
    from seqzoo.sweep import run_sweep
    from tests.test_sweep_interrupt import specs
    try:
        run_sweep(specs(), sys.argv[1], procs=int(sys.argv[2]), progress=False)
    except TrainingInterrupted as e:
        print(e, file=sys.stderr)
        sys.exit(e.exit_code)
    """
)


def _metric_lines(run_dir: Path) -> int:
    path = run_dir / "train" / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _sweep(root: Path, procs: int, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-c", SCRIPT, str(root), str(procs)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO, **kw)


def _checkpoint_step(run_dir: Path) -> int:
    import torch

    return int(torch.load(run_dir / "train" / "checkpoint.pt", map_location="cpu", weights_only=False)["step"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "procs, signum, to_group",
    [(1, signal.SIGTERM, False), (2, signal.SIGTERM, False), (2, signal.SIGTERM, True), (2, signal.SIGINT, True)],
    ids=["procs1-SIGTERM", "procs2-SIGTERM-parent", "procs2-SIGTERM-group", "procs2-SIGINT-group"],
)
def test_a_stop_signal_stops_the_sweep_and_a_rerun_ends_as_an_uninterrupted_one(tmp_path, procs, signum, to_group):
    whole = run_sweep(specs(), tmp_path / "whole", progress=False, log=lambda *_: None)
    root = tmp_path / "cut"
    # its own session: a signal to the group reaches the parent and its workers, as Ctrl-C or Slurm's would
    proc = _sweep(root, procs, start_new_session=True)
    keys = [r["key"] for r in whole]
    under_way = [root / "runs" / k for k in keys[:procs]]  # the first runs start at once, one per process
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and min(_metric_lines(d) for d in under_way) < 3:
        time.sleep(0.02)
    if to_group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 128 + signum, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith(f"sweep stopped by {signal.Signals(signum).name}: "), err[-3000:]
    for run_dir in under_way:  # cut after a whole step, which is saved; neither done nor an error
        assert 3 <= _checkpoint_step(run_dir) == _metric_lines(run_dir) < STEPS
        assert not (run_dir / "done.json").exists() and not (run_dir / "error.txt").exists()
    queued = root / "runs" / keys[-1]  # never started: no step, no error
    assert not (queued / "train").exists() and not (queued / "error.txt").exists()
    again = _sweep(root, procs)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]
    for key, reference in zip(keys, whole):
        done = json.loads((root / "runs" / key / "done.json").read_text())["metrics"]
        assert (done["valid_loss"], done["curve"]) == (
            reference["metrics"]["valid_loss"],
            reference["metrics"]["curve"],
        )
