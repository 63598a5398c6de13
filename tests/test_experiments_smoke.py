"""Tiny smoke runs of the Griffin and xLSTM experiments through the sweep runner: result files written, one
hash-named run per (model, seed), an unchanged rerun trains nothing, text data only from path= or $SEQZOO_DATA."""

import json

import pytest

from seqzoo.errors import InputError
from seqzoo.experiments import get_experiment

MQAR = {"vocab_size": 16, "num_pairs": 2, "seq_len": 16, "steps": 2, "batch_size": 4, "eval_every": 2}
GRIFFIN = {"d_model": 16, "n_layers": 2, "window": 4, "eval_samples": 8}
XLSTM = {"d_model": 16, "eval_samples": 8}


def _done(out):
    """run key -> mtime of done.json (rewritten only when the run trains again)."""
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*/done.json")}


@pytest.mark.parametrize(
    "name, kw",
    [
        ("griffin-mqar", {**MQAR, **GRIFFIN, "models": "hawk,mqa"}),
        ("xlstm-mqar", {**MQAR, **XLSTM, "models": "xlstm10"}),
    ],
)
def test_mqar_experiments_run_through_the_sweep(tmp_path, name, kw):
    out = tmp_path / name
    rows = get_experiment(name).run(out, seeds="0,1", **kw)["rows"]
    assert len(rows) == len(kw["models"].split(",")) * 2 and all(0 <= r["valid_accuracy"] <= 1 for r in rows)
    assert (out / "results.csv").is_file() and (out / "config.json").is_file()
    first = _done(out)
    assert set(first) == {r["run"] for r in rows}
    for key in first:  # the resolved configuration sits in the run folder
        cfg = json.loads((out / "runs" / key / "config.json").read_text())
        assert cfg["config"]["task"]["num_pairs"] == 2 and cfg["config"]["seed"] in (0, 1)
    get_experiment(name).run(out, seeds="0,1", **kw)
    assert _done(out) == first  # unchanged rerun: nothing trained


def test_text_experiments_need_a_path_and_evaluate_longer(tmp_path, monkeypatch):
    monkeypatch.delenv("SEQZOO_DATA", raising=False)
    with pytest.raises(InputError, match="path="):
        get_experiment("griffin-text").run(tmp_path / "x")
    with pytest.raises(InputError, match="SEQZOO_DATA"):
        monkeypatch.setenv("SEQZOO_DATA", str(tmp_path / "nowhere"))
        get_experiment("xlstm-extrapolation").run(tmp_path / "x")
    (tmp_path / "data" / "tinyshakespeare").mkdir(parents=True)
    (tmp_path / "data" / "tinyshakespeare" / "input.txt").write_text("First Citizen: speak, speak.\n" * 400)
    monkeypatch.setenv("SEQZOO_DATA", str(tmp_path / "data"))  # the default corpus comes from the env var
    common = {"seq_len": 16, "eval_lengths": "16,32", "eval_tokens": 256, "steps": 2, "batch_size": 4}
    rows = get_experiment("griffin-text").run(
        tmp_path / "g", models="hawk", d_model=16, n_layers=2, window=4, **common
    )["rows"]
    assert [r["eval_len"] for r in rows] == [16, 32]
    rows = get_experiment("xlstm-extrapolation").run(tmp_path / "x", models="xlstm10", d_model=16, bins=4, **common)
    assert (tmp_path / "x" / "results.csv").is_file() and rows
