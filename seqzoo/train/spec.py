"""A run's full description — model, task, training — from a config file (JSON or TOML) plus overrides.

    {"model": {"preset": "attention-tiny", "d_model": 64},      # or ModelConfig fields without a preset
     "task":  {"name": "mqar", "num_pairs": 8, "seq_len": 64},
     "train": {"steps": 600, "lr": 3e-3, "out_dir": "runs/mqar"}}

The model's ``vocab_size`` follows the task's unless the file sets it.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import InputError, MissingFileError
from ..models import MODEL_TYPES, PRESETS, ModelConfig
from ..overrides import deep_merge
from ..tasks import build_task
from .config import TrainConfig
from .context_parallel import check_context_parallel
from .loop import check_can_start


def parse_value(text: str) -> Any:
    """CLI values: JSON when it parses (numbers, true/false, lists, dicts), else the raw string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_assignments(items: list[str] | None, what: str = "--set") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise InputError(f"{what} expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        out[key.strip()] = parse_value(value)
    return out


def load_config_file(path: str | Path) -> dict[str, Any]:
    """A run's config file: a table of ``model``, ``task`` and ``train`` tables; a malformed file is refused naming
    the file and where it fails to parse."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"config file {path} does not exist")
    if path.suffix not in (".toml", ".json"):
        raise InputError(f"config file must be .json or .toml, got {path.name}")
    try:
        text = path.read_text()
        if path.suffix == ".toml":
            import tomllib

            spec = tomllib.loads(text)
        else:
            spec = json.loads(text)
    except (UnicodeDecodeError, ValueError) as e:  # tomllib.TOMLDecodeError and json.JSONDecodeError are ValueErrors
        raise InputError(f"--config {path}: not valid {path.suffix[1:].upper()}: {e}") from None
    if not isinstance(spec, dict):
        raise InputError(f"--config {path}: expected a table with model, task and train sections, got {spec!r}")
    for section, value in spec.items():
        if not isinstance(value, dict):
            raise InputError(f"--config {path}: section {section!r} must be a table of settings, got {value!r}")
    return spec


def apply_dotted(spec: dict[str, Any], assignments: dict[str, Any]) -> dict[str, Any]:
    """``{"train.steps": 100}`` -> ``spec["train"]["steps"] = 100``. A dict value merges into a dict already there
    (``overrides.deep_merge``): ``model.mixer_kwargs={"mlstm": {...}}`` keeps the other mixers' settings."""
    spec = copy.deepcopy(spec)
    for key, value in assignments.items():
        parts = key.split(".")
        if parts[0] not in ("model", "task", "train") or len(parts) < 2 or not all(parts):
            raise InputError(f"--set keys look like model.X, task.X or train.X; got {key!r}")
        nested: Any = value
        for p in reversed(parts[1:]):
            nested = {p: nested}
        node = spec.setdefault(parts[0], {})
        for depth, p in enumerate(parts[1:-1], start=1):
            node = node.get(p, {})
            if not isinstance(node, dict):  # train.lr.x=1: lr holds a number, not settings
                raise InputError(f"--set {key}: {'.'.join(parts[: depth + 1])} is {node!r}, not a table of settings")
        spec[parts[0]] = deep_merge(spec[parts[0]], nested)
    return spec


@dataclass
class RunSpec:
    model: dict[str, Any]
    task: dict[str, Any]
    train: dict[str, Any]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        unknown = set(d) - {"model", "task", "train"}
        if unknown:
            raise InputError(f"unknown config section(s) {sorted(unknown)}; expected model, task, train")
        for section in ("model", "task", "train"):
            if not isinstance(d.get(section, {}), dict):
                raise InputError(f"config section {section!r} must be a table of settings, got {d[section]!r}")
        return cls(dict(d.get("model", {})), dict(d.get("task", {})), dict(d.get("train", {})))

    def build(self):
        """-> (model, task, TrainConfig)."""
        # the training settings first: they are cheap to check, and a task (a text corpus) can be slow to build
        train_cfg = TrainConfig.from_dict(self.train)
        check_can_start(train_cfg)
        task_kwargs = dict(self.task)
        task_name = task_kwargs.pop("name", None)
        if not task_name:
            raise InputError("the run needs a task: task.name (e.g. --task mqar)")
        task = build_task(task_name, **task_kwargs)
        torch.manual_seed(train_cfg.seed)  # the initial weights are part of the run: same seed, same model
        model_fields = dict(self.model)
        preset = model_fields.pop("preset", None)
        model_fields.setdefault("vocab_size", task.vocab_size)
        if preset is not None:
            if preset not in PRESETS:
                raise InputError(f"unknown preset {preset!r}; available presets: {sorted(PRESETS)}")
            config = PRESETS[preset].config(**model_fields)
            kind = PRESETS[preset].kind
        else:
            kind = model_fields.pop("kind", "lm")
            config = ModelConfig.from_dict(model_fields)
        if config.vocab_size < task.vocab_size:
            raise InputError(f"model vocab_size={config.vocab_size} is smaller than the task's {task.vocab_size}")
        model = MODEL_TYPES[kind](config)
        check_context_parallel(train_cfg, model, task)  # before the CLI writes run.json
        return model, task, train_cfg

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "task": self.task, "train": self.train}
