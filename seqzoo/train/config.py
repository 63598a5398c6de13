"""``TrainConfig``: every knob of the training loop, JSON-serialisable."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..field_types import check_fields
from ..models.config import strict_from_dict

SCHEDULES = ("cosine", "onecycle")


@dataclass
class TrainConfig:
    steps: int = 500
    batch_size: int = 32  # global batch per optimiser step (split over grad_accum and ranks)
    grad_accum: int = 1
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 50
    # "cosine": linear warm-up over warmup_steps, then cosine to lr * min_lr_ratio. "onecycle": PyTorch's OneCycleLR
    # (Smith & Topin, arXiv:1708.07120) with its defaults: cosine from lr/25 up to lr over warmup_steps, cosine down
    # to lr/25e4, and beta1 cycled 0.95 -> 0.85 -> 0.95 against the rate (min_lr_ratio and betas[0] unused)
    schedule: str = "cosine"
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    grad_clip: float | None = 1.0
    eval_every: int = 100
    eval_samples: int = 512
    eval_batch_size: int = 128
    log_every: int = 10
    ckpt_every: int = 0  # 0: only at the end
    out_dir: str | None = None
    resume: bool = True  # continue from out_dir/checkpoint.pt when present
    seed: int = 0
    device: str = "auto"  # "auto" | "cpu" | "cuda" | "cuda:1" ...
    precision: str = "auto"  # "auto" (bf16 autocast where supported, else fp32) | "fp32" | "bf16"
    distributed: str = "auto"  # "auto" (DDP when launched by torchrun) | "none" | "ddp" | "fsdp"
    progress: bool = True
    stop_after: int | None = None  # end this process after that step (as if killed), keeping the schedule of `steps`
    compile: bool = False  # the training forward through torch.compile (optional; measured in docs/benchmarks.md)
    # the LM head only at scored positions (LanguageModel logits_mask): same loss, a head cost of the scored rows
    # instead of every position (large vocabularies with few scored positions, e.g. Zoology's MQAR at V = 8,192)
    scored_logits: bool = False
    # also write the metrics.jsonl records as TensorBoard scalars into out_dir/tensorboard/ (train/tensorboard.py)
    tensorboard: bool = False
    # each sequence split along time over this many ranks (context parallelism, docs/context-parallel.md); the world
    # size is data x context_parallel
    context_parallel: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.betas, list):
            self.betas = tuple(self.betas)
        check_fields(self)  # types from the annotations, numbers finite: lr=nan or lr="abc" never starts a run
        for name in (
            "steps",
            "batch_size",
            "grad_accum",
            "eval_samples",
            "eval_batch_size",
            "log_every",
            "context_parallel",
        ):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise InputError(f"TrainConfig.{name} must be a positive int, got {v!r}")
        for name in ("warmup_steps", "eval_every", "ckpt_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 0:
                raise InputError(f"TrainConfig.{name} must be a non-negative int, got {v!r}")
        if self.lr <= 0:
            raise InputError(f"TrainConfig.lr must be > 0, got {self.lr}")
        if self.weight_decay < 0:
            raise InputError(f"TrainConfig.weight_decay must be >= 0, got {self.weight_decay}")
        if self.eps <= 0:
            raise InputError(f"TrainConfig.eps must be > 0, got {self.eps}")
        if len(self.betas) != 2 or not all(
            isinstance(b, (int, float)) and not isinstance(b, bool) and 0.0 <= b < 1.0 for b in self.betas
        ):
            raise InputError(f"TrainConfig.betas must be two numbers in [0, 1), got {self.betas!r}")
        if self.grad_clip is not None and self.grad_clip < 0:
            raise InputError(f"TrainConfig.grad_clip must be > 0 (or 0 / null: no clipping), got {self.grad_clip}")
        if self.stop_after is not None and self.stop_after <= 0:
            raise InputError(f"TrainConfig.stop_after must be a positive int or null, got {self.stop_after}")
        check_device_name(self.device)
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise InputError(f"TrainConfig.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.schedule not in SCHEDULES:
            raise InputError(f"TrainConfig.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.schedule == "onecycle" and not 0 < self.warmup_steps < self.steps:
            raise InputError(
                f"TrainConfig.warmup_steps must be in (0, steps={self.steps}) with schedule='onecycle' (its rising "
                f"phase), got {self.warmup_steps}"
            )
        if self.precision not in ("auto", "fp32", "bf16"):
            raise InputError(f"TrainConfig.precision must be 'auto', 'fp32' or 'bf16', got {self.precision!r}")
        if self.distributed not in ("auto", "none", "ddp", "fsdp"):
            raise InputError(
                f"TrainConfig.distributed must be 'auto', 'none', 'ddp' or 'fsdp', got {self.distributed!r}"
            )
        for name in ("compile", "scored_logits", "tensorboard"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"TrainConfig.{name} must be true or false, got {getattr(self, name)!r}")
        if self.batch_size % self.grad_accum:
            raise InputError(f"batch_size={self.batch_size} must be divisible by grad_accum={self.grad_accum}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        return strict_from_dict(cls, d)


def check_device_name(name: str) -> None:
    """``auto``, ``cpu``, ``cuda``, ``cuda:N``, ...: a name torch can parse (whether it is present is checked when a run
    starts, ``loop.resolve_device``: a config may be written on one machine and run on another)."""
    import torch

    if name == "auto":
        return
    try:
        torch.device(name)
    except (RuntimeError, ValueError):
        raise InputError(f"TrainConfig.device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {name!r}") from None
