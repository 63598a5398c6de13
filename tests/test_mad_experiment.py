"""``seqzoo experiment mad`` at tiny settings: keyed runs, seeds merged, the best grid point per setting, MAD scores
and the report; MAD's settings grid; the compression autoencoder; bad options refused before anything is written."""

from __future__ import annotations

import json

import pytest
import torch

from seqzoo.errors import InputError
from seqzoo.experiments import get_experiment
from seqzoo.experiments.mad import SETTINGS, best_rows, mad_scores, task_settings

TINY = {
    "models": "attention",
    "tasks": "recall,compression,memorization",
    "settings": "baseline",
    "task_args": "seq_len=16,train_size=16,memorization.vocab_size=33",
    "d_model": 16,
    "n_layers": 1,
    "attention_heads": 2,
    "epochs": 2,
    "batch_size": 8,
    "lrs": "1e-3",
    "weight_decays": "0,0.1",
    "seeds": "0,1",
    "test_samples": 8,
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    out = tmp_path_factory.mktemp("mad")
    return out, get_experiment("mad").run(out, **TINY)


def test_runs_follow_mads_protocol_and_are_not_retrained(ran):
    out, result = ran
    runs = sorted((out / "runs").iterdir())
    assert len(runs) == 3 * 2 * 2  # tasks x weight decays x seeds
    configs = [json.loads((p / "config.json").read_text())["config"] for p in runs]
    for c in configs:
        train = c["train"]
        assert train["steps"] == 2 * (16 // 8) and train["warmup_steps"] == 0 and train["grad_clip"] is None
        assert train["min_lr_ratio"] == pytest.approx(1e-6 / 1e-3) and train["betas"] == [0.9, 0.999]
        assert c["task"]["train_size"] == 16 and c["task"]["seq_len"] == 16
    by_task = {c["task"]["name"]: c for c in configs}
    assert by_task["mad-compression"]["model"]["builder"].endswith("mad_models:compression_autoencoder")
    assert by_task["mad-memorization"]["task"]["vocab_size"] == 33
    assert by_task["mad-recall"]["model"]["config"]["mixer_kwargs"]["attention"]["n_heads"] == 2
    stamps = {p.name: (p / "done.json").stat().st_mtime_ns for p in runs}
    again = get_experiment("mad").run(out, **TINY)
    assert {p.name: (p / "done.json").stat().st_mtime_ns for p in sorted((out / "runs").iterdir())} == stamps
    assert again["scores"] == result["scores"]


def test_best_grid_point_per_setting_and_scores(ran):
    out, result = ran
    by_grid = json.loads((out / "by_grid.json").read_text())
    assert len(by_grid) == 3 * 2 and all(r["n"] == 2 for r in by_grid)
    for r in result["rows"]:
        same = [b for b in by_grid if (b["task"], b["setting"]) == (r["task"], r["setting"])]
        assert r["valid_accuracy_mean"] == max(b["valid_accuracy_mean"] for b in same)
    scores = {s["task"]: s for s in result["scores"]}
    assert set(scores) == {"recall", "compression", "memorization"}
    for s in scores.values():  # one setting each: the score is that setting's best mean, spread over the seeds
        (row,) = [r for r in result["rows"] if r["task"] == s["task"]]
        assert s["score_mean"] == pytest.approx(row["valid_accuracy_mean"])
        assert s["score_values"] == row["valid_accuracy_values"] and s["n"] == 2
    report = (out / "report.md").read_text()
    assert "| model | recall | compression | memorization |" in report and "| attention |" in report
    for stem in ("all_runs", "by_grid", "results", "scores"):
        assert (out / f"{stem}.csv").stat().st_size > 0 and (out / f"{stem}.md").stat().st_size > 0


def test_mads_settings_grid():
    counts = {label: len(task_settings(label, "all", {})) for label in SETTINGS}
    assert counts == {
        "recall": 11,
        "fuzzy-recall": 11,
        "noisy-recall": 14,
        "selective-copy": 13,
        "compression": 11,
        "memorization": 6,
    }
    (base,) = task_settings("noisy-recall", "baseline", {})
    assert base == ("baseline", {"name": "mad-noisy-recall", "vocab_size": 32, "noise_vocab_size": 16, "seq_len": 128,
                                 "train_size": 12_800, "frac_noise": 0.2})  # fmt: skip
    # an override that makes the changes equal to the baseline keeps one setting
    assert [s for s, _ in task_settings("memorization", "all", {"vocab_size": 64})] == ["baseline"]


def test_best_rows_ties_and_scores_per_seed():
    base = {"model": "m", "task": "recall", "n": 2}
    rows = best_rows(
        [
            {**base, "setting": "a", "lr": 1e-3, "weight_decay": 0.0, "valid_accuracy_mean": 0.5,
             "valid_accuracy_values": [0.4, 0.6]},
            {**base, "setting": "a", "lr": 1e-4, "weight_decay": 0.1, "valid_accuracy_mean": 0.5,
             "valid_accuracy_values": [0.5, 0.5]},
            {**base, "setting": "b", "lr": 1e-3, "weight_decay": 0.0, "valid_accuracy_mean": 1.0,
             "valid_accuracy_values": [1.0, 1.0]},
        ]
    )  # fmt: skip
    assert [(r["setting"], r["lr"]) for r in rows] == [("a", 1e-4), ("b", 1e-3)]
    (score,) = mad_scores(rows)
    assert score["score_mean"] == pytest.approx(0.75) and score["score_values"] == [0.75, 0.75]


def test_compression_autoencoder_decodes_from_the_last_state_only():
    from seqzoo.experiments.mad_models import compression_autoencoder
    from seqzoo.experiments.zoo_models import model_spec
    from seqzoo.tasks import build_task

    task = build_task("mad-compression", seq_len=12)
    torch.manual_seed(0)
    ae = compression_autoencoder(task, model_spec("hawk", 16, 16, 1, 12)).eval()
    x, _ = task.build(3, 0)
    logits = ae(x).logits
    assert logits.shape == (3, 12, 16)
    hidden, _ = ae.encoder.trunk(x)
    code = hidden[:, -1:]
    assert torch.allclose(logits, ae.unembed(ae.decoder(code + ae.positions)), atol=1e-6)
    y = x.clone()
    y[:, 0] = (y[:, 0] + 1) % 15  # the first token reaches every position's logits, through the code alone
    assert ((ae(y).logits - logits).abs().amax(-1) > 0).all()
    assert not hasattr(ae.encoder, "lm_head")


@pytest.mark.parametrize(
    "bad,named",
    [
        ({"models": "attention,mamba"}, "models: unknown 'mamba'"),
        ({"tasks": "recall,induction"}, "tasks: unknown 'induction'"),
        ({"settings": "hard"}, "settings must be 'all' or 'baseline'"),
        ({"task_args": "seq_len=15"}, "seq_len must be even"),
        ({"task_args": "recall.seq_lenn=16"}, "unknown argument\\(s\\) seq_lenn"),
        ({"task_args": "copy.seq_len=16"}, "unknown task 'copy'"),
        ({"min_lr": 1e-2}, "min_lr must be in \\(0, every lr\\]"),
        ({"weight_decays": "-0.1"}, "weight_decays must be >= 0"),
        ({"epochs": 0}, "epochs must be a positive int"),
    ],
)
def test_bad_options_refused_before_anything_is_written(tmp_path, bad, named):
    out = tmp_path / "out"
    with pytest.raises(InputError, match=named):
        get_experiment("mad").run(out, **{**TINY, **bad})
    assert not out.exists()
