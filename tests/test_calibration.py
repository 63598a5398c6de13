"""The calibration page: the published data (``experiments/published.py``) and ``seqzoo experiment calibration``
(``experiments/calibration.py``, ``calibration_measured.py``) on small result folders written here from rows, in
the layout of a ``zoology-mqar`` / ``mad`` --out folder (``runs/<key>/config.json`` and ``done.json``)."""

import json
import os

import pytest

from seqzoo.cli import main
from seqzoo.errors import InputError
from seqzoo.experiments import get_experiment
from seqzoo.experiments.calibration import verdict
from seqzoo.experiments.calibration_measured import MAD_LABELS, ZOOLOGY_LABELS, mad_cells, zoology_cells


def write_run(folder, labels, acc=None, steps=100, batch_size=64, task=None, tag="", extra=None, finished_at=None):
    """One run folder as the sweep runner leaves it; ``acc`` None: not finished (no done.json). ``tag`` tells apart
    runs with the same labels (a rerun after a code change); ``finished_at`` sets done.json's time (seconds)."""
    key = "r" + "-".join(str(v) for v in labels.values()) + f"-{steps}{tag}"
    run = folder / "runs" / key
    run.mkdir(parents=True)
    config = {"train": {"steps": steps, "batch_size": batch_size}, "task": task or {}}
    (run / "config.json").write_text(json.dumps({"key": key, "labels": labels, "config": config}))
    if acc is not None:
        done = run / "done.json"
        done.write_text(json.dumps({"metrics": {"valid_accuracy": acc, **(extra or {})}, "wall_s": 1.0}))
        if finished_at is not None:
            os.utime(done, (finished_at, finished_at))


def zoology_run(folder, model, T, P, d, lr, seed, acc=None, **kw):
    write_run(folder, dict(zip(ZOOLOGY_LABELS, (model, T, P, d, lr, seed))), acc, **kw)


def mad_run(folder, model, task, setting, lr, seed, acc, train_size=12_800, **kw):
    labels = dict(zip(MAD_LABELS, (model, task, setting, lr, 0.0, seed)))
    write_run(folder, labels, acc, task={"train_size": train_size}, **kw)


# ------------------------------------------------------------------------------------------------------ verdicts
def test_verdict_kinds():
    assert verdict(1.0, 0.99, 2, 0.05)[0] == "calibrated"
    kind, why = verdict(1.0, 0.70, 2, 0.05, ours=128_000, paper=6_400_000)
    assert kind == "not calibrated" and "below the published value by 0.300" in why
    assert "fewer samples trained (128,000) than the paper's budget (6,400,000)" in why
    kind, why = verdict(0.5, 0.70, 2, 0.05)
    assert kind == "not calibrated" and "above the published value by 0.200" in why
    assert verdict(1.0, 0.99, 1, 0.05) == ("not calibrated", "only one seed")
    assert verdict(1.0, None, 0, 0.05)[0] == "not run"
    assert verdict(None, 0.9, 2, 0.05)[0] == "no published value"
    assert verdict(0.9, 0.9, 2, 0.05, missing="scored over 1 of 11 settings") == (
        "not calibrated",
        "scored over 1 of 11 settings",
    )
    # fewer samples is no reason where the cell reached the published value anyway
    assert verdict(1.0, 0.99, 2, 0.05, ours=1, paper=10)[0] == "calibrated"


def test_tolerance_edge_is_inclusive():
    mean = (0.95 + 0.95) / 2  # 1.0 - 0.95 is 0.05000000000000004 in floats
    assert verdict(1.0, mean, 2, 0.05)[0] == "calibrated"
    assert verdict(1.0, 0.9499, 2, 0.05)[0] == "not calibrated"
    assert verdict(0.5, 0.55, 2, 0.05)[0] == "calibrated"
    assert verdict(0.5, 0.5501, 2, 0.05)[0] == "not calibrated"


# --------------------------------------------------------------------------------------------- measured folders
def test_zoology_cells_best_rate_budget_and_unfinished(tmp_path):
    z = tmp_path / "zoology"
    for seed, (a, b) in enumerate([(0.90, 0.99), (0.80, 0.97)]):
        zoology_run(z, "attention", 64, 4, 64, 2.1544e-3, seed, a)
        zoology_run(z, "attention", 64, 4, 64, 1e-2, seed, b)
    zoology_run(z, "attention", 64, 4, 64, 1e-2, 0, 0.5, steps=10)  # a smaller budget in the same folder
    zoology_run(z, "attention", 64, 4, 128, 1e-2, 0)  # not finished
    (row,) = [r for r in zoology_cells(z) if r["d_model"] == 64]
    assert row["lr"] == 1e-2 and row["n"] == 2 and row["lrs"] == 2
    assert row["valid_accuracy_mean"] == pytest.approx(0.98) and row["valid_accuracy_values"] == [0.99, 0.97]
    assert (row["steps"], row["batch_size"], row["samples"], row["set_aside"]) == (100, 64, 6400, 1)
    (open_cell,) = [r for r in zoology_cells(z) if r["d_model"] == 128]
    assert open_cell["valid_accuracy_mean"] is None and open_cell["unfinished"] == 1


def test_reruns_count_once_and_diverged_runs_are_counted(tmp_path):
    z = tmp_path / "zoology"
    zoology_run(z, "attention", 64, 4, 64, 1e-2, 0, 0.2, tag="old", finished_at=1_000)  # before a code change
    zoology_run(z, "attention", 64, 4, 64, 1e-2, 0, 0.9, tag="new", finished_at=2_000)
    zoology_run(z, "attention", 64, 4, 64, 1e-2, 1, 0.0, extra={"diverged": "loss is nan"})
    (row,) = zoology_cells(z)
    assert row["n"] == 2 and row["valid_accuracy_values"] == [0.9, 0.0]  # the newer rerun, not both
    assert row["set_aside"] == 1 and row["diverged"] == 1
    res = get_experiment("calibration").run(tmp_path / "page", zoology=str(z))
    (cell,) = [c for c in res["anchors"][0]["cells"] if tuple(c["_key"]) == (64, 4, 64)]
    assert "1 run(s) at the best rate diverged (scored 0)" in cell["reason"]


def test_calibration_writes_each_verdict_kind(tmp_path):
    z = tmp_path / "zoology"
    for seed in (0, 1):
        zoology_run(z, "attention", 64, 4, 64, 1e-2, seed, 0.97 + 0.02 * seed)  # calibrated: 0.98 vs 1.00
        zoology_run(z, "attention", 128, 8, 64, 1e-2, seed, 0.5)  # below by 0.5
        zoology_run(z, "attention", 64, 8, 64, 1e-2, seed, 0.9)  # not a Fig. 2 setting
        zoology_run(z, "hawk", 64, 4, 64, 1e-2, seed, 0.4)  # context
    zoology_run(z, "attention", 64, 4, 128, 1e-2, 0, 1.0)  # one seed
    out = tmp_path / "page"
    res = get_experiment("calibration").run(out, zoology=str(z))
    data = json.loads((out / "calibration.json").read_text())
    cells = {tuple(c["_key"]): c for c in data["anchors"][0]["cells"]}
    assert cells[(64, 4, 64)]["verdict"] == "calibrated"
    assert cells[(128, 8, 64)]["verdict"] == "not calibrated"
    assert "below the published value by 0.500" in cells[(128, 8, 64)]["reason"]
    assert "fewer samples trained (6,400) than the paper's budget (6,400,000)" in cells[(128, 8, 64)]["reason"]
    assert cells[(64, 4, 128)]["verdict"] == "not calibrated" and "only one seed" in cells[(64, 4, 128)]["reason"]
    assert cells[(64, 8, 64)]["verdict"] == "no published value"
    assert cells[(512, 64, 512)]["verdict"] == "not run"
    text = (out / "calibration.md").read_text()
    assert text.startswith("## Published and measured") and f"--set zoology={z}" in text
    assert "hawk (measured)" in text and "0.400 (0.400–0.400), 2 seeds" in text  # context, no verdict
    assert res["table"].strip() == text.strip()
    assert [c["verdict"] for c in data["anchors"][2]["cells"]] == ["not run"] * 6  # MAD folder not given


def test_reference_runs_curves_are_tabled_per_evaluation(tmp_path):
    z = tmp_path / "zoology"
    curve = {"valid_curve": [[1000, 2.0, 0.25], [2000, 0.5, 0.875]]}
    zoology_run(z, "attention", 64, 4, 64, 1e-2, 0, 0.875, extra=curve)
    zoology_run(z, "attention", 64, 4, 64, 1e-2, 1, 0.5, extra={"valid_curve": [[1000, 2.0, 0.5]]})
    zoology_run(z, "attention", 64, 4, 64, 1e-2, 2, 0.1, steps=10, extra=curve)  # a smaller budget: not counted
    zoology_run(z, "hawk", 64, 4, 64, 1e-2, 0, 0.3, extra=curve)  # context family: no curve
    out = tmp_path / "page"
    get_experiment("calibration").run(out, zoology=str(z))
    text = (out / "calibration.md").read_text()
    assert "| T, pairs, d_model | lr | seed | step 1,000 | step 2,000 |" in text
    assert "| 64, 4, 64 | 0.01 | 0 | 0.250 | 0.875 |" in text
    assert "| 64, 4, 64 | 0.01 | 1 | 0.500 | – |" in text
    curves = json.loads((out / "calibration.json").read_text())["anchors"][0]["curves"]
    assert [(c["model"], c["seed"]) for c in curves] == [("attention", 0), ("attention", 1)]


def test_missing_folders_mean_not_run(tmp_path):
    get_experiment("calibration").run(tmp_path / "page")
    data = json.loads((tmp_path / "page" / "calibration.json").read_text())
    verdicts = {c["verdict"] for a in data["anchors"] if a["anchor"] != "xlstm-mqar" for c in a["cells"]}
    assert verdicts == {"not run"}


def test_mad_scores_over_the_settings_measured(tmp_path):
    m = tmp_path / "mad"
    for seed in (0, 1):
        mad_run(m, "attention", "recall", "baseline", 1e-3, seed, 1.0)
        mad_run(m, "attention", "recall", "train_size=800", 1e-3, seed, 0.6 + 0.2 * seed, train_size=800)
        mad_run(m, "hawk", "recall", "baseline", 1e-3, seed, 0.5)
    rows = {r["model"]: r for r in mad_cells(m)}
    att = rows["attention"]
    assert att["score_mean"] == pytest.approx(0.85) and (att["score_min"], att["score_max"]) == (0.8, 0.9)
    assert att["settings"] == ["baseline", "train_size=800"] and att["train_sizes"]["train_size=800"] == 800
    res = get_experiment("calibration").run(tmp_path / "page", mad=str(m))
    (recall,) = [c for c in res["anchors"][2]["cells"] if c["task"] == "recall"]
    assert recall["verdict"] == "no published value"  # MAD's table was not found (published.py)
    text = (tmp_path / "page" / "calibration.md").read_text()
    assert "| recall | not found | 0.850 (0.800–0.900), 2 seeds | 2 of 11 |" in text


@pytest.mark.parametrize(
    "option, make, match",
    [
        ("zoology", lambda p: p / "nowhere", "zoology=.*no such folder"),
        ("mad", lambda p: p, "mad=.*no runs/"),
        (
            "zoology",
            lambda p: (mad_run(p / "m", "attention", "recall", "baseline", 1e-3, 0, 1.0), p / "m")[1],
            "zoology=.*labels",
        ),
    ],
)
def test_bad_paths_are_refused_before_anything_is_written(tmp_path, option, make, match):
    bad = make(tmp_path)
    with pytest.raises(InputError, match=match):
        get_experiment("calibration").run(tmp_path / "page", **{option: str(bad)})
    assert not (tmp_path / "page").exists()


def test_cli_refuses_a_bad_path_in_one_line(tmp_path, capsys):
    assert main(["experiment", "calibration", "--out", str(tmp_path / "page"), "--set", "mad=nowhere"]) == 2
    err = capsys.readouterr().err.strip()
    assert "mad='nowhere'" in err and len(err.splitlines()) == 1


def test_mad_verdict_against_a_published_score(tmp_path, monkeypatch):
    """MAD's table was not found, so the verdict path is checked with a stand-in published value for recall."""
    import seqzoo.experiments.calibration as calibration
    from seqzoo.experiments.published import Published

    real = calibration.entries
    stand_in = Published("mad", "Transformer", ("recall", "all"), 0.95, "arXiv:0000.00000 (test)", "table")
    monkeypatch.setattr(
        calibration,
        "entries",
        lambda anchor: [stand_in if p.key == stand_in.key and p.model == "Transformer" else p for p in real(anchor)],
    )
    m = tmp_path / "mad"
    for seed in (0, 1):
        mad_run(m, "attention", "recall", "baseline", 1e-3, seed, 0.5)
    cells = get_experiment("calibration").run(tmp_path / "page", mad=str(m))["anchors"][2]["cells"]
    (recall,) = [c for c in cells if c["task"] == "recall"]
    assert recall["verdict"] == "not calibrated"
    assert "below the published value by 0.450" in recall["reason"]
    assert "fewer samples trained (6,400) than the paper's budget (2,560,000)" in recall["reason"]  # 200 × 12,800
    assert "scored over 1 of the task's 11 settings" in recall["reason"]
