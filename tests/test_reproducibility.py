"""Same seed and command, same numbers: two separate processes give bit-identical metrics on CPU.

`seqzoo zoo` used to build its models before anything seeded the initialisation, so three runs of the same
command gave three different valid losses; the sweep runner now seeds python, numpy and torch before each model is
built (``seqzoo/sweep/runner.py``).
"""

import json
import os
import subprocess
import sys

WALL_CLOCK = ("time_s", "train_s", "wall_s", "tokens_per_s", "elapsed_s")  # also as prefixes: train_s_mean, ...


def _run(args, cwd):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [sys.executable, "-m", "seqzoo", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=600
    )
    assert res.returncode == 0, res.stderr[-2000:]


def _strip(obj):
    """Drop wall-clock measurements (they differ between processes by nature) and keep every computed number."""
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if not k.startswith(WALL_CLOCK)}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _metrics(path):
    return [_strip(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def test_train_twice_in_two_processes_is_bit_identical(tmp_path):
    args = [
        "train",
        "--model",
        "attention-tiny",
        "--task",
        "mqar",
        "--task-arg",
        "num_pairs=2",
        "--task-arg",
        "seq_len=16",
        "--task-arg",
        "vocab_size=16",
        "--steps",
        "6",
        "--batch-size",
        "8",
        "--eval-every",
        "2",
        "--seed",
        "5",
        "--no-progress",
    ]
    _run([*args, "--out", str(tmp_path / "a")], tmp_path)
    _run([*args, "--out", str(tmp_path / "b")], tmp_path)
    a, b = _metrics(tmp_path / "a" / "metrics.jsonl"), _metrics(tmp_path / "b" / "metrics.jsonl")
    assert len(a) >= 4 and a == b
    fa = _strip(json.loads((tmp_path / "a" / "final.json").read_text()))
    fb = _strip(json.loads((tmp_path / "b" / "final.json").read_text()))
    assert fa == fb and "valid_loss" in fa
    assert fa["determinism"].startswith("bitwise")  # the run records which reproducibility it has (CPU: bitwise)


def test_zoo_twice_in_two_processes_is_bit_identical(tmp_path):
    args = ["zoo", "--families", "attention,hawk", "--probes", "parity", "--steps", "4", "--batch-size", "8"]
    args += ["--seeds", "0", "--procs", "1", "--no-progress"]
    _run([*args, "--out", str(tmp_path / "a")], tmp_path)
    _run([*args, "--out", str(tmp_path / "b")], tmp_path)
    a = _strip(json.loads((tmp_path / "a" / "results.json").read_text()))
    b = _strip(json.loads((tmp_path / "b" / "results.json").read_text()))
    assert a == b
    text = json.dumps(a)
    assert "valid_loss" in text or "valid_accuracy" in text
    # --steps on the command line wins over the probe's own budget (parity has one in the quick suite)
    configs = [json.loads(p.read_text()) for p in (tmp_path / "a" / "runs").glob("*/config.json")]
    assert len(configs) == 2 and all(c["config"]["train"]["steps"] == 4 for c in configs)
