"""The Orchid experiments end to end at toy sizes: files written, failures recorded rather than raised."""

import json

import pytest

from seqzoo.experiments import EXPERIMENTS


def test_orchid_ar_grid_writes_rows_and_plot(tmp_path):
    summary = EXPERIMENTS["orchid-ar"].run(
        tmp_path,
        vocab_sizes="10",
        lengths="8",
        models="orchid,long_conv",
        steps=4,
        eval_every=2,
        eval_samples=16,
        batch_size=4,
        d_model=16,
    )
    assert set(summary) == {"orchid_V10_T8_s0", "long_conv_V10_T8_s0"}
    rows = json.loads((tmp_path / "results.json").read_text())
    assert all(r["status"] == "done" and 0 <= r["valid_accuracy"] <= 1 and len(r["curve"]) == 2 for r in rows)
    assert (tmp_path / "ar_curves.png").stat().st_size > 0


def test_orchid_ar_long_records_cpu_limit_and_skips_longer(tmp_path):
    """A run that exceeds its CPU budget is a row (status, steps done), and its longer lengths are skipped."""
    EXPERIMENTS["orchid-ar-long"].run(
        tmp_path,
        lengths="16,32",
        models="orchid",
        tokens_per_step=32,
        steps=2,
        d_model=16,
        eval_samples=2,
        cpu_limit=120,
    )
    EXPERIMENTS["orchid-ar-long"].run(
        tmp_path / "tight",
        lengths="16,32",
        models="attention",
        tokens_per_step=32,
        steps=2,
        d_model=16,
        eval_samples=2,
        cpu_limit=1,
    )
    ok = json.loads((tmp_path / "results.json").read_text())
    assert [(r["length"], r["status"], r["batch_size"]) for r in ok] == [(16, "ok", 2), (32, "ok", 1)]
    assert all(r["cpu_s_per_step"] > 0 and r["peak_rss_mb"] > 0 and r["params"] > 0 for r in ok)
    tight = json.loads((tmp_path / "tight" / "results.json").read_text())
    assert tight[0]["status"] == "cpu-limit>1s" and tight[0]["child_cpu_s"] >= 1
    assert tight[1]["status"].startswith("skipped (failed at a shorter length: cpu-limit")
    assert (tmp_path / "ar_long.png").exists() and (tmp_path / "tight" / "ar_long.png").exists()
    with pytest.raises(ValueError, match="lengths must be even"):
        EXPERIMENTS["orchid-ar-long"].run(tmp_path / "bad", lengths="15")


def test_orchid_bench_ratios(tmp_path):
    res = EXPERIMENTS["orchid-bench"].run(tmp_path, lengths="64", reps=1, d_model=16)
    rows = {r["mixer"]: r for r in res["rows"]}
    assert rows["orchid"]["status"] == rows["attention"]["status"] == "ok"
    assert rows["orchid"]["cpu_ratio_vs_attention"] == pytest.approx(
        rows["orchid"]["cpu_s"] / rows["attention"]["cpu_s"]
    )
    assert (tmp_path / "bench.png").exists()


def test_orchid_mlm_compares_mixers_in_the_m2_slot(tmp_path):
    (tmp_path / "a.txt").write_text("to be or not to be, that is the question. " * 300)
    summary = EXPERIMENTS["orchid-mlm"].run(
        tmp_path / "out",
        path=str(tmp_path / "a.txt"),
        steps=3,
        eval_every=3,
        eval_samples=8,
        batch_size=4,
        seq_len=32,
        d_model=16,
        filter_width=8,
    )
    assert set(summary) == {"orchid_s0", "long_conv_s0", "attention_s0"}
    cfg = json.loads((tmp_path / "out" / "runs" / "attention_s0" / "model_config.json").read_text())
    assert cfg["pattern"] == ["attention"] and cfg["readd_positions"] and (tmp_path / "out" / "mlm_curves.png").exists()
    with pytest.raises(ValueError, match="needs path="):
        EXPERIMENTS["orchid-mlm"].run(tmp_path / "none")
