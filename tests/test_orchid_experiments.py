"""The Orchid experiments end to end at toy sizes: files written, failures recorded rather than raised, results keyed
by their whole configuration (sweep runner)."""

import json

import pytest

from seqzoo.errors import InputError
from seqzoo.experiments import EXPERIMENTS


def test_orchid_ar_grid_writes_rows_and_plot(tmp_path):
    summary = EXPERIMENTS["orchid-ar"].run(
        tmp_path,
        vocab_sizes="10",
        lengths="8",
        models="orchid,long_conv",
        seeds="0",
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
    for r in rows:  # one hash-named folder per run, holding the trainer's files and the sweep's record
        assert (tmp_path / "runs" / r["run"] / "done.json").is_file()
        assert (tmp_path / "runs" / r["run"] / "train" / "metrics.jsonl").is_file()


def _ar(out, **kw):
    base = dict(vocab_sizes="10", lengths="8", models="long_conv", seeds="0", steps=4, eval_every=2, eval_samples=16)
    return EXPERIMENTS["orchid-ar"].run(out, **{**base, "batch_size": 4, "d_model": 16, **kw})


def _mtimes(out):
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*/done.json")}


def test_orchid_ar_rerun_trains_only_what_changed(tmp_path):
    """Issue #14: a folder named by model/V/T/seed reused old numbers after steps or lr changed. Runs are now
    keyed by their whole configuration: a changed setting trains a new run, an unchanged rerun trains nothing."""
    _ar(tmp_path)
    first = _mtimes(tmp_path)
    rows1 = json.loads((tmp_path / "results.json").read_text())
    _ar(tmp_path)  # unchanged: nothing trained, the same numbers
    assert _mtimes(tmp_path) == first
    assert json.loads((tmp_path / "results.json").read_text())[0]["valid_loss"] == rows1[0]["valid_loss"]
    _ar(tmp_path, steps=6)  # another budget: a new run with its own numbers; the old one is kept, not reused
    rows2 = json.loads((tmp_path / "results.json").read_text())
    assert rows2[0]["run"] != rows1[0]["run"] and len(rows2[0]["curve"]) == 3
    _ar(tmp_path, lr=1e-2)
    rows3 = json.loads((tmp_path / "results.json").read_text())
    assert rows3[0]["run"] not in (rows1[0]["run"], rows2[0]["run"])
    assert rows3[0]["valid_loss"] != rows1[0]["valid_loss"]
    after = _mtimes(tmp_path)
    assert len(after) == 3 and {k: after[k] for k in first} == first
    # collect_only reads the finished runs without training
    _ar(tmp_path, lr=1e-2, collect_only=True)
    assert _mtimes(tmp_path) == after
    assert json.loads((tmp_path / "results.json").read_text())[0]["valid_loss"] == rows3[0]["valid_loss"]


def test_orchid_ar_schedule_and_beta2_reach_the_run(tmp_path):
    """``schedule`` / ``beta2`` are part of a run's configuration (a new run, its own key) and reach TrainConfig;
    bad values are refused before anything is written."""
    _ar(tmp_path / "a")
    _ar(tmp_path / "b", schedule="onecycle", beta2=0.999)
    run_a = json.loads((tmp_path / "a" / "results.json").read_text())[0]["run"]
    run_b = json.loads((tmp_path / "b" / "results.json").read_text())[0]["run"]
    assert run_a != run_b
    used = json.loads((tmp_path / "b" / "runs" / run_b / "train" / "train_config.json").read_text())
    assert used["schedule"] == "onecycle" and used["betas"] == [0.9, 0.999]
    for bad in (dict(schedule="linear"), dict(beta2=1.0)):
        with pytest.raises(InputError):
            _ar(tmp_path / "bad", **bad)
    assert not (tmp_path / "bad").exists()


def test_orchid_ar_collect_only_reports_unfinished_runs(tmp_path):
    _ar(tmp_path, collect_only=True)
    (row,) = json.loads((tmp_path / "results.json").read_text())
    assert row["status"] == "unfinished" and row["curve"] == [] and not (tmp_path / "runs" / row["run"]).exists()


def test_orchid_experiments_refuse_unknown_options_and_models(tmp_path):
    with pytest.raises(InputError, match="threads"):
        _ar(tmp_path, threads=2)
    with pytest.raises(InputError, match="models"):
        _ar(tmp_path, models="orchid,mamba")


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


def test_orchid_mlm_compares_mixers_in_the_m2_slot(tmp_path, monkeypatch):
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
    run = summary["attention_s0"]["run"]
    cfg = json.loads((tmp_path / "out" / "runs" / run / "train" / "model_config.json").read_text())
    assert cfg["pattern"] == ["attention"] and cfg["readd_positions"] and (tmp_path / "out" / "mlm_curves.png").exists()
    monkeypatch.delenv("SEQZOO_DATA", raising=False)
    with pytest.raises(InputError, match="path= is needed"):  # no built-in machine path to fall back on
        EXPERIMENTS["orchid-mlm"].run(tmp_path / "none")


def test_orchid_images_through_the_sweep(tmp_path):
    pytest.importorskip("sklearn")
    kw = dict(models="orchid,attention", seeds="0", steps=2, eval_every=2, batch_size=8, d_model=16, n_layers=1)
    summary = EXPERIMENTS["orchid-images"].run(tmp_path, **kw)
    rows = json.loads((tmp_path / "results.json").read_text())
    assert [r["model"] for r in rows] == ["orchid", "attention"] and all(len(r["curve"]) == 1 for r in rows)
    # attention's MLP is widened to Orchid's parameter count (within one MLP unit per block)
    assert rows[1]["mlp_hidden"] is not None and abs(rows[1]["params"] - rows[0]["params"]) < 0.05 * rows[0]["params"]
    assert summary["orchid"]["accuracies"] == [rows[0]["test_accuracy"]]  # the summary is on the test split
    assert summary["orchid"]["valid_accuracies"] == [rows[0]["valid_accuracy"]]
    done = json.loads((tmp_path / "runs" / rows[0]["run"] / "done.json").read_text())
    assert done["metrics"]["test_samples"] == 360  # the whole digits test split, none of it seen in training
    assert all((tmp_path / "runs" / r["run"] / "done.json").is_file() for r in rows)


def test_orchid_ar_fft_scaling_reaches_orchid_and_the_static_model_only_when_set(tmp_path):
    """``fft_scaling="authors"`` is a new run for Orchid and the static long conv (attention has no spectrum), and the
    mixer gets it; the default leaves the run's configuration, and so every existing run key, as it was."""
    kw = dict(models="long_conv,orchid,attention", steps=2, eval_every=2)
    _ar(tmp_path / "a", **kw)
    _ar(tmp_path / "b", fft_scaling="authors", **kw)
    rows = {d: {r["model"]: r for r in json.loads((tmp_path / d / "results.json").read_text())} for d in "ab"}

    def builder_args(d, run):
        return json.loads((tmp_path / d / "runs" / run / "config.json").read_text())["config"]["model"]["args"]

    for model in ("long_conv", "orchid"):
        run_a, run_b = rows["a"][model]["run"], rows["b"][model]["run"]
        assert run_a != run_b
        assert "fft_scaling" not in builder_args("a", run_a)
        assert builder_args("b", run_b)["fft_scaling"] == "authors"
        used = json.loads((tmp_path / "b" / "runs" / run_b / "train" / "model_config.json").read_text())
        assert used["mixer_kwargs"][model]["fft_scaling"] == "authors"
    assert rows["a"]["attention"]["run"] == rows["b"]["attention"]["run"]
    with pytest.raises(InputError, match="fft_scaling"):
        _ar(tmp_path / "bad", fft_scaling="ortho")
    assert not (tmp_path / "bad").exists()
