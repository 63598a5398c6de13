"""``griffin-copying`` and ``xlstm-formal``: tiny runs through the sweep write results.{json,csv,md}, one figure
per task and the verdicts; the table has one row per task × model × evaluation length; an unchanged rerun trains
nothing; the verdicts follow the numbers (non-overlapping seed ranges only); bad options are refused by name."""

import csv
import json

import pytest

from seqzoo.errors import InputError
from seqzoo.experiments import get_experiment
from seqzoo.experiments.griffin_copying import STUDY as COPYING
from seqzoo.experiments.length_gen import build, options, verdicts
from seqzoo.experiments.xlstm_formal import STUDY as FORMAL
from seqzoo.sweep import resolve_options

TINY = {"d_model": 16, "n_layers": 2, "steps": 2, "batch_size": 4, "samples": 8, "procs": 1, "progress": False}


def _done(out):
    """run key -> mtime of done.json (rewritten only when the run trains again)."""
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "runs").glob("*/done.json")}


@pytest.mark.parametrize(
    "name, kw, tasks, models, factors",
    [
        ("griffin-copying", {"seeds": "0"}, COPYING.tasks, COPYING.models, [1, 4, 8, 16]),
        ("xlstm-formal", {"seeds": "0,1"}, FORMAL.default_tasks, FORMAL.models, [1, 2, 4]),
    ],
)
def test_tiny_run_writes_the_table_and_a_rerun_trains_nothing(tmp_path, name, kw, tasks, models, factors):
    out = tmp_path / name
    res = get_experiment(name).run(out, **TINY, **kw)
    n_seeds = len(kw["seeds"].split(","))
    assert res["errors"] == 0 and res["ran"] == res["runs"] == len(tasks) * len(models) * n_seeds
    rows = json.loads((out / "results.json").read_text())
    assert len(rows) == len(tasks) * len(models) * len(factors)  # task × model × evaluation length
    assert {(r["task"], r["model"], r["x"]) for r in rows} == {
        (t, m, f) for t in tasks for m in models for f in factors
    }
    for r in rows:
        assert r["n"] == n_seeds and r["accuracy_min"] <= r["accuracy_mean"] <= r["accuracy_max"] <= 1
        assert r["eval_len"] == r["x"] * (32 if name == "griffin-copying" else 16) and r["params_mean"] > 0
    with open(out / "results.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    assert (out / "results.md").read_text().count("\n") == len(rows) + 2
    for t in tasks:
        assert (out / "figures" / f"{t}_accuracy.png").stat().st_size > 0
        assert f"{t}: accuracy, mean (min–max over seeds)" in (out / "report.md").read_text()
    assert json.loads((out / "verdicts.json").read_text()) == res["verdicts"] and res["verdicts"]
    first = _done(out)
    again = get_experiment(name).run(out, **TINY, **kw)
    assert again["ran"] == 0 and _done(out) == first  # the sweep skipped every finished run


def _rows(a, b, n=2):
    """Aggregated rows (merge.aggregate's columns) of models a and b on one task at 1x and 4x."""
    out = []
    for model, (lo, hi) in (("attention", a), ("hawk", b)):
        for x in (1, 4):
            lo1, hi1 = (0.99, 1.0) if x == 1 else (lo, hi)
            out.append(
                {"task": "t", "model": model, "x": x, "n": n}
                | {"accuracy_min": lo1, "accuracy_max": hi1, "accuracy_mean": (lo1 + hi1) / 2}
            )
    return out


@pytest.mark.parametrize(
    "a, b, n, answer",
    [
        ((0.9, 0.95), (0.3, 0.5), 2, "yes"),  # attention's worst seed above hawk's best
        ((0.45, 0.95), (0.3, 0.5), 2, "no"),  # the ranges overlap
        ((0.9, 0.95), (0.3, 0.5), 1, "not measured (one seed: no spread)"),
    ],
)
def test_verdicts_follow_the_seed_ranges(a, b, n, answer):
    settings = {"tasks": ["t"], "models": ["attention", "hawk"], "factors": [1, 4]}
    found = verdicts(COPYING, _rows(a, b, n), settings)
    hawk_below = next(v for v in found if v["claim"] == "hawk below attention at 4x beyond the seed spread")
    assert hawk_below["answer"] == answer
    assert next(v for v in found if v["claim"].startswith("attention learns"))["answer"] == "yes"
    held = next(v for v in found if v["claim"] == "worst seed >= 0.95 at 4x")["answer"]
    assert held == "attention no, hawk no"


def test_tasks_are_rebuilt_at_16x_and_runs_match_the_default_budget():
    opts = resolve_options(options(COPYING), {}, "griffin-copying")
    specs, settings = build(COPYING, opts)
    assert len(specs) == 2 * 3 * 2  # tasks × models × seeds 0, 1
    for s in specs:
        assert s.config["eval"]["task_lengths"] == [32, 128, 256, 512]
        assert s.config["train"]["steps"] == 1500 and s.config["train"]["batch_size"] == 64


@pytest.mark.parametrize(
    "kw, what",
    [
        ({"models": "attention,nope"}, "models"),
        ({"models": "rmt"}, "models"),  # not a causal LM on these tasks
        ({"tasks": "mqar"}, "tasks"),
        ({"lengths": "0,2"}, "lengths"),
        ({"seeds": "a"}, "seeds"),
        ({"steps": 0}, "steps"),
        ({"stepz": 3}, "stepz"),
    ],
)
def test_bad_options_are_refused_by_name(tmp_path, kw, what):
    with pytest.raises(InputError, match=what):
        get_experiment("xlstm-formal").run(tmp_path, **{**TINY, **kw})
    assert not (tmp_path / "runs").exists()
