"""tools/mad_step_cost.py (the cost table of docs/mad.md) still runs: two tiny tasks, the autoencoder among them."""

import json

from helpers import run_tool


def test_step_cost_prints_a_row_per_model_and_task(tmp_path):
    out = tmp_path / "rows.json"
    args = ["--models", "attention", "--tasks", "compression,memorization", "--task-args", "seq_len=16,train_size=16"]
    args += ["--d-model", "16", "--n-layers", "1", "--attention-heads", "2", "--batch-size", "8", "--epochs", "3"]
    args += ["--steps", "4", "--test-samples", "8", "--json", str(out)]
    proc = run_tool("mad_step_cost.py", *args)
    assert proc.returncode == 0, proc.stderr
    assert "| attention | compression |" in proc.stdout and "| attention | memorization |" in proc.stdout
    rows = json.loads(out.read_text())
    assert [r["task"] for r in rows] == ["compression", "memorization"]
    assert all(r["run_steps"] == 3 * (16 // 8) and isinstance(r["cpu_s_per_step"], float) for r in rows)
