"""``torchrun --nproc-per-node 2 -m seqzoo train ... --context-parallel 2`` logs the one-process training loss at
every step (float32, 1e-4 relative), for an mLSTM-only xLSTM[1:0], GateLoop with heads, Hawk, Griffin and attention.
Each preset trains twice in subprocesses (about 30-60 s on a 2-core CPU): -m slow. Also 2 data (FSDP2) x 2 context
ranks."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    "--task", "mqar", "--task-arg", "seq_len=32", "--task-arg", "num_pairs=4", "--steps", "4", "--batch-size", "4",
    "--lr", "3e-3", "--device", "cpu", "--precision", "fp32", "--no-progress", "--set", "train.log_every=1",
    "--set", "train.eval_samples=8", "--set", "train.eval_batch_size=8",
]  # fmt: skip
PRESETS = ["xlstm10-tiny", "gateloop-tiny-heads", "hawk-tiny", "griffin-tiny", "attention-tiny"]


def _train(out: Path, preset: str, launcher: list[str], extra: list[str]) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, *launcher, "-m", "seqzoo", "train", "--model", preset, *ARGS, "--out", str(out), *extra]
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in lines if r["split"] == "train"]


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_torchrun_context_parallel_logs_the_one_process_loss(tmp_path, preset):
    one = _train(tmp_path / "one", preset, [], [])
    torchrun = ["-m", "torch.distributed.run", "--nproc-per-node", "2"]
    split = _train(tmp_path / "split", preset, torchrun, ["--context-parallel", "2"])
    assert len(split) == len(one) == 4
    for step, (a, b) in enumerate(zip(split, one), 1):
        assert a == pytest.approx(b, rel=1e-4), f"step {step}: {a} vs {b}"


@pytest.mark.slow
def test_fsdp_over_the_data_dimension_logs_the_one_process_loss(tmp_path):
    """4 ranks = 2 data (FSDP2) x 2 context."""
    one = _train(tmp_path / "one", "attention-tiny", [], [])
    torchrun = ["-m", "torch.distributed.run", "--nproc-per-node", "4"]
    split = _train(tmp_path / "split", "attention-tiny", torchrun, ["--context-parallel", "2", "--distributed", "fsdp"])
    assert split == pytest.approx(one, rel=1e-4)
