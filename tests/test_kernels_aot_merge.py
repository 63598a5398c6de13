"""Merging one op's recompiled rows into the committed compile table (seqzoo/bench/aot_merge.py,
``seqzoo kernels merge``): on a copy of the committed table, the op's rows are appended to the CSV and the
markdown's counts, no-kept-config lines and per-launch rows follow; merging the same rows again changes nothing;
bad input is refused before anything is written."""

import shutil
import subprocess
import sys

import pytest
from conftest import REPO

from seqzoo.bench.aot import COLUMNS
from seqzoo.bench.aot_merge import merge
from seqzoo.bench.aot_summary import read_table
from seqzoo.errors import InputError

TABLE = REPO / "benchmarks" / "aot" / "compile_table.csv"


def row(kernel, config, target, kept, spill=0, launch="HAS_SEG=False", status="ok"):
    return {
        "op": "newop",
        "kernel": kernel,
        "dtype": "float32",
        "constexprs": launch,
        "config": config,
        "target": target,
        "status": status,
        "registers": 64,
        "spill_bytes": spill,
        "shared": 1024,
        "smem_limit": 232448,
        "fits": True,
        "kept": kept,
        "known_fault": False,
        "i32_offsets": 0,
        "scenario": "s",
        "launch_has_kept": True,
        "compile_s": 1.0,
    }


def rows():
    out = [row("_new_kernel", "w4,s1", "sm_90", True), row("_new_kernel", "w8,s1", "sm_90", False, spill=16)]
    out += [row("_new_kernel", "w4,s1", "sm_80", False, spill=8, launch="HAS_SEG=True")]
    out[-1]["launch_has_kept"] = False
    return out


@pytest.fixture
def table(tmp_path):
    shutil.copy(TABLE, tmp_path / "t.csv")
    shutil.copy(TABLE.with_suffix(".md"), tmp_path / "t.md")
    return tmp_path / "t.csv"


def counts(md):
    text = md.read_text().split("## Summary", 1)[1].split("##", 1)[0]
    return {
        k: int(v) for k, v in (x[2:].split(": ", 1) for x in text.splitlines() if x[2:].split(":")[0].isidentifier())
    }


def test_merge_appends_the_rows_and_updates_the_markdown(table):
    before_csv, before = read_table(table), counts(table.with_suffix(".md"))
    old_launch_rows = [x for x in table.with_suffix(".md").read_text().splitlines() if x.startswith("| _")]
    merged = merge(table, rows(), {"not_launched": ["newop d=9: too wide", "mlstm K=1: not this op"]})
    after_csv, after = read_table(table), counts(table.with_suffix(".md"))
    assert after_csv[: len(before_csv)] == before_csv and len(after_csv) == len(before_csv) + 3
    assert list(after_csv[0]) == list(COLUMNS) and after_csv[-1]["kernel"] == "_new_kernel"
    assert after == merged
    assert after["compiled"] == before["compiled"] + 3 and after["kept"] == before["kept"] + 1
    assert after["pruned"] == before["pruned"] + 2 and after["launches"] == before["launches"] + 2
    md = table.with_suffix(".md").read_text()
    assert "- launch without a kept config: _new_kernel HAS_SEG=True sm_80" in md
    assert "- not launched on any GPU (PyTorch path): newop d=9: too wide" in md
    assert "not this op" not in md
    launch_rows = [x for x in md.splitlines() if x.startswith("| _")]
    assert [x for x in launch_rows if "_new_kernel" not in x] == old_launch_rows
    assert "| _new_kernel | float32 | HAS_SEG=False | sm_90 | 2 | 0 | 1 | 1 | 16 |" in launch_rows


def test_merging_the_same_rows_again_changes_nothing(table):
    merge(table, rows(), {})
    csv_once, md_once = table.read_text(), table.with_suffix(".md").read_text()
    merge(table, rows(), {})
    assert table.read_text() == csv_once and table.with_suffix(".md").read_text() == md_once


def test_merge_refuses_bad_input_before_writing(tmp_path, table):
    before = table.read_text()
    with pytest.raises(InputError, match="--table"):
        merge(tmp_path / "missing.csv", rows(), {})
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    (tmp_path / "bad.md").write_text("## Summary\n\n## Per kernel, launch and target\n")
    with pytest.raises(InputError, match="columns"):
        merge(tmp_path / "bad.csv", rows(), {})
    assert table.read_text() == before
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "seqzoo",
            "kernels",
            "merge",
            "--rows",
            str(tmp_path / "none.json"),
            "--table",
            str(table),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "--rows" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert table.read_text() == before


def test_check_refuses_an_unknown_op_before_any_work():
    from seqzoo.bench import aot

    with pytest.raises(InputError, match="--ops: unknown op 'slstmx'"):
        aot.check(ops=["slstmx"], sizes={"slstm": [16]})
