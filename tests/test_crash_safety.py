"""A run survives being killed inside a checkpoint save, and a diverging loss stops cleanly.

* Crash safety: training is killed (``os._exit``, no cleanup, like SIGKILL) after the new checkpoint's bytes are
  written and before the rename that publishes them. The previous checkpoint must still load, and resuming from it
  must give exactly the metrics of a run that was never interrupted.
* Divergence: a NaN loss stops training with an error naming the step; the last good checkpoint stays, and no
  non-finite number is written as a result.
"""

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import seqzoo.train.loop as loop
from seqzoo.cli import main
from seqzoo.errors import TrainingDivergedError

BASE = ["train", "--model", "attention-tiny", "--task", "mqar", "--task-arg", "seq_len=16", "--task-arg", "num_pairs=2"]
BASE += ["--no-progress"]
RUN = [*BASE, "--steps", "6", "--ckpt-every", "2", "--eval-every", "3", "--seed", "3"]

# Runs RUN in a fresh process whose second checkpoint save dies between torch.save and os.replace.
KILL_IN_SECOND_SAVE = textwrap.dedent(
    """
    import os, sys
    import seqzoo.train.checkpoint as ckpt
    calls = []
    def replace_then_die(src, dst):
        calls.append(src)
        if len(calls) == 2:  # the temporary of save 2 is complete on disk; the rename never happens
            assert os.path.getsize(src) > 0
            os._exit(137)
        os.replace(src, dst)
    ckpt.os = type("os_with_dying_replace", (), {"replace": staticmethod(replace_then_die), "getpid": os.getpid})
    from seqzoo.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def _final(out):
    record = json.loads((out / "final.json").read_text())
    return {k: v for k, v in record.items() if k != "time_s"}


def test_killed_between_write_and_rename_resumes_exactly(tmp_path):
    # every run of this test on one thread, as the killed subprocess is: with two threads some reductions sum in
    # another order, and the in-process runs would match the killed one only when an earlier test had left torch
    # on one thread
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _killed_run_resumes_exactly(tmp_path)
    finally:
        torch.set_num_threads(threads)


def _killed_run_resumes_exactly(tmp_path):
    reference = tmp_path / "uninterrupted"
    assert main([*RUN, "--out", str(reference)]) == 0

    out = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", KILL_IN_SECOND_SAVE, *RUN, "--out", str(out)], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 137, proc.stderr
    assert not (out / "final.json").exists()
    leftovers = list(out.glob("checkpoint.tmp*"))
    assert leftovers, "the killed save should have left its temporary behind"
    state = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert state["step"] == 2  # the first save, whole; the second (step 4) never replaced it

    assert main([*RUN, "--out", str(out)]) == 0  # resumes from step 2
    assert not list(out.glob("checkpoint.tmp*"))  # the stale temporary was removed
    assert _final(out) == _final(reference)
    train_losses = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    ref_losses = [json.loads(line) for line in (reference / "metrics.jsonl").read_text().splitlines()]
    strip = [{k: v for k, v in r.items() if k != "time_s"} for r in train_losses if r["step"] > 2]
    assert strip == [{k: v for k, v in r.items() if k != "time_s"} for r in ref_losses if r["step"] > 2]


def test_nan_loss_stops_naming_the_step_and_keeps_the_last_checkpoint(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    real_forward = loop.scored_forward
    calls = {"n": 0}

    def nan_from_step_5(model, x, y, *args):
        calls["n"] += 1
        logits, y = real_forward(model, x, y, *args)
        return (logits * float("nan") if calls["n"] >= 5 else logits), y

    monkeypatch.setattr(loop, "scored_forward", nan_from_step_5)
    assert main([*RUN, "--out", str(out)]) == 3
    err = capsys.readouterr().err
    assert "training diverged" in err and "at step 5" in err and "Traceback" not in err
    assert torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)["step"] == 4
    assert not (out / "final.json").exists()
    for line in (out / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["step"] <= 4 and math.isfinite(record["loss"])

    monkeypatch.setattr(loop, "scored_forward", real_forward)  # the good checkpoint resumes and finishes
    assert main([*RUN, "--out", str(out)]) == 0
    assert _final(out)["step"] == 6 and math.isfinite(_final(out)["train_loss"])


def test_diverged_error_is_a_floating_point_error_raised_by_train(tmp_path, monkeypatch):
    real_forward = loop.scored_forward

    def inf_logits(model, x, y, *args):
        logits, y = real_forward(model, x, y, *args)
        return logits * float("inf"), y

    monkeypatch.setattr(loop, "scored_forward", inf_logits)
    from seqzoo import build_model
    from seqzoo.tasks import build_task

    task = build_task("mqar", seq_len=16, num_pairs=2)
    model = build_model("attention-tiny", vocab_size=task.vocab_size)
    with pytest.raises(FloatingPointError, match="at step 1"):
        loop.train(model, task, steps=3, batch_size=4, progress=False)
    assert issubclass(TrainingDivergedError, FloatingPointError)
