"""The scoreboard's docs table (seqzoo/bench/scoreboard_table.py): docs/benchmarks.md holds exactly what the newest
``benchmarks/gpu/*.json`` renders, or says that no scoreboard has run on a GPU yet."""

from __future__ import annotations

import json
from pathlib import Path

from seqzoo.bench import scoreboard_table as table
from seqzoo.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _result(date: str, gpu: str = "NVIDIA H200", smoke: bool = False, ratio: float | None = 1.1) -> dict:
    entry = {"ratio": ratio, "goal": 1.25, "met": ratio is not None and ratio <= 1.25, "compare": "<="}
    entry.update(baseline="same run", times_ms={"mlstm": 16.5, "mlstm_kernels": 15.0}, status="met")
    entry["beside"] = {"slstm_official": 812.0}
    if ratio is None:
        entry.update(met=False, status="failed", error="mlstm: part mlstm timed out after 80 s")
    return {
        "targets": {"mlstm_T4096": entry},
        "date": date,
        "gpu": gpu,
        "smoke": smoke,
        "commit": "abc123",
        "dtype": "bfloat16",
        "autotune": "first",
        "versions": {"torch": "2.11.0", "triton": "3.6.0"},
    }


def test_the_docs_table_is_the_newest_gpu_result():
    """docs/benchmarks.md's scoreboard block equals the rendering of benchmarks/gpu (no file yet: says so)."""
    folder = ROOT / "benchmarks" / "gpu"
    expected = table.docs_block(folder).replace(folder.as_posix(), "benchmarks/gpu")
    assert table.read_docs_block(ROOT / "docs" / "benchmarks.md") == expected
    if table.newest_scoreboard(folder) is None:
        assert "no scoreboard has run on a gpu yet" in expected.lower()


def test_newest_file_wins_and_smoke_runs_never_count(tmp_path):
    assert table.docs_block(tmp_path) == table.NO_RUN
    (tmp_path / "2026-12-03-cpu-smoke.json").write_text(json.dumps(_result("2026-12-03T10:00:00Z", smoke=True)))
    assert table.newest_scoreboard(tmp_path) is None
    (tmp_path / "2026-12-01-nvidia-h200.json").write_text(json.dumps(_result("2026-12-01T10:00:00Z", ratio=1.1)))
    (tmp_path / "2026-12-02-nvidia-h100.json").write_text(json.dumps(_result("2026-12-02T09:00:00Z", ratio=None)))
    path, data = table.newest_scoreboard(tmp_path)
    assert path.name == "2026-12-02-nvidia-h100.json"
    block = table.docs_block(tmp_path)
    row = "| mlstm_T4096 | – | <= 1.25 | failed | same run | mlstm 16.5, mlstm_kernels 15 | mlstm: part mlstm timed out after 80 s; slstm_official 812 ms |"
    assert row in block.splitlines()
    assert "commit abc123" in block and "torch 2.11.0" in block


def test_update_docs_rewrites_only_the_block(tmp_path, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Title\n\nbefore\n\n{table.BEGIN}\nold text\n{table.END}\n\nafter\n")
    folder = tmp_path / "gpu"
    folder.mkdir()
    (folder / "2026-12-01-nvidia-h200.json").write_text(json.dumps(_result("2026-12-01T10:00:00Z")))
    assert main(["kernels", "scoreboard", "--out", str(folder), "--update-docs", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("# Title\n\nbefore\n\n") and text.endswith(f"{table.END}\n\nafter\n")
    assert table.read_docs_block(doc) == table.docs_block(folder)
    assert "| mlstm_T4096 | 1.1 | <= 1.25 | **yes** | same run |" in text
    assert not table.update_docs(doc, folder)  # already current
    capsys.readouterr()
    assert main(["kernels", "scoreboard", "--out", str(folder), "--table"]) == 0
    assert capsys.readouterr().out.strip() == table.docs_block(folder)


def test_a_page_without_the_block_is_refused(tmp_path, capsys):
    (tmp_path / "plain.md").write_text("# no block here\n")
    for doc in (tmp_path / "plain.md", tmp_path / "missing.md"):
        assert main(["kernels", "scoreboard", "--out", str(tmp_path), "--update-docs", str(doc)]) == 2
        assert "scoreboard" in capsys.readouterr().err
    assert (tmp_path / "plain.md").read_text() == "# no block here\n"
