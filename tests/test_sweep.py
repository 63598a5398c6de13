"""The sweep runner: hash naming, skip / resume, seed merge, parallel processes, strict options, the report."""

import copy
import json
import subprocess
import sys

import pytest

from seqzoo.errors import InputError
from seqzoo.sweep import (
    Report,
    RunSpec,
    aggregate,
    data_digest,
    plot_series,
    resolve_options,
    run_sweep,
    separations,
)
from seqzoo.sweep.train_run import build

FN = "seqzoo.sweep.train_run:train_run"


def tiny_config(seed=0, steps=3, num_pairs=2):
    return {
        "seed": seed,
        "model": {
            "type": "lm",
            "config": {"vocab_size": 16, "d_model": 16, "n_layers": 1, "pattern": ["attention"], "mlp_ratio": 2.0},
        },
        "task": {"name": "mqar", "vocab_size": 16, "num_pairs": num_pairs, "seq_len": 16},
        "train": {"steps": steps, "batch_size": 8, "lr": 3e-3, "warmup_steps": 1, "eval_every": 0, "eval_samples": 16},
    }


def spec(**kw):
    cfg = tiny_config(**kw)
    return RunSpec.of(FN, cfg, {"model": "attention", "num_pairs": cfg["task"]["num_pairs"], "seed": cfg["seed"]})


def _leaves(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _leaves(v, (*prefix, k))
        else:
            yield (*prefix, k), v


def test_same_config_same_key_and_every_field_changes_it():
    a, b = spec(), spec()
    assert a.key() == b.key() and len(a.key()) == 12
    keys = {a.key()}
    for path, value in _leaves(a.config):
        cfg = copy.deepcopy(a.config)
        node = cfg
        for p in path[:-1]:
            node = node[p]
        node[path[-1]] = (
            value + 1 if isinstance(value, (int, float)) else [*value, "x"] if isinstance(value, list) else f"{value}x"
        )
        keys.add(RunSpec.of(FN, cfg).key())
    assert len(keys) == 1 + len(list(_leaves(a.config)))  # every changed field gave a new, distinct key
    assert RunSpec.of(FN, a.config).key(code="0.1.0+aaaa") != RunSpec.of(FN, a.config).key(code="0.1.0+bbbb")
    assert RunSpec.of("other.module:fn", a.config).key(code="v") != a.key(code="v")
    assert RunSpec.of(FN, a.config, {"model": "renamed"}).key() == a.key()  # labels are display only


def test_rerun_unchanged_trains_nothing_and_a_changed_setting_trains_only_that_run(tmp_path):
    specs = [spec(seed=0), spec(seed=1)]
    first = run_sweep(specs, tmp_path, log=lambda *_: None)
    assert [r["status"] for r in first] == ["ran", "ran"]
    files = [tmp_path / "runs" / r["key"] / n for r in first for n in ("done.json", "train/metrics.jsonl")]
    stamps = [f.stat().st_mtime_ns for f in files]
    second = run_sweep(specs, tmp_path, log=lambda *_: None)
    assert [r["status"] for r in second] == ["skipped", "skipped"]
    assert [f.stat().st_mtime_ns for f in files] == stamps  # nothing rewritten, nothing retrained
    assert [r["metrics"] for r in second] == [r["metrics"] for r in first]
    third = run_sweep([spec(seed=0), spec(seed=1, steps=4)], tmp_path, log=lambda *_: None)
    assert [r["status"] for r in third] == ["skipped", "ran"]
    assert third[1]["key"] != first[1]["key"] and third[1]["metrics"]["curve"][-1][0] == 4
    saved = json.loads((tmp_path / "runs" / third[1]["key"] / "config.json").read_text())
    assert saved["config"] == spec(seed=1, steps=4).config and saved["code_version"].startswith("0.")


def test_a_cut_run_resumes_from_its_checkpoint_with_the_same_numbers(tmp_path):
    from seqzoo.train import TrainConfig, train

    s = spec(steps=6)
    fresh = run_sweep([s], tmp_path / "fresh", log=lambda *_: None)[0]
    run_dir = tmp_path / "cut" / "runs" / s.key()
    model, task = build(s.config)  # what the runner would do, stopped after 3 of 6 steps
    train(
        model,
        task,
        TrainConfig(
            **{**s.config["train"], "seed": 0, "progress": False}, out_dir=str(run_dir / "train"), stop_after=3
        ),
    )
    assert not (run_dir / "done.json").exists()
    resumed = run_sweep([s], tmp_path / "cut", log=lambda *_: None)[0]
    assert resumed["status"] == "ran" and resumed["metrics"]["resumed_from_step"] == 3
    assert resumed["metrics"]["valid_loss"] == fresh["metrics"]["valid_loss"]
    assert resumed["metrics"]["train_loss"] == fresh["metrics"]["train_loss"]


# Runs one sweep spec (argv: spec JSON, out dir) in a fresh process that dies (os._exit, like SIGKILL) in its third
# checkpoint save, before writing it: what a run left behind at the end of a session looks like.
KILLED_IN_THIRD_SAVE = """
import json, os, sys
import seqzoo.train.loop as loop
from seqzoo.sweep import RunSpec, run_sweep
real, calls = loop.save_checkpoint, []
def save_then_die(*args, **kwargs):
    calls.append(1)
    if len(calls) == 3:
        os._exit(137)
    real(*args, **kwargs)
loop.save_checkpoint = save_then_die
fn, config, labels = json.loads(sys.argv[1])
run_sweep([RunSpec.of(fn, config, labels)], sys.argv[2], log=lambda *_: None)
"""


def test_a_killed_run_without_a_checkpoint_interval_resumes_from_the_default_one(tmp_path):
    from seqzoo.sweep.train_run import default_ckpt_every

    s = spec(steps=40)  # the config names no ckpt_every: the sweep saves every 40 // 20 = 2 steps
    assert "ckpt_every" not in s.config["train"] and default_ckpt_every(40) == 2
    fresh = run_sweep([s], tmp_path / "fresh", log=lambda *_: None)[0]
    argv = [json.dumps([s.fn, s.config, s.labels]), str(tmp_path / "cut")]
    proc = subprocess.run([sys.executable, "-c", KILLED_IN_THIRD_SAVE, *argv], capture_output=True, text=True)
    assert proc.returncode == 137, proc.stderr
    assert not (tmp_path / "cut" / "runs" / s.key() / "done.json").exists()
    resumed = run_sweep([s], tmp_path / "cut", log=lambda *_: None)[0]
    assert resumed["status"] == "ran" and resumed["metrics"]["resumed_from_step"] == 4  # saves at 2 and 4 made it
    for name in ("valid_loss", "valid_accuracy", "train_loss", "curve"):
        assert resumed["metrics"][name] == fresh["metrics"][name], name


def test_a_failing_run_is_recorded_and_retried(tmp_path):
    bad = tiny_config()
    bad["task"]["num_pairs"] = 100  # more pairs than fit in seq_len: the task refuses it
    recs = run_sweep([RunSpec.of(FN, bad, {"model": "x"})], tmp_path, log=lambda *_: None)
    assert recs[0]["status"] == "error" and not (tmp_path / "runs" / recs[0]["key"] / "done.json").exists()
    assert (tmp_path / "runs" / recs[0]["key"] / "error.txt").is_file()


def test_two_processes_give_the_numbers_of_one(tmp_path):
    specs = [spec(seed=0), spec(seed=1, num_pairs=3)]
    par = run_sweep(specs, tmp_path / "p2", procs=2, log=lambda *_: None)
    one = run_sweep(specs, tmp_path / "p1", procs=1, log=lambda *_: None)
    assert [r["status"] for r in par] == ["ran", "ran"]
    for a, b in zip(par, one):
        assert a["key"] == b["key"]
        assert a["metrics"]["valid_loss"] == b["metrics"]["valid_loss"]
        assert a["metrics"]["curve"] == b["metrics"]["curve"]
    with pytest.raises(InputError, match="procs"):
        run_sweep(specs, tmp_path / "p0", procs=0)


def _rec(model, seed, acc, status="ran"):
    return {"labels": {"model": model, "probe": "p", "seed": seed}, "status": status, "metrics": {"acc": acc}}


def test_one_configuration_in_two_groups_runs_once_and_counts_once_in_each(tmp_path):
    """The zoo's rmt_mqar reference is the MQAR probe's attention run: one run, reported under both probes
    (it was reported once, under the first probe's labels, merged there as two seeds of identical numbers)."""
    cfg = tiny_config(seed=0, steps=2)
    specs = [
        RunSpec.of(FN, cfg, {"probe": "a", "seed": 0}),
        RunSpec.of(FN, copy.deepcopy(cfg), {"probe": "b", "seed": 0}),
    ]
    records = run_sweep(specs, tmp_path, log=lambda *_: None)
    assert records[0]["key"] == records[1]["key"] and len(list((tmp_path / "runs").iterdir())) == 1
    assert [r["labels"]["probe"] for r in records] == ["a", "b"]
    rows = {r["probe"]: r for r in aggregate(records, ["valid_accuracy"])}
    assert rows["a"]["n"] == 1 and rows["b"]["n"] == 1


def test_merge_of_seeds():
    recs = [_rec("a", 0, 0.9), _rec("a", 1, 0.7), _rec("a", 2, 0.8), _rec("b", 0, 0.5), _rec("b", 1, None, "error")]
    rows = {r["model"]: r for r in aggregate(recs, ["acc"])}
    assert rows["a"]["n"] == 3 and rows["a"]["acc_mean"] == pytest.approx(0.8)
    assert (rows["a"]["acc_min"], rows["a"]["acc_max"]) == (0.7, 0.9)
    assert rows["b"]["n"] == 1 and rows["b"]["errors"] == 1 and rows["b"]["acc_mean"] == 0.5
    assert "seed" not in rows["a"]
    sep = separations(list(rows.values()), "acc", by="model", within=["probe"])
    assert [(s["better"], s["worse"], s["n1"]) for s in sep] == [("a", "b", True)]
    close = aggregate([_rec("a", 0, 0.9), _rec("a", 1, 0.4), _rec("b", 0, 0.5), _rec("b", 1, 0.6)], ["acc"])
    assert separations(close, "acc", by="model", within=["probe"]) == []  # spreads overlap: no claim


def test_unknown_option_refused_by_name():
    defaults = {"steps": 10, "lr": 1e-3, "models": "a,b", "flag": False}
    got = resolve_options(defaults, {"steps": "12", "flag": "true"}, "exp")
    assert got == {"steps": 12, "lr": 1e-3, "models": "a,b", "flag": True}
    with pytest.raises(InputError, match="stepz"):
        resolve_options(defaults, {"stepz": 3}, "exp")
    with pytest.raises(InputError, match="steps"):
        resolve_options(defaults, {"steps": "many"}, "exp")
    with pytest.raises(InputError, match="flag"):
        resolve_options(defaults, {"flag": "ture"}, "exp")  # a typo is not silently false


@pytest.mark.parametrize(
    "name, option",
    [
        ("orchid-ar", "collect_only"),
        ("orchid-ar", "param_groups"),
        ("orchid-bench", "backward"),
        ("xlstm-slstm-bench", "compiled"),
    ],
)
def test_experiment_switches_refuse_words_that_are_not_bools(tmp_path, name, option):
    """The experiments that take their switches as ``--set`` strings parse them with ``as_bool``: a misspelt
    switch is an error naming it, raised before the output folder is made."""
    from seqzoo.experiments import get_experiment

    with pytest.raises(InputError, match=option):
        get_experiment(name).run(tmp_path / "out", **{option: "ture"})
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "name, bad", [("kernels-bench", "bogus"), ("griffin-decode", "stepz"), ("zoo", "mixerz"), ("xlstm-mqar", "threads")]
)
def test_every_experiment_refuses_unknown_options_by_name(tmp_path, name, bad):
    """Also the ones that forward ``**options`` to a benchmark: checked against its parameters before it runs."""
    from seqzoo.experiments import get_experiment

    with pytest.raises(InputError, match=bad):
        get_experiment(name).run(tmp_path / "out", **{bad: 1})
    assert not (tmp_path / "out").exists()  # refused before anything ran
    assert get_experiment("kernels").name == "kernels-bench"  # the old name is an alias


def test_report_md_and_self_contained_html(tmp_path):
    png = plot_series(
        tmp_path / "fig.png", {"a": ([1, 2], [0.1, 0.2]), "a spread": ([1, 2], [0.0, 0.1], [0.2, 0.3])}, "x", "y"
    )
    rep = Report("t")
    rep.heading("Summary")
    rep.table([{"model": "a", "acc": 0.5}], ["model", "acc"])
    rep.figure(png, "a figure")
    md, page = rep.write(tmp_path)
    assert "![a figure](fig.png)" in md.read_text() and "| a | 0.5 |" in md.read_text()
    text = page.read_text()
    assert text.count("src='data:image/png;base64,") == 1 and "fig.png" not in text


def test_collect_only_trains_and_writes_nothing_and_reports_the_unfinished_runs_as_missing(tmp_path):
    done = run_sweep([spec(seed=0)], tmp_path, log=lambda *_: None)
    assert done[0]["status"] == "ran"
    before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    recs = run_sweep([spec(seed=0), spec(seed=1)], tmp_path, log=lambda *_: None, train=False)
    assert [r["status"] for r in recs] == ["skipped", "missing"]
    assert recs[0]["metrics"] == done[0]["metrics"] and "metrics" not in recs[1]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == before  # no folder for the missing run
    fresh = tmp_path / "never_trained"
    assert [r["status"] for r in run_sweep([spec(seed=0)], fresh, log=lambda *_: None, train=False)] == ["missing"]
    assert not fresh.exists()  # not even the runs folder


def test_zoo_collect_only_reports_what_finished_and_lists_the_rest(tmp_path):
    from seqzoo.experiments.zoo import run_zoo

    tiny = dict(d_model=16, n_layers=1, steps=2, batch_size=4, progress=False, probes="parity", seeds="0")
    run_zoo(tmp_path, models="attention", **tiny)
    n_runs = len(list((tmp_path / "runs").iterdir()))
    res = run_zoo(tmp_path, models="attention,hawk", collect_only=True, **tiny)
    assert res["missing"] == 1 and len(list((tmp_path / "runs").iterdir())) == n_runs
    assert [(r["model"], r["seeds"]) for r in res["summary"]] == [("attention", 1)]  # the missing run counts nowhere
    md = (tmp_path / "report.md").read_text()
    assert "## Not trained yet" in md and "probe=parity setting=- model=hawk seed=0" in md


def test_a_runs_key_follows_the_content_of_the_files_its_task_reads(tmp_path):
    """Same path, edited corpus: a new key; the old text again: the old key; a task without files: unaffected."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("to be or not to be " * 50)
    text = RunSpec.of(FN, {"seed": 0, "task": {"name": "text", "path": str(corpus), "seq_len": 8}})
    recall = spec(seed=0)
    before = (text.key("v"), recall.key("v"))
    (corpus / "a.txt").write_text("that is the question " * 50)
    assert text.key("v") != before[0] and recall.key("v") == before[1]
    (corpus / "a.txt").write_text("to be or not to be " * 50)
    assert text.key("v") == before[0]
    (corpus / "b.txt").write_text("a second book")  # a file added to the folder is read too
    assert text.key("v") != before[0]
    assert data_digest({"name": "mqar", "num_pairs": 2}) is None


def test_parallel_workers_leave_no_leaked_semaphore(tmp_path):
    """Workers exit on their own (close + join): with the pool's terminate() the workers were killed before their
    finalisers ran, and the interpreter's resource tracker warned of a leaked semaphore at the end of a parallel
    sweep (seen on every ``seqzoo zoo`` and on this tiny Orchid sweep)."""
    sets = ["vocab_sizes=10", "lengths=16", "models=orchid", "seeds=0,1", "steps=4", "eval_every=4"]
    sets += ["eval_samples=8", "procs=2"]
    cmd = [sys.executable, "-m", "seqzoo", "experiment", "orchid-ar", "--out", str(tmp_path)]
    res = subprocess.run([*cmd, *(a for s in sets for a in ("--set", s))], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "leaked semaphore" not in res.stderr, res.stderr[-2000:]
