"""What the MAD tasks share: argument checks that name the argument, the split rule, the per-call generators."""

from __future__ import annotations

import random

import torch

from ...errors import InputError
from ..base import split_seed


def check_int(task: str, name: str, value, low: int, high: int | None = None) -> None:
    """``value`` must be an int in ``[low, high]`` (``high`` None: no upper bound)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
    if not ok:
        upper = "" if high is None else f", <= {high}"
        raise InputError(f"{task}: {name} must be an int >= {low}{upper}, got {value!r}")


def check_train_size(task: str, train_size) -> None:
    if train_size is not None:
        check_int(task, "train_size", train_size, 1)


def check_fraction(task: str, name: str, value, closed_top: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value
    ok = ok and (value <= 1.0 if closed_top else value < 1.0)
    if not ok:
        top = "1]" if closed_top else "1)"
        raise InputError(f"{task}: {name} must be a number in [0, {top}, got {value!r}")


def is_training(split: str) -> bool:
    """MAD builds its training set with ``is_training=True`` (next-token targets at every position for the recall
    tasks) and its test set with ``False``; seqzoo's ``valid`` and ``test`` splits are both test-like."""
    split_seed(0, split)  # refuses an unknown split by name
    return split == "train"


def torch_generator(seed: int, split: str) -> torch.Generator:
    return torch.Generator().manual_seed(split_seed(seed, split))


def python_rng(seed: int, split: str) -> random.Random:
    """A ``random.Random`` for generators that loop per sample (fuzzy recall): seeded from the split's seed."""
    return random.Random(split_seed(seed, split))
