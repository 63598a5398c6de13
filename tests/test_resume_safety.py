"""A run folder resumes only the run that wrote it; anything else is refused before a file is touched.

The finding: 8 steps on ``mqar num_pairs=2``, then ``--steps 3 --task-arg num_pairs=4 --lr 1`` into the same
``--out`` trained 0 steps, reported ``train_loss: NaN``, rewrote ``task.json`` and set the step back to 3.
"""

import hashlib
import json

from seqzoo.cli import main

BASE = ["train", "--model", "attention-tiny", "--task", "mqar", "--task-arg", "seq_len=16", "--no-progress"]


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _train(out, *extra):
    return main([*BASE, "--out", str(out), *extra])


def test_another_run_is_refused_naming_the_fields_and_nothing_changes(tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(out, "--task-arg", "num_pairs=2", "--steps", "8") == 0
    before = _digest(out)
    capsys.readouterr()
    assert _train(out, "--task-arg", "num_pairs=4", "--steps", "3", "--lr", "1") == 2
    err = capsys.readouterr().err
    assert "task.num_pairs: 2 -> 4" in err and "train_config.lr" in err and "--overwrite" in err
    assert _digest(out) == before


def test_fewer_steps_than_trained_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(out, "--task-arg", "num_pairs=2", "--steps", "8") == 0
    before = _digest(out)
    assert _train(out, "--task-arg", "num_pairs=2", "--steps", "3") == 2
    assert "fewer than the 8 steps" in capsys.readouterr().err
    assert _digest(out) == before


def test_more_steps_extends_and_overwrite_starts_fresh(tmp_path):
    out = tmp_path / "run"
    assert _train(out, "--task-arg", "num_pairs=2", "--steps", "4", "--eval-every", "2") == 0
    assert _train(out, "--task-arg", "num_pairs=2", "--steps", "6", "--eval-every", "2") == 0
    final = json.loads((out / "final.json").read_text())
    assert final["step"] == 6 and final["train_loss"] == final["train_loss"]  # finite, not NaN
    assert _train(out, "--task-arg", "num_pairs=4", "--steps", "2", "--overwrite") == 0
    assert json.loads((out / "task.json").read_text())["num_pairs"] == 4
    assert json.loads((out / "final.json").read_text())["step"] == 2
