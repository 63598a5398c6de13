"""The one run schema, :class:`RunSpec` (model, task, training, seed, evaluation, run function), and a run's
config file (JSON or TOML) plus overrides.

    {"model": {"preset": "attention-tiny", "d_model": 64},      # or ModelConfig fields without a preset
     "task":  {"name": "mqar", "num_pairs": 8, "seq_len": 64},
     "train": {"steps": 600, "lr": 3e-3, "out_dir": "runs/mqar"}}

The model's ``vocab_size`` follows the task's unless the file sets it.
"""

from __future__ import annotations

import copy
import importlib
import json
from dataclasses import dataclass, field, fields
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
from .run_key import run_key


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
    unknown = sorted(set(spec) - {"model", "task", "train"})
    if unknown:  # a section nothing reads would be dropped without a word
        raise InputError(f"--config {path}: unknown section(s) {unknown}; expected model, task and train")
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


TRAIN_RUN = "seqzoo.sweep.train_run:train_run"  # the standard run: seed, build, train (resumable), evaluate
SECTIONS = ("model", "task", "train", "seed", "eval")  # the parts of a run configuration the standard run reads
FIELDS = ("fn", "labels", *SECTIONS, "extra")  # the keys of a RunSpec's dict form (``to_dict`` / ``from_dict``)
MODEL_FORMS = {  # the keys each form of a ``model`` section may hold (see ``build_model``)
    "builder": ("builder", "args"),
    "config": ("type", "config", "init"),
}
MODEL_INITS = (None, "xlstm")
# what the standard run's evaluation reads (``sweep/train_run.py: train_run``)
EVAL_KEYS = ("lengths", "tokens", "bins", "task_lengths", "samples", "test", "difficulty")


@dataclass(frozen=True)
class RunSpec:
    """One run: what ``seqzoo train`` builds from its options, what a sweep grid expands into and what every
    experiment produces. Its key (:meth:`key`, the name of its folder in a sweep) hashes ``fn`` and :attr:`config`.

    * ``model``: ``{"preset": NAME, **ModelConfig fields}``, ModelConfig fields (with ``"kind"``), ``{"type": "lm" |
      "encoder", "config": ModelConfig dict, "init": None | "xlstm"}`` or ``{"builder": "module:function",
      "args": {...}}`` (``function(task, **args)`` returns the model): :func:`build_model`;
    * ``task``: ``{"name": ..., **task arguments}``; ``train``: TrainConfig fields; ``seed`` (None: ``train.seed``);
      ``eval``: the standard run's evaluations (``sweep/train_run.py``);
    * ``extra``: top-level settings only a custom run function ``fn`` reads (``{"span_bin": 10}``); the standard
      run refuses any;
    * ``fn``: the run function, ``"module:function"``, called as ``function(config, run_dir)`` in a sweep;
    * ``labels``: how the run appears in tables (not hashed).

    A section left None is absent from :attr:`config` (and so from the key): a run configuration holds exactly
    what its run function reads.
    """

    model: dict[str, Any] | None = None
    task: dict[str, Any] | None = None
    train: dict[str, Any] | None = None
    seed: int | None = None
    eval: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    fn: str = TRAIN_RUN
    labels: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        for name in ("model", "task", "train", "eval", "extra", "labels"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, dict):
                raise InputError(f"run section {name!r} must be a table of settings, got {value!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise InputError(f"run seed must be an int, got {self.seed!r}")
        if not isinstance(self.fn, str) or self.fn.count(":") != 1 or not all(self.fn.split(":")):
            raise InputError(f"run fn must be 'module:function', got {self.fn!r}")
        clash = sorted(set(self.extra) & set(FIELDS))
        if clash:
            raise InputError(f"run extra settings {clash} are sections of their own: set them outside 'extra'")
        if self.fn == TRAIN_RUN:
            self._check_standard_run()

    def _check_standard_run(self) -> None:
        """The standard run reads exactly its sections: any other key would be hashed and then ignored."""
        if self.extra:
            raise InputError(
                f"unknown run setting(s) {sorted(self.extra)} for the standard run; expected {', '.join(SECTIONS)}"
            )
        train_fields = {f.name for f in fields(TrainConfig)}
        for section, known in (("train", train_fields), ("eval", set(EVAL_KEYS))):
            unknown = set(getattr(self, section) or {}) - known
            if unknown:
                raise InputError(f"unknown {section} setting(s) {sorted(unknown)}; known: {sorted(known)}")

    @property
    def config(self) -> dict[str, Any]:
        """The flat run configuration: what ``fn`` receives and what the key hashes."""
        parts = {name: getattr(self, name) for name in SECTIONS}
        return {**{k: v for k, v in parts.items() if v is not None}, **self.extra}

    @classmethod
    def of(cls, fn: str, config: dict[str, Any], labels: dict[str, Any] | None = None) -> RunSpec:
        """The spec of a flat run configuration (``config``): its sections, the rest as ``extra``."""
        if not isinstance(config, dict):
            raise InputError(f"a run configuration must be a table of settings, got {config!r}")
        extra = {k: v for k, v in config.items() if k not in SECTIONS}
        return cls(**{k: config[k] for k in SECTIONS if k in config}, extra=extra, fn=fn, labels=dict(labels or {}))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        """From :meth:`to_dict`'s form (a run config file is its ``model`` / ``task`` / ``train`` part); unknown keys
        are refused by name, as ``ModelConfig.from_dict`` does."""
        if not isinstance(d, dict):
            raise InputError(f"a run must be a table of settings, got {d!r}")
        unknown = set(d) - set(FIELDS)
        if unknown:
            raise InputError(f"unknown config section(s) {sorted(unknown)}; expected {', '.join(FIELDS)}")
        return cls(**{k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()})

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``from_dict(to_dict())`` is this spec again; sections left None are left out."""
        out: dict[str, Any] = {"fn": self.fn, "labels": self.labels}
        out.update({k: getattr(self, k) for k in SECTIONS if getattr(self, k) is not None})
        return {**out, **({"extra": self.extra} if self.extra else {})}

    def key(self, code: str | None = None) -> str:
        """12 hex digits: the run's folder name (``train/run_key.py``); ``code`` overrides the code version."""
        return run_key(self.fn, self.config, code)

    def build(self):
        """-> (model, task, TrainConfig): what ``seqzoo train`` trains. The run's ``seed`` (else ``train.seed``)
        seeds torch before the model is built."""
        # the training settings first: they are cheap to check, and a task (a text corpus) can be slow to build
        train = dict(self.train or {})
        if self.seed is not None:
            train["seed"] = self.seed
        train_cfg = TrainConfig.from_dict(train)
        check_can_start(train_cfg)
        task = build_run_task(self.task)
        torch.manual_seed(train_cfg.seed)  # the initial weights are part of the run: same seed, same model
        model = build_model(self.model or {}, task)
        check_context_parallel(train_cfg, model, task)  # before the CLI writes run.json
        return model, task, train_cfg


def build_run_task(section: dict[str, Any] | None):
    """The task of a run's ``task`` section, ``{"name": ..., **arguments}``."""
    task_kwargs = dict(section or {})
    task_name = task_kwargs.pop("name", None)
    if not task_name:
        raise InputError("the run needs a task: task.name (e.g. --task mqar)")
    return build_task(task_name, **task_kwargs)


def build_model(section: dict[str, Any], task):
    """The model of a run's ``model`` section for ``task``, in any of its forms (:class:`RunSpec`). The RNGs must be
    seeded before: the initial weights are part of the run. A preset or bare ModelConfig fields take the task's
    ``vocab_size`` unless they set it; the other forms are complete."""
    for form, allowed in MODEL_FORMS.items():
        if form in section:
            unknown = set(section) - set(allowed)
            if unknown:
                raise InputError(f"model section with {form!r}: unknown key(s) {sorted(unknown)}; expected {allowed}")
    if "builder" in section:
        mod, name = section["builder"].split(":")
        return getattr(importlib.import_module(mod), name)(task, **section.get("args", {}))
    if "config" in section:
        if section.get("init") not in MODEL_INITS:
            raise InputError(f"model init must be one of {MODEL_INITS}, got {section['init']!r}")
        model = MODEL_TYPES[section.get("type", "lm")](ModelConfig.from_dict(section["config"]))
        if section.get("init") == "xlstm":
            from ..models.presets.xlstm import xlstm_init_

            xlstm_init_(model)
        return model
    model_fields = dict(section)
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
    return MODEL_TYPES[kind](config)
