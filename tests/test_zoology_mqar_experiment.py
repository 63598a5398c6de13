"""``seqzoo experiment zoology-mqar`` at tiny settings: keyed runs, seeds merged, the best rate per cell, state
sizes, plots and the report table; settings Zoology refuses are refused before anything is written."""

from __future__ import annotations

import json

import pytest

from seqzoo.errors import InputError
from seqzoo.experiments import get_experiment
from seqzoo.experiments.zoo_models import model_spec
from seqzoo.experiments.zoology_mqar import best_rows, cells, state_size

TINY = {
    "models": "attention,hawk",
    "seq_lens": "16",
    "num_pairs": "2,8",  # 8 pairs do not fit 16 tokens (4*8 > 16): that setting is left out
    "d_models": "16,32",
    "lrs": "1e-3,3e-3",
    "seeds": "0,1",
    "vocab_size": 32,
    "n_layers": 1,
    "steps": 2,
    "batch_size": 4,
    "eval_samples": 8,
    "eval_every": 0,
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    out = tmp_path_factory.mktemp("zoology-mqar")
    result = get_experiment("zoology-mqar").run(out, **TINY)
    return out, result


def test_runs_are_keyed_merged_and_resumable(ran):
    out, result = ran
    runs = sorted((out / "runs").iterdir())
    assert len(runs) == 2 * 2 * 2 * 2  # models x widths x rates x seeds, one (T, pairs) setting
    task = json.loads((runs[0] / "config.json").read_text())["config"]["task"]
    assert task["protocol"] == "zoology" and task["random_filler"] is False and task["power_a"] == 0.01
    train = json.loads((runs[0] / "config.json").read_text())["config"]["train"]
    assert train["scored_logits"] is True
    stamps = {p.name: (p / "done.json").stat().st_mtime_ns for p in runs}
    again = get_experiment("zoology-mqar").run(out, **TINY)  # every run found done: nothing retrained
    assert {p.name: (p / "done.json").stat().st_mtime_ns for p in sorted((out / "runs").iterdir())} == stamps
    assert again["rows"] == result["rows"]


def test_best_rate_per_cell_over_merged_seeds(ran):
    out, result = ran
    by_lr = json.loads((out / "by_lr.json").read_text())
    rows = result["rows"]
    assert len(rows) == 2 * 2 and all(r["n"] == 2 for r in rows)
    for r in rows:
        same = [b for b in by_lr if (b["model"], b["d_model"]) == (r["model"], r["d_model"])]
        assert len(same) == 2
        assert r["valid_accuracy_mean"] == max(b["valid_accuracy_mean"] for b in same)
        assert len(r["valid_accuracy_values"]) == 2
    report = (out / "report.md").read_text()
    assert "| model | d_model | T=16, 2 pairs |" in report
    for stem in ("acc_vs_d_model", "acc_vs_state"):
        assert (out / f"{stem}_T16_kv2.png").stat().st_size > 0
    assert len(json.loads((out / "all_runs.json").read_text())) == 16


def test_best_rows_picks_the_best_mean_and_the_smaller_rate_on_ties():
    base = {"model": "m", "seq_len": 64, "num_pairs": 4, "d_model": 64, "n": 2}
    rows = best_rows(
        [
            {**base, "lr": 1e-2, "valid_accuracy_mean": 0.5},
            {**base, "lr": 1e-3, "valid_accuracy_mean": 0.9},
            {**base, "lr": 1e-4, "valid_accuracy_mean": 0.9},
            {**base, "d_model": 128, "lr": 1e-3, "valid_accuracy_mean": None},
        ]
    )
    assert [(r["d_model"], r["lr"]) for r in rows] == [(64, 1e-4), (128, 1e-3)]


def test_state_size_counts_the_kv_cache_and_fixed_recurrent_states():
    def size(name, T, d):
        task = {"name": "mqar", "protocol": "zoology", "vocab_size": 300, "num_pairs": 2, "seq_len": T}
        return state_size(model_spec(name, 300, d, 2, T), task)

    # attention: keys and values of every position in both layers
    assert size("attention", 32, 16) == 2 * 2 * 32 * 16
    assert size("attention", 64, 16) == 2 * size("attention", 32, 16)
    assert size("hawk", 64, 16) == size("hawk", 32, 16) > 0  # a recurrence: independent of T


def test_cells_follow_zoologys_limit():
    assert cells([64, 128], [4, 8, 16, 32]) == [(64, 4), (64, 8), (64, 16), (128, 4), (128, 8), (128, 16), (128, 32)]


@pytest.mark.parametrize(
    "bad,named",
    [
        ({"models": "attention,mamba"}, "models: unknown 'mamba'"),
        ({"vocab_size": 16}, "vocab_size must be > seq_len"),
        ({"seq_lens": "15"}, "seq_len must be even"),
        ({"num_pairs": "8"}, "no setting with 4\\*num_pairs <= seq_len"),
        ({"power_a": -1.0}, "power_a must be a finite number > 0"),
    ],
)
def test_bad_settings_refused_before_anything_is_written(tmp_path, bad, named):
    out = tmp_path / "out"
    with pytest.raises(InputError, match=named):
        get_experiment("zoology-mqar").run(out, **{**TINY, **bad})
    assert not out.exists()


def test_a_diverged_run_scores_zero_and_is_not_retrained(tmp_path, monkeypatch):
    from seqzoo.errors import TrainingDivergedError
    from seqzoo.experiments import zoology_mqar_run

    real, calls = zoology_mqar_run.train_run, []

    def diverging_at_high_rate(config, run_dir):
        calls.append(config["train"]["lr"])
        if config["train"]["lr"] > 2e-3:
            raise TrainingDivergedError("training loss became nan at step 2 (planted)")
        return real(config, run_dir)

    monkeypatch.setattr(zoology_mqar_run, "train_run", diverging_at_high_rate)
    tiny = {**TINY, "models": "attention", "d_models": "16", "num_pairs": "2"}
    result = get_experiment("zoology-mqar").run(tmp_path, **tiny)
    (row,) = result["rows"]
    assert row["lr"] == 1e-3 and row["diverged"] == 0
    by_lr = {r["lr"]: r for r in json.loads((tmp_path / "by_lr.json").read_text())}
    assert by_lr[3e-3]["diverged"] == 2 and by_lr[3e-3]["valid_accuracy_values"] == [0.0, 0.0]
    assert sum(r["diverged"] for r in json.loads((tmp_path / "all_runs.json").read_text())) == 2
    calls.clear()
    get_experiment("zoology-mqar").run(tmp_path, **tiny)
    assert calls == []  # diverged runs are results: nothing is trained again
