"""tools/context_parallel_cost.py runs at a tiny size and writes its table; refused input exits 2 before any rank."""

import json

import pytest
from helpers import run_tool


def _run(tmp_path, *args):
    return run_tool("context_parallel_cost.py", "--out", str(tmp_path / "cost"), *args)


@pytest.mark.slow  # spawns 1 + 2 gloo ranks
@pytest.mark.parametrize("layers", ["attention", "recurrences"])
def test_cost_tool_writes_a_row_per_rank_count(tmp_path, layers):
    proc = _run(tmp_path, "--seq-len", "64", "--steps", "1", "--ranks", "1", "2", "--d-model", "16", "--layers", layers)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads((tmp_path / "cost.json").read_text())["rows"]
    assert [r["ranks"] for r in rows] == [1, 2]
    assert all(r["activation_MiB_per_rank"] > 0 and r["step_s_per_rank"] > 0 for r in rows)
    # one rank receives nothing; two ranks receive the other's summaries, halos or keys in every layer
    assert rows[0]["measured_received_bytes"] == 0 < rows[1]["measured_received_bytes"]
    assert "| 2 |" in (tmp_path / "cost.md").read_text()


def test_cost_tool_refuses_a_rank_count_that_does_not_divide_t(tmp_path):
    proc = _run(tmp_path, "--seq-len", "64", "--ranks", "3")
    assert proc.returncode == 2 and "--ranks" in proc.stderr
    assert not (tmp_path / "cost.json").exists()
