"""rmt-memory / rmt-curriculum through the sweep runner, on tiny generated data (byte tokenizer, one small book):
hash-named run folders, an unchanged rerun trains nothing, a new setting trains only its run, errors by name."""

import json

import pytest

from seqzoo.errors import InputError
from seqzoo.experiments import get_experiment

TINY = {"n_segments": 2, "segment_size": 64, "steps": 3, "batch_size": 4, "eval_samples": 8, "tokenizer": "byte"}


@pytest.fixture
def data(tmp_path):
    books = tmp_path / "data" / "gutenberg-nltk"
    books.mkdir(parents=True)
    (books / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 60)
    return tmp_path / "data"


def _run(name, out, data, **kw):
    return get_experiment(name).run(out, data_dir=str(data), cache_dir=str(data / "cache"), **kw)


def _trained(out):
    """run key -> mtime of its training log (changes only when the run trains)."""
    return {p.parent.parent.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*/train/curriculum.jsonl")}


def test_rmt_memory_runs_are_hash_named_and_skipped(tmp_path, data):
    out = tmp_path / "mem"
    res = _run("rmt-memory", out, data, mem_sizes="2,0", **TINY)
    rows = res["results"]
    assert [r["num_mem_tokens"] for r in rows] == [2, 0]
    assert all(0.0 <= r["test_accuracy"] <= 1.0 for r in rows)
    assert (out / "results.csv").is_file() and (out / "accuracy.png").is_file()
    first = _trained(out)
    assert len(first) == 2 and set(first) == {r["run"] for r in rows}
    for key in first:
        cfg = json.loads((out / "runs" / key / "config.json").read_text())
        assert cfg["config"]["model"]["num_mem_tokens"] in (2, 0) and (out / "runs" / key / "done.json").is_file()

    again = _run("rmt-memory", out, data, mem_sizes="2,0", **TINY)
    assert _trained(out) == first  # nothing retrained
    assert [r["test_accuracy"] for r in again["results"]] == [r["test_accuracy"] for r in rows]

    _run("rmt-memory", out, data, mem_sizes="2,0,1", **TINY)
    now = _trained(out)
    assert len(now) == 3 and {k: now[k] for k in first} == first  # only the new m=1 run trained


def test_rmt_curriculum_methods_and_segments(tmp_path, data):
    out = tmp_path / "cur"
    res = _run(
        "rmt-curriculum",
        out,
        data,
        task="memorize",
        n_train=2,
        segment_size=64,
        total_steps=4,
        methods="naive,fixed",
        eval_max=3,
        batch_size=4,
        eval_samples=8,
        tokenizer="byte",
        seeds="0",
        pretrain_steps=0,  # random initialisation (the pre-trained path: tests/test_rmt_curriculum_protocol.py)
    )
    rows = res["results"]
    assert {r["pretrained"] for r in rows} == {""}
    assert {(r["method"], r["n_eval"]) for r in rows} == {(m, n) for m in ("naive", "fixed") for n in (1, 2, 3)}
    fixed = next(r for r in rows if r["method"] == "fixed")
    assert fixed["stage_steps"].startswith("1:")  # the curriculum starts at one segment
    assert len(_trained(out)) == 2 and (out / "accuracy_vs_segments.png").is_file()


def test_rmt_experiment_errors(tmp_path, data, monkeypatch):
    monkeypatch.delenv("SEQZOO_DATA", raising=False)
    with pytest.raises(InputError, match="data_dir"):
        get_experiment("rmt-memory").run(tmp_path / "x", **TINY)
    with pytest.raises(InputError, match="threads"):
        _run("rmt-memory", tmp_path / "x", data, threads=2)
    with pytest.raises(InputError, match="methods"):
        _run("rmt-curriculum", tmp_path / "x", data, methods="naive,bogus")
    assert get_experiment("rmt_memory").name == "rmt-memory"  # old name kept as an alias
    with pytest.raises(InputError, match="segment_size"):
        _run("rmt-memory", tmp_path / "x", data, **{**TINY, "segment_size": 8})
