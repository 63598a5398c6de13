"""TrainConfig.tensorboard / seqzoo train --tensorboard: the metrics.jsonl records as TensorBoard scalars.

The refusal paths run everywhere; the event files are read back only where the tensorboard package is installed
(``pip install 'seqzoo[tensorboard]'``), with tensorboard's own EventAccumulator.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seqzoo import LanguageModel, ModelConfig
from seqzoo.cli import main
from seqzoo.errors import InputError
from seqzoo.tasks import build_task
from seqzoo.train import TrainConfig, train
from seqzoo.train.tensorboard import scalars

TASK = {"vocab_size": 16, "num_pairs": 2, "seq_len": 16}


def small_model():
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=16, d_model=16, n_layers=1, pattern=["attention"], mixer_kwargs={"attention": {"n_heads": 2}}
    )
    return LanguageModel(cfg)


def run_cfg(out, **kw):
    base = dict(steps=6, batch_size=8, lr=3e-3, warmup_steps=1, eval_every=3, eval_samples=16, log_every=1)
    return TrainConfig(**{**base, "out_dir": str(out), "progress": False, "tensorboard": True, **kw})


@pytest.fixture
def no_tensorboard(monkeypatch):
    """Make ``import tensorboard`` fail, as where the package is not installed."""
    for name in ("tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, name, None)


def read_scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(directory))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def jsonl_scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for record in map(json.loads, path.read_text().splitlines()):
        for tag, value in scalars(record).items():
            out.setdefault(tag, []).append((record["step"], value))
    return out


def assert_same_scalars(tb, ref):
    assert sorted(tb) == sorted(ref)
    for tag in ref:
        assert [s for s, _ in tb[tag]] == [s for s, _ in ref[tag]], tag
        torch.testing.assert_close([v for _, v in tb[tag]], [v for _, v in ref[tag]], rtol=1e-6, atol=0)  # float32


def test_the_option_is_strict_and_off_by_default():
    assert TrainConfig().tensorboard is False
    with pytest.raises(InputError, match="TrainConfig.tensorboard must be"):
        TrainConfig(tensorboard="yes")


def test_scalars_of_a_record():
    record = {"step": 5, "split": "train", "loss": 1.5, "lr": 1e-3, "grad_norm": None, "time_s": 2, "flag": True}
    assert scalars(record) == {"train/loss": 1.5, "train/lr": 1e-3, "train/time_s": 2.0}
    assert scalars({"step": 3, "split": "valid", "loss": float("nan"), "accuracy": 0.5}) == {"valid/accuracy": 0.5}


def test_missing_package_is_refused_before_anything_is_written(tmp_path, no_tensorboard):
    with pytest.raises(InputError, match=r"needs the tensorboard package: pip install tensorboard"):
        train(small_model(), build_task("mqar", **TASK), run_cfg(tmp_path / "run"))
    assert not (tmp_path / "run").exists()
    with pytest.raises(InputError, match="set out_dir"):
        train(small_model(), build_task("mqar", **TASK), run_cfg(tmp_path / "run", out_dir=None))


def test_cli_refuses_tensorboard_without_the_package_in_one_line(tmp_path, capsys, no_tensorboard):
    args = ["train", "--model", "attention-tiny", "--task", "mqar", "--out", str(tmp_path / "run"), "--tensorboard"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "pip install tensorboard" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # not even run.json


def test_events_hold_every_jsonl_metric(tmp_path):
    pytest.importorskip("tensorboard")
    train(small_model(), build_task("mqar", **TASK), run_cfg(tmp_path))
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    tb, ref = read_scalars(tmp_path / "tensorboard"), jsonl_scalars(tmp_path / "metrics.jsonl")
    assert {"train/loss", "train/lr", "train/grad_norm", "valid/loss", "valid/accuracy"} <= set(ref)
    assert [s for s, _ in ref["train/loss"]] == list(range(1, 7)) and [s for s, _ in ref["valid/loss"]] == [3, 6]
    assert_same_scalars(tb, ref)


def test_resume_hides_the_steps_after_the_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    task = build_task("mqar", **TASK)
    train(small_model(), task, run_cfg(tmp_path / "whole"))
    # as if killed after step 4 with the last checkpoint at step 2: the resumed run logs steps 3-4 again
    split = tmp_path / "split"
    train(small_model(), task, run_cfg(split, stop_after=2))
    kept = (split / "checkpoint.pt").read_bytes()
    train(small_model(), task, run_cfg(split, stop_after=4))
    (split / "checkpoint.pt").write_bytes(kept)
    train(small_model(), task, run_cfg(split))
    tb = read_scalars(split / "tensorboard")
    assert_same_scalars(tb, jsonl_scalars(split / "metrics.jsonl"))
    whole = read_scalars(tmp_path / "whole" / "tensorboard")
    tb.pop("train/time_s"), whole.pop("train/time_s")  # wall clock: the one metric a rerun does not reproduce
    assert_same_scalars(tb, whole)  # bitwise-reproducible CPU run


def test_a_fresh_run_replaces_old_events(tmp_path):
    pytest.importorskip("tensorboard")
    task = build_task("mqar", **TASK)
    train(small_model(), task, run_cfg(tmp_path, lr=1e-2))
    train(small_model(), task, run_cfg(tmp_path, resume=False))
    assert len(list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert_same_scalars(read_scalars(tmp_path / "tensorboard"), jsonl_scalars(tmp_path / "metrics.jsonl"))


@pytest.mark.slow
def test_only_rank_zero_writes_events(tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "seqzoo"]
    cmd += ["train", "--model", "attention-tiny", "--task", "mqar", "--steps", "4", "--batch-size", "8"]
    cmd += ["--model-arg", "d_model=16", "--eval-every", "2", "--set", "train.eval_samples=16", "--no-progress"]
    cmd += [f"--task-arg={k}={v}" for k, v in TASK.items()]
    cmd += ["--distributed", "ddp", "--out", str(out), "--tensorboard"]
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(list((out / "tensorboard").iterdir())) == 1
    assert_same_scalars(read_scalars(out / "tensorboard"), jsonl_scalars(out / "metrics.jsonl"))
