"""Task contract: a task builds ``(inputs, targets)`` LongTensors ``(N, T)`` deterministically from a seed.

``targets[:, t]`` is what the model must output at position t; ``-100`` marks unscored positions.
``build_batch`` returns the same rows as a ``Batch``, which also carries ``segment_pos (N, T)`` where a row packs
several documents (the ``text`` task): the position inside the current document, 0 where one starts. The trainer
and evaluation pass it to the model; tasks without documents leave it None and need not change.
Splits use disjoint seed streams, so train and valid samples never coincide by construction of the seed.
A task with ``train_size`` set trains on that fixed set (epochs); otherwise every step draws fresh
samples from the seed and the step number (infinite data, exactly reproducible on resume).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import torch

from ..errors import InputError
from ..field_types import check_value

TASKS: dict[str, type[Task]] = {}
IGNORE_INDEX = -100
SPLIT_OFFSETS = {"train": 0, "valid": 1_000_003, "test": 2_000_003}


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    def wrap(cls):
        if name in TASKS and TASKS[name] is not cls:
            raise InputError(f"task {name!r} is already registered")
        cls.name = name
        TASKS[name] = cls
        return cls

    return wrap


def build_task(name: str, **kwargs: Any) -> Task:
    """The registered task ``name`` built with ``kwargs``; an argument it does not take, or a value of the wrong type
    (``seq_len="abc"`` from ``--task-arg``), is refused by name before the task is built."""
    if name not in TASKS:
        raise InputError(f"unknown task {name!r}; registered tasks: {sorted(TASKS)}")
    params = inspect.signature(TASKS[name].__init__).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        known = [k for k, p in params.items() if k != "self" and p.kind is not inspect.Parameter.VAR_POSITIONAL]
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            raise InputError(f"task {name}: unknown argument(s) {', '.join(unknown)}; it takes {', '.join(known)}")
    for key, value in kwargs.items():
        if key in params and params[key].annotation is not inspect.Parameter.empty:
            check_value(value, params[key].annotation, f"task {name}: {key}")
    return TASKS[name](**kwargs)


def split_seed(seed: int, split: str) -> int:
    if split not in SPLIT_OFFSETS:
        raise InputError(f"split must be one of {sorted(SPLIT_OFFSETS)}, got {split!r}")
    return seed + SPLIT_OFFSETS[split]


class Batch(NamedTuple):
    """Rows of a task: ``inputs``, ``targets`` and, for packed documents, ``segment_pos`` (else None)."""

    inputs: torch.Tensor
    targets: torch.Tensor
    segment_pos: torch.Tensor | None = None

    def rows(self, index) -> Batch:
        """The same rows selected by ``index`` (a slice or an index tensor) in every field."""
        return Batch(*(None if t is None else t[index] for t in self))


class Task:
    name: ClassVar[str] = "task"
    vocab_size: int
    seq_len: int
    train_size: int | None = None  # fixed training set size, or None for fresh samples every step
    kind: str = "lm"  # "lm": per-position targets; "cls": one label per sequence (targets (N,))

    def build(self, n: int, seed: int, split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def build_batch(self, n: int, seed: int, split: str = "train") -> Batch:
        """``build``'s rows as a ``Batch``; a task whose rows pack documents adds their ``segment_pos``."""
        return Batch(*self.build(n, seed, split))

    def config(self) -> dict[str, Any]:
        """Constructor arguments, written into run files."""
        return {}

    def describe(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in self.config().items())})"
