"""The measurement scripts under tools/ still run against the library (they reach into private op internals, which
a refactor could move): each runs once at a tiny size and prints every row it promises."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / script), *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_gateloop_softmax_parts_prints_every_part():
    out = _run(
        "gateloop_softmax_parts.py", "--T", "256", "--batch", "1", "--d-model", "16", "--n-heads", "2", "--repeats", "1"
    )
    for row in (
        "attention: whole mixer",
        "gateloop_softmax: whole mixer",
        "attention: causal fused kernel (head 8), fwd",
        "part: projections and gates",
        "part: rotation",
        "part: diagonal blocks of 32",
        "part: levels and merges",
        "level kernels as run (width 16), bwd",
        "level kernels cut to width 8, fwd",
        "gateloop_softmax / attention (whole mixers)",
    ):
        assert row in out, (row, out)
    assert "level half-blocks 32, 64, 128" in out


def test_mlstm_layer_parts_prints_every_part():
    out = _run("mlstm_layer_parts.py", "--T", "64", "--tokens", "128", "--repeats", "1")
    for row in ("layer", "cell (chunkwise)", "q, k, v and gates", "up-projection", "conv + SiLU", "output path"):
        assert f"  {row} " in out, (row, out)
