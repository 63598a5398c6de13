"""tools/zoo_accuracy_curves.py (the command behind docs/figures/zoo-rmt-mqar-6k.png) on run folders written by the
sweep runner itself: one row and one line per finished run of the probe, other probes and unfinished runs left out,
bad input refused before anything is written."""

import os
import subprocess
import sys

from conftest import REPO

from seqzoo.sweep import RunSpec, run_sweep

TOOL = REPO / "tools" / "zoo_accuracy_curves.py"


def fake_run(config, run_dir):
    """A stand-in for a training run: the metrics a finished zoo run records, with a known validation curve."""
    return {"valid_curve": [[step, 1.0, config["acc"] * step / 500] for step in (250, 500)]}


def make_sweep(out):
    specs = [
        RunSpec.of(
            "test_zoo_accuracy_curves:fake_run", {"acc": acc}, {"probe": probe, "setting": "-", "model": m, "seed": s}
        )
        for probe, m, s, acc in [
            ("rmt_mqar", "attention", 0, 1.0),
            ("rmt_mqar", "rmt", 0, 0.4),
            ("rmt_mqar", "rmt", 1, 0.9),
            ("mqar", "attention", 0, 0.5),
        ]
    ]
    run_sweep(specs, out, code="test", log=lambda *_: None)
    unfinished = out / "runs" / "unfinished"  # a run still training: config.json but no done.json
    unfinished.mkdir()
    (unfinished / "config.json").write_text('{"labels": {"probe": "rmt_mqar", "model": "rmt", "seed": 2}}')


def tool(*args):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(TOOL), *map(str, args)], capture_output=True, text=True, env=env)


def test_draws_one_line_per_finished_run_of_the_probe(tmp_path):
    make_sweep(tmp_path / "zoo")
    png = tmp_path / "fig" / "curves.png"
    res = tool(tmp_path / "zoo", "--probe", "rmt_mqar", "--png", png, "--title", "rmt_mqar, 2 evaluations")
    assert res.returncode == 0, res.stderr
    rows = [line for line in res.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows == ["| attention | 0 | 2 | 500 | 1.0 |", "| rmt | 0 | 2 | 500 | 0.4 |", "| rmt | 1 | 2 | 500 | 0.9 |"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_refuses_bad_input_before_writing(tmp_path):
    make_sweep(tmp_path / "zoo")
    png = tmp_path / "curves.png"
    for args, arg in [
        ((tmp_path / "zoo", "--probe", "orchid_recall", "--png", png), "--probe"),
        ((tmp_path / "nowhere", "--probe", "rmt_mqar", "--png", png), "OUT"),
        ((tmp_path / "zoo", "--probe", "rmt_mqar", "--png", tmp_path / "curves.svg"), "--png"),
    ]:
        res = tool(*args)
        assert res.returncode == 2 and res.stderr.startswith(f"error: {arg}"), res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    assert not png.exists()
