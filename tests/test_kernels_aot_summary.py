"""The summary of the ahead-of-time compile table (seqzoo/bench/aot_summary.py, ``seqzoo kernels summary``): the
occupancy formula against cases worked by hand, the ranges over kept configs, the command's errors, and the table
in docs/benchmarks.md being exactly what the command prints from the committed full table."""

import subprocess
import sys

import pytest
from conftest import REPO

from seqzoo.bench.aot_summary import occupancy, read_table, summary_markdown, summary_rows, warps
from seqzoo.errors import InputError

TABLE = REPO / "benchmarks" / "aot" / "compile_table.csv"


@pytest.mark.parametrize(
    "registers, shared, num_warps, target, expected",
    [
        (32, 0, 4, "sm_90", 1.0),  # 1024 registers a warp: 64 warps fit, 16 blocks of 4
        (255, 0, 8, "sm_90", 0.125),  # 8192 a warp (255 rounds up to 256): 8 warps, one block
        (128, 0, 4, "sm_80", 0.25),  # 4096 a warp: 16 warps, 4 blocks
        (32, 102400, 4, "sm_80", 0.0625),  # 100 KB + 1 KB reserved: one block in 164 KB
        (32, 102400, 4, "sm_90", 0.125),  # two in 228 KB
        (16, 0, 1, "sm_100", 0.5),  # 32 blocks of one warp at most
        (72, 0, 2, "sm_80", 0.4375),  # 2304 a warp: 28 warps, 14 blocks of 2
    ],
)
def test_occupancy_worked_by_hand(registers, shared, num_warps, target, expected):
    assert occupancy(registers, shared, num_warps, target) == expected


def test_warps_from_the_config_label_and_bad_input():
    assert warps("BV=16,w8,s1") == 8 and warps("BLOCK_R=32,BT=16,w2,s3") == 2
    with pytest.raises(InputError):
        warps("BV=16")
    with pytest.raises(InputError, match="target"):
        occupancy(32, 0, 4, "sm_75")


def row(kernel, target, config, registers, spill, shared, kept, status="ok"):
    return {
        "op": "mlstm",
        "kernel": kernel,
        "target": target,
        "config": config,
        "status": status,
        "registers": registers,
        "spill_bytes": spill,
        "shared": shared,
        "kept": kept,
    }


def test_ranges_are_over_kept_configs_and_the_spill_over_all():
    rows = [
        row("_k", "sm_90", "BV=16,w4,s1", 64, 0, 2048, True),
        row("_k", "sm_90", "BV=32,w4,s1", 128, 0, 4096, "True"),  # as csv.DictReader reads it
        row("_k", "sm_90", "BV=64,w8,s1", 255, 512, 8192, False),
        row("_k", "sm_90", "BV=64,w8,s2", "", "", "", False, status="error"),
        row("_k", "sm_100", "BV=64,w8,s1", 255, 96, 8192, "False"),
    ]
    by_target = {s["target"]: s for s in summary_rows(rows)}
    s = by_target["sm_90"]
    assert (s["compiles"], s["kept"], s["registers"], s["shared"]) == (4, 2, [64, 128], [2048, 4096])
    assert (s["kept_spill"], s["largest_spill"]) == (0, 512)
    md = summary_markdown(rows).splitlines()
    assert md[2] == "| mlstm | `_k` | sm_90 | 4 | 2 | 64–128 | 2.0–4.0 | 25–50 % | 0 / 512 |"
    assert md[3] == "| mlstm | `_k` | sm_100 | 1 | 0 | – | – | – | 0 / 96 |"  # sm_100 after sm_90


def run_summary(*args):
    return subprocess.run([sys.executable, "-m", "seqzoo", "kernels", "summary", *args], capture_output=True, text=True)


def test_the_command_refuses_a_missing_or_foreign_table(tmp_path):
    res = run_summary("--table", str(tmp_path / "none.csv"))
    assert res.returncode == 2 and "--table" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="not a compile table"):
        read_table(tmp_path / "other.csv")


def test_the_docs_summary_is_what_the_command_prints_from_the_committed_table(tmp_path):
    out = tmp_path / "summary.md"
    res = run_summary("--table", str(TABLE), "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert out.read_text() == summary_markdown(read_table(TABLE))
    assert out.read_text() in (REPO / "docs" / "benchmarks.md").read_text()
