"""tools/zoology_mqar_step_cost.py (the per-step cost table of docs/calibration.md) still runs: one tiny cell."""

import json

from helpers import run_tool


def test_step_cost_prints_a_row_per_model_and_cell(tmp_path):
    out = tmp_path / "rows.json"
    args = ["--models", "attention,hawk", "--cells", "16:32:2", "--vocab-size", "64", "--batch-size", "4"]
    args += ["--steps", "5", "--eval-samples", "8", "--json", str(out)]
    proc = run_tool("zoology_mqar_step_cost.py", *args)
    assert proc.returncode == 0, proc.stderr
    assert "| attention | 16 | 32 | 2 |" in proc.stdout and "| hawk | 16 | 32 | 2 |" in proc.stdout
    rows = json.loads(out.read_text())
    assert [r["model"] for r in rows] == ["attention", "hawk"]
    assert all(r["scored_logits"] and isinstance(r["cpu_s_per_step"], float) for r in rows)
