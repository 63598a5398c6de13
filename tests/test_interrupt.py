"""Ctrl-C in training: the last whole step is saved, the message says how to resume, a rerun resumes from that step
and ends with the numbers of an uninterrupted run (issue #42, part A).

Before, an interrupted ``seqzoo train`` with default settings (no ``--ckpt-every``) printed a KeyboardInterrupt
traceback and kept no checkpoint, so a rerun silently started from step 0.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import seqzoo.train.checkpoint as checkpoint_module
import seqzoo.train.loop as loop
from seqzoo import LanguageModel, ModelConfig
from seqzoo.errors import TrainingInterrupted
from seqzoo.tasks import build_task
from seqzoo.train import TrainConfig, train
from seqzoo.train.interrupt import StopRequest

TASK = {"vocab_size": 16, "num_pairs": 2, "seq_len": 16}
REPO = Path(__file__).resolve().parents[1]


def small_model(seed=0):
    torch.manual_seed(seed)
    config = ModelConfig(vocab_size=16, d_model=32, n_layers=2, dropout=0.1, mixer_kwargs={"attention": {"n_heads": 2}})
    return LanguageModel(config)


def cfg(out, **kw):
    base = dict(steps=12, batch_size=16, lr=3e-3, warmup_steps=2, eval_every=4, eval_samples=32, log_every=1)
    return TrainConfig(**{**base, "out_dir": str(out), "progress": False, **kw})


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def untimed(out: Path) -> list[dict]:
    """The metrics lines without their wall-clock times."""
    return [{k: v for k, v in r.items() if k != "time_s"} for r in lines(out / "metrics.jsonl")]


def ckpt_step(out: Path) -> int:
    return int(torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)["step"])


def sigint_at_step(monkeypatch, at: int, signum: int = signal.SIGINT) -> None:
    """``signum`` to this process while the batch of step ``at`` (0-based) is built: in the middle of that step."""
    real = loop.BatchSource.global_batch

    def global_batch(self, step):
        if step == at:
            os.kill(os.getpid(), signum)
        return real(self, step)

    monkeypatch.setattr(loop.BatchSource, "global_batch", global_batch)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_finishes_the_step_saves_it_and_the_rerun_matches_a_whole_run(tmp_path, monkeypatch, capsys, signum):
    task = build_task("mqar", **TASK)
    train(small_model(), task, cfg(tmp_path / "whole"))
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    sigint_at_step(monkeypatch, 5, signum)
    with pytest.raises(TrainingInterrupted) as e:
        train(small_model(), task, cfg(tmp_path / "cut"))
    assert e.value.step == 6 and ckpt_step(tmp_path / "cut") == 6  # step 5 (0-based) was finished, then saved
    assert "resume from step 6" in str(e.value) and str(tmp_path / "cut" / "checkpoint.pt") in str(e.value)
    assert f"interrupted by {signal.Signals(signum).name} after step 6" in str(e.value)
    assert (e.value.signum, e.value.exit_code) == (signum, 128 + signum)
    assert not (tmp_path / "cut" / "final.json").exists()
    assert isinstance(e.value, KeyboardInterrupt)
    assert {s: signal.getsignal(s) for s in handlers} == handlers  # both handlers are restored
    monkeypatch.undo()
    capsys.readouterr()
    res = train(small_model(seed=5), task, cfg(tmp_path / "cut"))
    assert "resuming from step 6 of 12" in capsys.readouterr().out
    assert untimed(tmp_path / "cut") == untimed(tmp_path / "whole")
    whole = json.loads((tmp_path / "whole" / "final.json").read_text())
    assert (res["train_loss"], res["valid_loss"]) == (whole["train_loss"], whole["valid_loss"])


def test_interrupt_without_an_out_dir_or_before_any_step_says_nothing_was_saved(tmp_path, monkeypatch):
    task = build_task("mqar", **TASK)
    sigint_at_step(monkeypatch, 3)
    with pytest.raises(TrainingInterrupted, match="nothing was saved"):
        train(small_model(), task, cfg(tmp_path, out_dir=None))
    sigint_at_step(monkeypatch, 0)  # the first step still finishes: step 1 is saved
    with pytest.raises(TrainingInterrupted, match="resume from step 1"):
        train(small_model(), task, cfg(tmp_path / "one"))


def test_sigint_while_a_checkpoint_is_written_keeps_it_whole(tmp_path, monkeypatch):
    """One SIGINT during a save: the save completes (the flag is read between steps). Two: the save stops at once,
    the previous checkpoint stays whole (temporary file + rename), and a rerun resumes from it."""
    task = build_task("mqar", **TASK)
    real_save = torch.save
    signals = {4: 1, 8: 2}  # the periodic save at step 4 gets one SIGINT, a save at step 8 would get two

    def save(obj, f, *a, **k):
        for _ in range(signals.get(obj["step"], 0)):
            os.kill(os.getpid(), signal.SIGINT)
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(checkpoint_module.torch, "save", save)
    with pytest.raises(TrainingInterrupted, match="resume from step 4"):
        train(small_model(), task, cfg(tmp_path, ckpt_every=4))
    assert ckpt_step(tmp_path) == 4 and not list(tmp_path.glob("checkpoint.tmp*"))
    with pytest.raises(KeyboardInterrupt) as e:  # resumed, the save at step 8 is hit twice
        train(small_model(), task, cfg(tmp_path, ckpt_every=4))
    assert not isinstance(e.value, TrainingInterrupted)
    assert ckpt_step(tmp_path) == 4  # the interrupted write never replaced the whole checkpoint
    monkeypatch.undo()
    train(small_model(), task, cfg(tmp_path, ckpt_every=4))
    assert ckpt_step(tmp_path) == 12 and not list(tmp_path.glob("checkpoint.tmp*"))


def test_stop_request_leaves_an_ignored_sigint_ignored_and_still_handles_sigterm():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopRequest(notice=False) as stop:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == stop._on_signal
            os.kill(os.getpid(), signal.SIGINT)  # ignored
            assert not stop.requested
            os.kill(os.getpid(), signal.SIGTERM)
            assert stop.requested and stop.signum == signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_stop_signal_after_sigterm_stops_at_once(second):
    with pytest.raises(KeyboardInterrupt), StopRequest(notice=False):
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), second)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_stop_request_off_the_main_thread_installs_nothing():
    import threading

    seen = []
    thread = threading.Thread(target=lambda: seen.append(StopRequest().__enter__()._previous))
    thread.start()
    thread.join()
    assert seen == [{}] and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def _cli(out: Path, steps: int) -> list[str]:
    args = ["train", "--model", "attention-tiny", "--task", "mqar", "--task-arg", "vocab_size=16"]
    args += ["--task-arg", "num_pairs=2", "--task-arg", "seq_len=16", "--model-arg", "d_model=32"]
    args += ["--steps", str(steps), "--batch-size", "16", "--eval-every", "0", "--set", "train.log_every=1"]
    return [sys.executable, "-m", "seqzoo", *args, "--out", str(out), "--no-progress"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_on_the_command_line_saves_the_step_and_the_rerun_resumes_from_it(tmp_path, signum):
    """The real thing: ``python -m seqzoo train`` with default checkpointing, SIGINT (Ctrl-C) or SIGTERM (a cluster's
    preemption) once some steps are done. For SIGTERM the child starts with SIGINT ignored, as ``cmd &`` in a script
    would: SIGTERM is then the only clean way to stop it."""
    steps = 60
    subprocess.run(_cli(tmp_path / "whole", steps), check=True, capture_output=True, env=_env())
    # SIGINT set to default even when pytest runs with it ignored; ignored for the SIGTERM case
    sigint = signal.SIG_DFL if signum == signal.SIGINT else signal.SIG_IGN
    proc = subprocess.Popen(
        _cli(tmp_path / "cut", steps),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )
    metrics = tmp_path / "cut" / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (metrics.exists() and len(lines(metrics)) >= 3):
        time.sleep(0.02)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    done = len(lines(metrics))
    assert done < steps, "the run finished before it could be interrupted; make it longer"
    assert proc.returncode == 128 + signum, err  # 130 for SIGINT, 143 for SIGTERM
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        f"seqzoo train: interrupted by {signal.Signals(signum).name} after step {done} of {steps}; checkpoint saved in "
        f"{tmp_path / 'cut' / 'checkpoint.pt'}; run the same command again to resume from step {done}"
    ]
    assert ckpt_step(tmp_path / "cut") == done
    again = subprocess.run(_cli(tmp_path / "cut", steps), check=True, capture_output=True, text=True, env=_env())
    assert f"resuming from step {done} of {steps}" in again.stdout
    train_losses = [[r["loss"] for r in lines(p / "metrics.jsonl")] for p in (tmp_path / "whole", tmp_path / "cut")]
    assert train_losses[0] == train_losses[1]
    whole, cut = (json.loads((p / "final.json").read_text()) for p in (tmp_path / "whole", tmp_path / "cut"))
    assert (cut["train_loss"], cut["valid_loss"]) == (whole["train_loss"], whole["valid_loss"])


def _subcommands() -> list[str]:
    from seqzoo.cli import make_parser

    parser = make_parser()
    return sorted(next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices)


@pytest.mark.parametrize("command", _subcommands())
def test_ctrl_c_in_any_subcommand_is_one_line_and_exit_130(command, monkeypatch, capsys):
    """Outside training there is no step to save; the user asked to stop, so no traceback either."""
    import argparse

    import seqzoo.cli as cli

    def interrupted(args):
        raise KeyboardInterrupt

    parsed = argparse.Namespace(command=command, fn=interrupted)
    parser = type("Parser", (), {"parse_args": lambda self, argv: parsed})()
    monkeypatch.setattr(cli, "make_parser", lambda: parser)
    assert cli.main([command]) == 130
    assert capsys.readouterr().err.splitlines() == [f"seqzoo {command}: interrupted"]
