"""Curriculum over the number of segments for recurrent-memory models (RMT, arXiv:2304.11062 §5 and AAAI-24 appendix).

Training starts on 1 segment; when a stage has converged (or used its step budget) the number of segments grows
and training continues from that stage's best weights with a fresh optimiser and warm-up. With
``mix_previous=True`` every batch of stage N draws its segment count uniformly from {1, ..., N} (AAAI Fig. 12,
BABILong ``vary_n_segments``). The naive baseline is ``Curriculum(stages=[N])`` with the same step budget.

``train_curriculum(model, task, curriculum, ...)`` needs a task with ``with_segments(n)`` and ``build(n, seed,
split)`` (e.g. ``seqzoo.tasks.babi.BabiMemory``) and a model called as ``model(x, labels=y).loss`` (e.g. ``RMT``).
"""

from __future__ import annotations

import copy
import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import InputError, TrainingDivergedError
from ..tasks.base import IGNORE_INDEX
from .optim import param_groups


@dataclass
class Curriculum:
    """Stages of segment counts and when to advance (RMT curriculum, Bulatov et al., arXiv:2304.11062; docs/rmt.md)."""

    stages: list[int] = field(default_factory=lambda: [1, 2, 3])
    mix_previous: bool = False
    steps_per_stage: int = 500  # max steps of a stage; unused steps of early-advancing stages carry over
    threshold: float = 0.99  # advance after two consecutive evaluations at >= threshold
    patience: int = 5  # ... or after this many evaluations without improvement

    def __post_init__(self):
        if not self.stages or not all(isinstance(n, int) and n >= 1 for n in self.stages):
            raise InputError(f"stages must be a non-empty list of ints >= 1, got {self.stages!r}")
        if any(b <= a for a, b in zip(self.stages, self.stages[1:])):
            raise InputError(f"stages must be strictly increasing, got {self.stages!r}")
        if not isinstance(self.steps_per_stage, int) or self.steps_per_stage < 1:
            raise InputError(f"steps_per_stage must be an int >= 1, got {self.steps_per_stage!r}")
        if not isinstance(self.patience, int) or self.patience < 1:
            raise InputError(f"patience must be an int >= 1, got {self.patience!r}")

    @classmethod
    def naive(cls, n_segments: int, total_steps: int) -> Curriculum:
        return cls(stages=[n_segments], steps_per_stage=total_steps, threshold=2.0, patience=10**9)

    def batch_segments(self, stage: int, rng: np.random.Generator) -> int:
        """Segment count of one batch at stage index ``stage``."""
        n = self.stages[stage]
        return int(rng.integers(1, n + 1)) if self.mix_previous else n

    def should_advance(self, history: list[float]) -> bool:
        """``history``: validation accuracies of the current stage, in order."""
        if len(history) >= 2 and history[-1] >= self.threshold and history[-2] >= self.threshold:
            return True
        if len(history) > self.patience:
            best_before = max(history[: -self.patience])
            return max(history[-self.patience :]) <= best_before
        return False


@dataclass
class OptimConfig:
    """AdamW with linear warm-up then linear decay to 0 (the RMT authors' training scripts); restarted at every stage."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 1e-3
    warmup_steps: int = 100
    grad_clip: float | None = 1.0
    batch_size: int = 64


def lr_scale(step: int, total: int, cfg: OptimConfig) -> float:
    """Multiplier of each group's base rate at step ``step`` of a ``total``-step stage."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    return max(0.0, (total - step) / max(1, total - cfg.warmup_steps))


def lr_at(step: int, total: int, cfg: OptimConfig) -> float:
    return cfg.lr * lr_scale(step, total, cfg)


def build_stage_optimizer(model, cfg: OptimConfig) -> torch.optim.AdamW:
    """A stage's AdamW: ``cfg.weight_decay`` on every parameter (the RMT scripts' rule) except where a mixer
    declares its own optimiser hints (``Mixer.optim_overrides``), which keep their rate and weight decay."""
    groups = param_groups(model, cfg, decay="all")
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)


@torch.no_grad()
def evaluate_segments(
    model, task, n_segments: int, n_samples: int = 1000, seed: int = 0, split: str = "valid", batch_size: int = 128
) -> dict[str, float]:
    """Accuracy at ``n_segments``: class accuracy, or exact match of all scored (answer + eos) tokens."""
    t = task.with_segments(n_segments)
    x, y = t.build(n_samples, seed, split)
    if y.dim() == 2:  # per-token logits over the whole vocabulary: keep evaluation batches small
        batch_size = min(batch_size, 16)
    was = model.training
    model.eval()
    correct, loss_sum = 0, 0.0
    for i in range(0, n_samples, batch_size):
        xb, yb = x[i : i + batch_size], y[i : i + batch_size]
        out = model(xb, labels=yb)
        loss_sum += float(out.loss) * xb.shape[0]
        pred = out.logits.argmax(-1)
        if yb.dim() == 1:
            correct += int((pred == yb).sum())
        else:  # exact match: every scored position right (= greedy generation of the answer is exact)
            scored = yb != IGNORE_INDEX
            correct += int(((pred == yb) | ~scored).all(dim=1).sum())
    model.train(was)
    return {"accuracy": correct / n_samples, "loss": loss_sum / n_samples}


def train_curriculum(
    model,
    task,
    curriculum: Curriculum,
    optim: OptimConfig | None = None,
    eval_every: int = 100,
    eval_samples: int = 500,
    seed: int = 0,
    out_dir: str | Path | None = None,
    log_all_lengths: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Train through the stages; returns per-stage summaries. Writes ``curriculum.jsonl`` into ``out_dir``.

    Each stage: fresh AdamW + schedule, evaluation every ``eval_every`` steps at the stage's N (and at every
    n <= N when ``log_all_lengths``), best weights kept; the next stage starts from them. The model ends with
    the last stage's best weights.
    """
    optim = optim or OptimConfig()
    log_path = None
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        log_path = Path(out_dir) / "curriculum.jsonl"
        log_path.write_text("")

    def log(rec):
        if log_path is not None:
            with open(log_path, "a") as f:
                f.write(json.dumps(rec) + "\n")

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    summaries, carry, global_step, t0 = [], 0, 0, time.time()
    for si, N in enumerate(curriculum.stages):
        budget = curriculum.steps_per_stage + carry
        opt = build_stage_optimizer(model, optim)
        params = [p for g in opt.param_groups for p in g["params"]]
        best, best_state, history, step = -1.0, None, [], 0
        model.train()
        for step in range(budget):
            for g in opt.param_groups:
                g["lr"] = g["base_lr"] * lr_scale(step, budget, optim)
            n = curriculum.batch_segments(si, rng)
            x, y = task.with_segments(n).build(optim.batch_size, seed * 1_000_003 + global_step, "train")
            loss = model(x, labels=y, return_logits=False).loss
            loss_value = float(loss.detach())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if optim.grad_clip:
                torch.nn.utils.clip_grad_norm_(params, optim.grad_clip)
            opt.step()
            global_step += 1
            if not math.isfinite(loss_value):
                raise TrainingDivergedError(f"loss became {loss_value} at stage N={N}, step {step + 1}")
            if (step + 1) % 10 == 0:
                log(
                    {
                        "stage": N,
                        "step": step + 1,
                        "global_step": global_step,
                        "split": "train",
                        "n_segments": n,
                        "loss": loss_value,
                        "time_s": round(time.time() - t0, 2),
                    }
                )
            if (step + 1) % eval_every == 0 or step + 1 == budget:
                lengths = range(1, N + 1) if log_all_lengths else [N]
                accs = {}
                for ne in lengths:
                    m = evaluate_segments(model, task, ne, eval_samples, seed)
                    accs[ne] = m["accuracy"]
                    log(
                        {
                            "stage": N,
                            "step": step + 1,
                            "global_step": global_step,
                            "split": "valid",
                            "n_segments": ne,
                            **m,
                        }
                    )
                acc = accs[N]
                history.append(acc)
                if progress:
                    print(f"stage N={N} step {step + 1}/{budget} loss {loss_value:.4f} valid acc {acc:.3f}", flush=True)
                if acc > best:
                    best, best_state = acc, copy.deepcopy(model.state_dict())
                if curriculum.should_advance(history):
                    break
        used = step + 1
        carry = budget - used
        if best_state is not None:
            model.load_state_dict(best_state)
        summaries.append({"stage": N, "budget": budget, "steps": used, "best_valid_accuracy": best})
    return {
        "stages": summaries,
        "total_steps": global_step,
        "time_s": round(time.time() - t0, 2),
        "curriculum": asdict(curriculum),
        "optim": asdict(optim),
    }
