"""AdamW with parameter groups and the learning-rate schedules (warm-up + cosine, or one-cycle).

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


# PyTorch OneCycleLR's defaults (torch.optim.lr_scheduler.OneCycleLR): start at max/div, end at start/final_div,
# momentum (Adam's beta1) between base and max, against the rate
ONECYCLE_DIV, ONECYCLE_FINAL_DIV, ONECYCLE_MOMENTUM = 25.0, 1e4, (0.85, 0.95)


def _cos_anneal(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


def onecycle(step: int, cfg: TrainConfig) -> tuple[float, float]:
    """(rate multiplier, beta1) at optimiser step ``step`` of the one-cycle schedule: what
    ``OneCycleLR(max_lr, total_steps=cfg.steps, pct_start=cfg.warmup_steps / cfg.steps)`` gives after ``step``
    scheduler steps (stateless, so a resumed run continues it exactly; ``tests/test_train.py`` compares the two)."""
    lo, hi = ONECYCLE_MOMENTUM
    start = 1.0 / ONECYCLE_DIV
    peak = float(cfg.warmup_steps) - 1  # OneCycleLR's end of the rising phase: pct_start * total_steps - 1
    step = min(step, cfg.steps - 1)
    if step <= peak:
        pct = step / peak if peak > 0 else 1.0
        return _cos_anneal(start, 1.0, pct), _cos_anneal(hi, lo, pct)
    pct = (step - peak) / (cfg.steps - 1 - peak)
    return _cos_anneal(1.0, start / ONECYCLE_FINAL_DIV, pct), _cos_anneal(lo, hi, pct)


def set_lr(optimizer: torch.optim.Optimizer, step: int, cfg: TrainConfig) -> float:
    """Set every group's rate (and, one-cycle, Adam's beta1) for ``step``; returns the base group's rate."""
    if cfg.schedule == "onecycle":
        f, beta1 = onecycle(step, cfg)
        for g in optimizer.param_groups:
            g["betas"] = (beta1, g["betas"][1])
    else:
        f = lr_factor(step, cfg)
    for g in optimizer.param_groups:
        g["lr"] = g["base_lr"] * f
    return cfg.lr * f
