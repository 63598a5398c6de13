"""``seqzoo zoo``: every seed system on a suite of probes at the same width, depth and budget, through the sweep
runner (seqzoo/sweep), then one report folder (``report.md``, self-contained ``report.html``, tables, figures).

Suites and probes are in ``zoo_probes.py``, the models in ``zoo_models.py``, the report in ``zoo_report.py``. Run
folders live under ``<out>/runs/<hash>``: rerunning the same command retrains nothing, changing one setting
retrains only the runs it touches. The text probe needs a corpus (``data=`` / ``$SEQZOO_DATA``); without one it is
skipped and the report says so. ``probe_specs`` (probes × models × seeds -> run specs) is shared with the
experiments built on the zoo's probes and models (``length_gen.py``: ``griffin-copying``, ``xlstm-formal``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..sweep import RunSpec, choose, data_digest, resolve_options, run_sweep
from . import register_experiment
from .data import TEXT, find_data
from .zoo_models import LM_MODELS, ZOO_HEADS, ZOO_MODELS, model_spec
from .zoo_probes import SUITES, Probe

FN = "seqzoo.sweep.train_run:train_run"
OPTIONS: dict[str, Any] = {
    "suite": "quick",
    "models": "",  # default: every zoo model
    "probes": "",  # default: every probe of the suite
    "seeds": "",  # default: the suite's seeds
    "data": "",  # text corpus for the text probe (else $SEQZOO_DATA/tinyshakespeare/input.txt, else skipped)
    "procs": None,  # None: min(2, CPU count); each process runs one thread, so results do not depend on it
    "d_model": None,  # None: the suite's
    "n_layers": None,
    "steps": None,
    "batch_size": None,
    "lr": None,
    "device": None,
    "task": None,  # {"name": ..., **args}: one custom probe instead of the suite's
    "progress": True,
    "collect_only": False,  # train nothing: the report of the runs already finished, the others listed as missing
}


def positive_int(name: str, v: Any) -> int:
    try:
        n = int(v)
    except (TypeError, ValueError):
        n = 0
    if n < 1 or (isinstance(v, float) and not v.is_integer()):
        raise InputError(f"{name} must be a positive int, got {v!r}")
    return n


def build_specs(opts: dict[str, Any]) -> tuple[list[RunSpec], dict[str, Any]]:
    """The grid of the resolved options, and the settings the report shows (including skipped probes)."""
    suite = SUITES[opts["suite"]]
    models = choose([m for m in opts["models"].split(",") if m] or list(ZOO_MODELS), set(ZOO_MODELS), "models")
    probes: list[Probe] = list(suite["probes"])
    if opts["task"]:
        task = dict(opts["task"])
        if "name" not in task:
            raise InputError("task: needs a name, e.g. task={'name': 'mqar', 'num_pairs': 2}")
        probes = [Probe(task["name"], "custom task", task, models=tuple(models))]
    if opts["probes"]:
        names = choose(opts["probes"].split(","), {p.name for p in probes}, "probes")
        probes = [p for p in probes if p.name in names]
    seeds = [int(s) for s in opts["seeds"].split(",") if s] if opts["seeds"] else list(suite["seeds"])
    for k in ("d_model", "n_layers", "steps", "batch_size", "procs"):
        if opts[k] is not None:
            opts[k] = positive_int(k, opts[k])
    if opts["lr"] is not None and not float(opts["lr"]) > 0:
        raise InputError(f"lr must be > 0, got {opts['lr']!r}")
    d_model = opts["d_model"] or suite["d_model"]
    n_layers = opts["n_layers"] or suite["n_layers"]
    budget = dict(suite["train"])
    # options given on the command line win over the suite's and every probe's own budget
    casts = (("steps", int), ("batch_size", int), ("lr", float), ("device", str))
    overrides = {k: cast(opts[k]) for k, cast in casts if opts[k] is not None}
    text = find_data(opts["data"] or None, TEXT)
    heads = suite.get("attention_heads", ZOO_HEADS)
    specs, skipped, probe_info = probe_specs(
        probes, models, seeds, d_model, n_layers, budget, overrides, text, attention_heads=heads
    )
    settings = {
        "suite": opts["suite"],
        "models": models,
        "seeds": seeds,
        "d_model": d_model,
        "n_layers": n_layers,
        "attention_heads": heads,
        "probes": probe_info,
        "skipped": skipped,
        "text": str(text) if text else None,
        "text_sha256": data_digest({"path": str(text)}) if text else None,  # in each text run's key too
    }
    return specs, settings


def probe_specs(
    probes: list[Probe],
    models: list[str],
    seeds: list[int],
    d_model: int,
    n_layers: int,
    budget: dict[str, Any],
    overrides: dict[str, Any] | None = None,
    text: Path | None = None,
    attention_heads: int = ZOO_HEADS,
) -> tuple[list[RunSpec], list[str], list[dict[str, Any]]]:
    """The sweep grid of ``probes`` (every difficulty setting × model × seed) at one width and depth: the zoo's and
    every experiment built on its probes (``length_gen.py``). A probe's training settings are ``budget``, then the
    probe's own ``train``, then ``overrides`` (command-line options win). A probe without its own model list runs
    the LM models among ``models``; ``attention_heads`` is the head count of the attention models (``model_spec``).
    Returns (specs, skipped probes with the reason, per-probe info for reports)."""
    from ..tasks import build_task

    lm_models = [m for m in models if m in LM_MODELS]
    specs, skipped, probe_info = [], [], []
    for p in probes:
        if p.needs_text and text is None:
            skipped.append(f"{p.name}: no text corpus (pass data=PATH or set $SEQZOO_DATA)")
            continue
        train = {**budget, **p.train, **(overrides or {})}
        if train["eval_every"] >= train["steps"]:
            train["eval_every"] = 0
        for value in p.settings():
            task = {**p.task_args(value), **({"path": str(text)} if p.needs_text else {})}
            t = build_task(**task)  # refuses bad task arguments before any run starts
            for m in p.models or lm_models:
                if m not in models:
                    continue
                for seed in seeds:
                    cfg = {
                        "seed": seed,
                        "model": model_spec(m, t.vocab_size, d_model, n_layers, t.seq_len, attention_heads),
                        "task": task,
                        "train": train,
                        **({"eval": p.eval} if p.eval else {}),
                    }
                    labels = {"probe": p.name, "setting": "-" if value is None else f"{p.axis}={value}", "model": m}
                    specs.append(RunSpec.of(FN, cfg, {**labels, "seed": seed}))
        probe_info.append({"probe": p, "train": train, "task": p.task})
    return specs, skipped, probe_info


@register_experiment("zoo", "every seed system on the zoo's probes at one budget; report.md + report.html")
def run_zoo(out_dir: str | Path = "results/zoo", **options: Any) -> dict[str, Any]:
    opts = resolve_options(OPTIONS, options, "zoo")
    choose([opts["suite"]], set(SUITES), "suite")
    specs, settings = build_specs(opts)
    out = Path(out_dir)
    log = print if opts["progress"] else (lambda *_: None)
    procs = opts["procs"] or min(2, os.cpu_count() or 1)
    train = not opts["collect_only"]  # opts hold bools: resolve_options
    records = run_sweep(specs, out, procs=procs, log=log, train=train, progress=opts["progress"])
    from .zoo_report import write_zoo_report

    return write_zoo_report(out, records, settings)
