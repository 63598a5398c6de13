"""``seqzoo bench --suite official`` (seqzoo/bench/official.py): missing packages become rows with the reason;
with the packages installed, a tiny run (T = 16) agrees with them and gives finite times. No timing asserts."""

import csv
import json
import math
import sys

import pytest
import torch

from seqzoo.bench import official
from seqzoo.cli import main
from seqzoo.errors import InputError

OFFICIAL_MODULES = (
    "xlstm",
    "mlstm_kernels",
    "mlstm_kernels.torch",
    "mlstm_kernels.torch.chunkwise",
    "mlstm_kernels.torch.chunkwise.native",
    "recurrentgemma",
    "recurrentgemma.torch",
)


def _require(pair: str) -> None:
    try:
        {
            "slstm": lambda: official.import_official("xlstm"),
            "rglru": lambda: official.import_recurrentgemma_torch(official.import_official),
            "mlstm": lambda: official.import_official("mlstm_kernels.torch.chunkwise.native"),
            "mlstm_custbw": lambda: official.import_official("mlstm_kernels.torch.chunkwise.native"),
        }[pair]()
    except ImportError as e:
        pytest.skip(f"{pair}: official package not importable ({e})")


# ------------------------------------------------------------------------------------------ packages missing
def test_missing_packages_are_rows_with_the_reason(monkeypatch, tmp_path):
    for name in OFFICIAL_MODULES:  # a None entry makes `import name` raise ModuleNotFoundError
        monkeypatch.setitem(sys.modules, name, None)
    rows = official.run_official_bench(tmp_path, [16], repeats=1, pairs=list(official.PAIRS))
    assert [r["pair"] for r in rows] == list(official.PAIRS)
    for r in rows:
        assert r["status"] == "not importable", r
        assert "not importable" in r["error"] and "ModuleNotFoundError" in r["error"]
        assert "ours_ms" not in r and "ratio" not in r
        assert r["T"] == 16 and r["B"] == official.SHAPES[r["pair"]]["B"]
    data = json.loads((tmp_path / "official.json").read_text())
    assert data["config"]["lengths"] == [16] and len(data["rows"]) == len(rows)
    with open(tmp_path / "official.csv") as f:
        assert [r["status"] for r in csv.DictReader(f)] == ["not importable"] * len(rows)
    assert "not importable" in (tmp_path / "official.md").read_text()


def test_cli_with_failing_imports_exits_0_and_prints_the_table(monkeypatch, tmp_path, capsys):
    def refuse(module):
        raise ImportError(f"no {module} here")

    monkeypatch.setattr(official, "import_official", refuse)
    out = tmp_path / "bench"
    assert main(["bench", "--suite", "official", "--out", str(out), "--lengths", "16", "--repeats", "1"]) == 0
    text = capsys.readouterr().out
    for pair in official.DEFAULT_PAIRS:
        assert f"| {pair} | 16 |" in text
    assert text.count("not importable: ImportError: no ") == len(official.DEFAULT_PAIRS)
    assert {p.name for p in out.iterdir()} == {"official.json", "official.csv", "official.md"}


def test_bad_arguments_are_refused():
    with pytest.raises(InputError, match="--pairs"):
        official.run_official_bench(None, [16], pairs=["slstm", "nope"])
    with pytest.raises(InputError, match="--repeats"):
        official.run_official_bench(None, [16], repeats=0)
    with pytest.raises(InputError, match="--lengths"):
        official.run_official_bench(None, [0])
    with pytest.raises(InputError, match="--threads"):
        official.run_official_bench(None, [16], threads=0)


# ------------------------------------------------------------------------------------------ packages present
@pytest.mark.parity
def test_tiny_run_agrees_and_gives_finite_times(tmp_path):
    for pair in official.DEFAULT_PAIRS:
        _require(pair)
    rows = official.run_official_bench(tmp_path, [16], repeats=2)
    assert [r["pair"] for r in rows] == list(official.DEFAULT_PAIRS)
    for r in rows:
        assert r["status"] == "measured", r
        assert r["agree"] is True
        assert r["y_gap"] <= official.Y_TOL and r["grad_gap"] <= official.GRAD_TOL
        for key in ("ours_ms", "official_ms", "ratio"):
            assert math.isfinite(r[key]) and r[key] > 0, (r["pair"], key, r[key])
        assert len(r["ours_all_ms"]) == len(r["official_all_ms"]) == 2
        assert r["versions"] and "not installed" not in r["versions"]
    assert rows[2]["chunk"] == 16  # the official chunkwise kernel needs T to be a multiple of the chunk
    data = json.loads((tmp_path / "official.json").read_text())
    assert data["config"]["versions"]["torch"] == torch.__version__


@pytest.mark.parity
@pytest.mark.parametrize("pair", official.DEFAULT_PAIRS)
def test_the_check_catches_a_wrong_weight(pair):
    """The agreement check has teeth: one of our weights (or inputs) moved and it refuses the pair."""
    _require(pair)
    ours, theirs, _ = official.PAIRS[pair].build(16)
    with torch.no_grad():
        (ours.params or ours.inputs)[0].add_(0.5)
    assert official.agreement(ours, theirs)["agree"] is False


@pytest.mark.parity
def test_custbw_is_refused_its_gradient_is_another_one():
    """mlstm_kernels' native_custbw: same forward, but not the gradient of it (module docstring)."""
    _require("mlstm_custbw")
    (row,) = official.run_official_bench(None, [64], repeats=1, pairs=["mlstm_custbw"])
    assert row["status"] == "outputs differ"
    assert row["y_gap"] <= official.Y_TOL and row["grad_gap"] > 0.1
    assert "ours_ms" not in row
