"""AdamW with parameter groups and the warmup + cosine learning-rate schedule.

Default grouping: weight decay on matrices (dim >= 2) except embeddings; none on biases, norm gains and
vectors. Mixers declare per-parameter hints through ``Mixer.optim_overrides()`` (absolute ``lr``,
``lr_scale``, ``weight_decay``), e.g. GateLoop's state-transition projections or the implicit filters of
Orchid and the long convolution (Hyena, arXiv:2302.10866: own rate, no weight decay). ``param_groups``
gathers them from any module tree (``collect_optim_overrides``), so every trainer honours them: ``train``
(and the sweep runs built on it) and the RMT curriculum (``train/curriculum.py``).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import InputError
from ..mixers.base import collect_optim_overrides
from .config import TrainConfig

DECAY_RULES = ("matrices", "all")


def param_groups(
    model: nn.Module, cfg: TrainConfig, overrides: dict[str, dict] | None = None, decay: str = "matrices"
) -> list[dict]:
    """AdamW groups of ``model``'s trainable parameters, one per distinct (lr, weight decay).

    ``cfg`` gives the base ``lr`` and ``weight_decay`` (a ``TrainConfig`` or the curriculum's ``OptimConfig``).
    ``overrides`` (full parameter name -> hint) defaults to the mixers' own hints. ``decay``: which parameters
    without a hint get ``cfg.weight_decay``: ``"matrices"`` (dim >= 2, embeddings excluded) or ``"all"``.
    Each group records its parameter ``names`` and its ``base_lr`` (the schedule multiplies it).
    """
    if decay not in DECAY_RULES:
        raise InputError(f"decay must be one of {DECAY_RULES}, got {decay!r}")
    overrides = collect_optim_overrides(model) if overrides is None else overrides
    known = {n for n, _ in model.named_parameters()}
    stray = set(overrides) - known
    if stray:
        raise InputError(f"optimiser overrides name unknown parameters: {sorted(stray)[:5]}")
    groups: dict[tuple, dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decayed = decay == "all" or (p.dim() >= 2 and not name.startswith("embed."))
        setting = overrides.get(name, {})
        lr = setting.get("lr", cfg.lr * setting.get("lr_scale", 1.0))
        wd = setting.get("weight_decay", cfg.weight_decay if decayed else 0.0)
        key = (lr, wd)
        groups.setdefault(key, {"params": [], "names": [], "lr": lr, "base_lr": lr, "weight_decay": wd})
        groups[key]["params"].append(p)
        groups[key]["names"].append(name)
    return list(groups.values())


def build_optimizer(model: nn.Module, cfg: TrainConfig, overrides: dict[str, dict] | None = None) -> torch.optim.AdamW:
    groups = param_groups(model, cfg, overrides)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of each group's base rate at optimiser step ``step`` (0-based): linear warmup, then cosine."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def set_lr(optimizer: torch.optim.Optimizer, step: int, cfg: TrainConfig) -> float:
    f = lr_factor(step, cfg)
    for g in optimizer.param_groups:
        g["lr"] = g["base_lr"] * f
    return cfg.lr * f
