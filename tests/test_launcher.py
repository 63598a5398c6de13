"""The launcher of experiments declared as data (``experiments/launcher.py``): a tiny declared grid runs, is skipped
when done, resumes a cut run, writes its tables, figure and report, and refuses bad options before writing."""

import json

import pytest

from seqzoo.errors import InputError
from seqzoo.experiments.launcher import Axis, CurvePlot, GridExperiment, Settings, build_specs, run_grid
from seqzoo.sweep import resolve_options

TASK = {"name": "mqar", "vocab_size": 16, "num_pairs": 2, "seq_len": 16}


def _settings(opts):
    train = {"steps": opts["steps"], "batch_size": 4, "lr": 3e-3, "eval_every": opts["steps"], "eval_samples": 8}
    widths = {d: {"model": {"preset": "attention-tiny", "d_model": d}} for d in (8, 16)}
    return Settings(base={"task": TASK, "train": train}, points={"d_model": widths}, info={"task": TASK})


TINY = GridExperiment(
    name="tiny-widths",
    description="attention at two widths on MQAR",
    options={"widths": "8,16", "seeds": "0,1", "steps": 2, "procs": 1},
    axes=(Axis("d_model", "widths", int, (8, 16)), Axis("seed", "seeds", int)),
    settings=_settings,
    columns=(
        ("d_model", "labels.d_model"),
        ("seed", "labels.seed"),
        ("steps", "config.train.steps"),
        ("valid_accuracy", "metrics.valid_accuracy"),
        ("run", "key"),
    ),
    summary=("valid_accuracy",),
    plots=(CurvePlot("curves.png", "valid_curve", 0, 2, "step", "accuracy", "{steps} steps", "d={d_model} s{seed}"),),
)


def _done(out):
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*/done.json")}


def test_the_grid_is_the_product_of_its_axes_over_the_base_settings():
    specs, _ = build_specs(TINY, resolve_options(TINY.options, {}, TINY.name))
    assert [s.labels for s in specs] == [{"d_model": d, "seed": s} for d in (8, 16) for s in (0, 1)]
    assert all(s.seed == s.labels["seed"] and s.train["steps"] == 2 and s.task == TASK for s in specs)
    assert [s.model["d_model"] for s in specs] == [8, 8, 16, 16]
    assert len({s.key("v") for s in specs}) == 4


def test_a_declared_experiment_runs_skips_what_is_done_resumes_a_cut_run_and_reports(tmp_path):
    out = tmp_path / "tiny"
    res = run_grid(TINY, out, {"seeds": "0"})
    rows = res["rows"]
    assert [(r["d_model"], r["seed"], r["steps"]) for r in rows] == [(8, 0, 2), (16, 0, 2)]
    assert all(0 <= r["valid_accuracy"] <= 1 for r in rows)
    for name in ("results.csv", "results.json", "summary.csv", "config.json", "report.md", "curves.png"):
        assert (out / name).is_file(), name
    report = (out / "report.md").read_text()
    assert "tiny-widths" in report and "Mean (min–max) over seeds" in report and "curves.png" in report
    assert json.loads((out / "config.json").read_text())["options"]["seeds"] == "0"
    first = _done(out)
    assert set(first) == {r["run"] for r in rows}

    assert run_grid(TINY, out, {"seeds": "0"})["rows"] == rows  # nothing trains again
    assert _done(out) == first

    cut = rows[0]["run"]  # a run cut before it finished: no done.json, its checkpoint is there
    (out / "runs" / cut / "done.json").unlink()
    again = run_grid(TINY, out, {"seeds": "0"})
    assert set(_done(out)) == set(first) and _done(out)[rows[1]["run"]] == first[rows[1]["run"]]
    done = json.loads((out / "runs" / cut / "done.json").read_text())
    assert done["metrics"]["resumed_from_step"] == 2  # resumed from its last checkpoint, not from step 0
    assert again["rows"][0]["valid_accuracy"] == rows[0]["valid_accuracy"]


@pytest.mark.parametrize(
    "given, words", [({"stepz": 3}, "stepz"), ({"steps": "abc"}, "steps"), ({"widths": "8,9"}, "9")]
)
def test_bad_options_are_refused_by_name_before_anything_is_written(tmp_path, given, words):
    with pytest.raises(InputError, match=words):
        run_grid(TINY, tmp_path / "out", given)
    assert not (tmp_path / "out").exists()
