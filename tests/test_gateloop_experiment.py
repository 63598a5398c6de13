"""The GateLoop Memory Horizon experiment at toy size through the sweep runner: its own evaluation (accuracy per
memory span, |a| at resets) on top of the standard run, runs keyed by their whole configuration."""

import json

import pytest

from seqzoo.errors import InputError
from seqzoo.experiments import EXPERIMENTS

TINY = dict(
    variants="data,fixed_zeros",
    seq_len=16,
    n_resets=2,
    train_size=32,
    test_size=20,
    steps=2,
    batch_size=4,
    warmup_steps=1,
    eval_every=2,
    eval_samples=8,
    span_bin=4,
    device="cpu",
)


def test_memory_horizon_rows_spans_and_rerun(tmp_path):
    res = EXPERIMENTS["gateloop-memory-horizon"].run(tmp_path, **TINY)
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [r["variant"] for r in rows] == ["data", "fixed_zeros"] and rows[0]["run"] != rows[1]["run"]
    for r in rows:
        assert 0 <= r["test_accuracy"] <= 1 and len(r["mean_mag_at_reset"]) == len(r["mean_mag_elsewhere"]) > 0
        # span bins partition the scored test positions: counts add up to test_size x seq_len
        assert sum(n for _, _, n in r["span_accuracy"]) == 20 * 16
        assert all(b % 4 == 0 for b, _, _ in r["span_accuracy"])
        assert (tmp_path / "runs" / r["run"] / "train" / "metrics.jsonl").is_file()
    assert res["results"][0]["test_accuracy"] == rows[0]["test_accuracy"]
    assert (tmp_path / "span_accuracy.png").exists() and (tmp_path / "span_accuracy.csv").exists()
    done = {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/done.json")}
    EXPERIMENTS["gateloop-memory-horizon"].run(tmp_path, **TINY)  # unchanged: nothing trained
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "runs").glob("*/done.json")} == done
    EXPERIMENTS["gateloop-memory-horizon"].run(tmp_path, **{**TINY, "variants": "data", "lr": 1e-2})
    assert len(list((tmp_path / "runs").glob("*/done.json"))) == 3  # only the changed run trained


def test_memory_horizon_refuses_unknown_variant_and_option(tmp_path):
    with pytest.raises(InputError, match="variants"):
        EXPERIMENTS["gateloop-memory-horizon"].run(tmp_path, **{**TINY, "variants": "data,nope"})
    with pytest.raises(InputError, match="parallel"):
        EXPERIMENTS["gateloop-memory-horizon"].run(tmp_path, **{**TINY, "parallel": 2})
