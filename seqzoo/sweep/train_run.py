"""The standard sweep run: seed, build a model, train it on a task (resumable), evaluate; metrics as a dict.

``config`` (every key is part of the run hash):

* ``seed``: seeds python / numpy / torch *before the model is built*, and the trainer (``train.seed``);
* ``model``: ``{"type": "lm" | "encoder", "config": ModelConfig dict, "init": None | "xlstm"}``,
  ``{"builder": "module:function", "args": {...}}`` (``function(task, **args)`` returns the model) or a preset
  (``train/spec.py: build_model``, the same as ``seqzoo train``);
* ``task``: ``{"name": ..., **task arguments}`` (``seqzoo.tasks.build_task``);
* ``train``: ``TrainConfig`` fields (``out_dir`` / ``progress`` / ``resume`` are set here, and ``ckpt_every`` where
  the config leaves it unset: ``default_ckpt_every``);
* ``eval`` (optional): ``{"lengths": [...], "tokens": N, "bins": B}`` held-out loss at each evaluation length and
  the loss per position (``bins`` bins) in the longest windows: tasks with ``windows()`` (text);
  ``{"task_lengths": [...], "samples": N}``: the task rebuilt with each ``seq_len`` (synthetic probes trained short
  and tested longer), held-out loss and accuracy on ``N`` samples of each: ``acc_by_length`` ([L, loss, accuracy]);
  ``{"test": true}``: loss and accuracy on the task's whole ``test`` split (tasks with fixed splits, e.g. images):
  ``test_loss``, ``test_accuracy``, ``test_samples``; ``{"difficulty": {...}}`` is only a label.

Experiments that need their own evaluation call :func:`fit` (seed, build, train or resume) from their own run
function and evaluate the model it returns.

Returned metrics: ``params``, ``params_non_emb``, ``valid_loss``, ``valid_accuracy``, ``train_loss``, ``train_s``,
``train_tokens``, ``tokens_per_s``, ``curve`` ([step, train loss]), ``valid_curve`` ([step, loss, accuracy]) and
``by_length`` / ``per_position`` when asked.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from .runner import seed_everything


def build(config: dict[str, Any]):
    """(model, task) of a run configuration; the RNGs are seeded from ``config["seed"]`` before the model."""
    from ..train.spec import build_model, build_run_task

    task = build_run_task(config["task"])
    seed_everything(int(config["seed"]))
    return build_model(config["model"], task), task


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _checkpoint_step(out: Path) -> int:
    """The step a resumed run starts from (0 without a checkpoint)."""
    import torch

    from ..train.checkpoint import CHECKPOINT_NAME

    path = out / CHECKPOINT_NAME
    return int(torch.load(path, map_location="cpu", weights_only=False)["step"]) if path.is_file() else 0


def length_eval(model, task, lengths: list[int], tokens: int, bins: int, batch: int = 4) -> dict[str, Any]:
    """Held-out loss at each length (same valid tokens cut into windows of L) and binned per-position loss in the
    longest windows: length extrapolation of a model trained at ``task.seq_len``."""
    import torch

    from ..eval import evaluate
    from ..eval.evaluate import per_position_loss

    def windows(L):  # with segment_pos where the task packs documents
        if hasattr(task, "windows_batch"):
            return task.windows_batch("valid", seq_len=L, max_windows=max(1, tokens // L))
        return (*task.windows("valid", seq_len=L, max_windows=max(1, tokens // L)), None)

    by_length = []
    for L in lengths:
        xs, ys, sp = windows(L)
        with torch.no_grad():
            m = evaluate(model, xs, ys, batch_size=batch, segment_pos=sp)
        by_length.append([L, m["loss"]])
    xs, ys, sp = windows(max(lengths))
    Lmax = max(lengths)
    pp = per_position_loss(model, xs, ys, batch_size=batch, segment_pos=sp)
    width = max(1, Lmax // bins)
    per_position = [
        [b * width + width // 2, float(pp[b * width : (b + 1) * width].mean())] for b in range(Lmax // width)
    ]
    return {"by_length": by_length, "per_position": per_position}


def task_length_eval(model, config: dict[str, Any], lengths: list[int], samples: int) -> list[list[float]]:
    """[L, loss, accuracy] of ``model`` on the run's task rebuilt with ``seq_len=L`` (its valid split, the
    run's seed): length generalisation of a synthetic probe trained at the task's own ``seq_len``."""
    from ..eval import evaluate
    from ..tasks import build_task

    rows = []
    for L in lengths:
        args = {**config["task"], "seq_len": int(L)}
        task = build_task(args.pop("name"), **args)
        xs, ys = task.build(int(samples), int(config["seed"]), "valid")
        m = evaluate(model, xs, ys, batch_size=32, kind=getattr(task, "kind", "lm"))
        rows.append([int(L), m["loss"], m["accuracy"]])
    return rows


def train_run(config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The run function of every training sweep (see the module docstring)."""
    model, task, metrics = fit(config, run_dir)
    ev = config.get("eval") or {}
    if ev.get("lengths"):
        metrics.update(
            length_eval(model, task, list(ev["lengths"]), int(ev.get("tokens", 8192)), int(ev.get("bins", 16)))
        )
    if ev.get("task_lengths"):
        metrics["acc_by_length"] = task_length_eval(
            model, config, list(ev["task_lengths"]), int(ev.get("samples", 256))
        )
    if ev.get("test"):
        metrics.update(evaluate_test_split(model, task, int(config["seed"])))
    return metrics


def evaluate_test_split(model, task, seed: int) -> dict[str, float]:
    """Loss and accuracy on the task's whole ``test`` split (kept apart from ``valid``, which training reports)."""
    from ..errors import InputError
    from ..eval import evaluate

    if not hasattr(task, "split_size"):
        raise InputError(f"eval.test: task {task.name!r} has no fixed test split")
    xs, ys = task.build(task.split_size("test"), seed, "test")
    m = evaluate(model, xs, ys, batch_size=64, kind=getattr(task, "kind", "lm"))
    return {"test_loss": m["loss"], "test_accuracy": m["accuracy"], "test_samples": int(xs.shape[0])}


def _num_parameters(model, exclude_embeddings: bool = False) -> int:
    """The model's own count; a wrapper without one (RMT) counts its backbone's plus its own parameters."""
    if hasattr(model, "num_parameters"):
        return model.num_parameters(exclude_embeddings=exclude_embeddings)
    total = sum(p.numel() for p in model.parameters())
    backbone = getattr(model, "backbone", None)
    if exclude_embeddings and hasattr(backbone, "num_parameters"):
        own = total - sum(p.numel() for p in backbone.parameters())
        return own + backbone.num_parameters(exclude_embeddings=True)
    return total


# a run that names no checkpoint interval is saved this many times (a run killed with its process, e.g. at the end
# of a session, resumes from the last save instead of from step 0). The default interval stays out of the config and
# so out of the run's hash: resuming gives the numbers of an uninterrupted run (tests/test_sweep.py).
CHECKPOINTS_PER_RUN = 20


def default_ckpt_every(steps: int) -> int:
    """The checkpoint interval of a sweep run whose ``train`` config leaves ``ckpt_every`` unset or 0."""
    return max(1, steps // CHECKPOINTS_PER_RUN)


def fit(config: dict[str, Any], run_dir: Path):
    """Seed, build and train (resuming from ``run_dir/train``): ``(model, task, metrics)`` with the trained model."""
    from ..train import TrainConfig, train

    model, task = build(config)
    out = Path(run_dir) / "train"
    settings = {**config["train"], "seed": int(config["seed"]), "out_dir": str(out), "progress": False, "resume": True}
    settings["ckpt_every"] = settings.get("ckpt_every") or default_ckpt_every(int(settings["steps"]))
    cfg = TrainConfig.from_dict(settings)
    start = _checkpoint_step(out)
    t0 = time.time()
    res = train(model, task, cfg)
    train_s = time.time() - t0
    recs = _records(out / "metrics.jsonl")
    seq = int(getattr(task, "seq_len", 0) or 0)
    tokens = cfg.batch_size * seq * (res["step"] - start)  # tokens/s over the steps this call trained
    metrics: dict[str, Any] = {
        "params": _num_parameters(model),
        "params_non_emb": _num_parameters(model, exclude_embeddings=True),
        "valid_loss": res.get("valid_loss"),
        "valid_accuracy": res.get("valid_accuracy"),
        "train_loss": res.get("train_loss"),
        "train_s": round(train_s, 2),
        "resumed_from_step": start,
        "train_tokens": tokens,
        "tokens_per_s": round(tokens / train_s, 1) if train_s > 0 and tokens else None,
        "curve": [[r["step"], r["loss"]] for r in recs if r.get("split") == "train"],
        "valid_curve": [[r["step"], r["loss"], r["accuracy"]] for r in recs if r.get("split") == "valid"],
    }
    return model, task, metrics
