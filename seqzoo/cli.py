"""``seqzoo`` command line: list | train | eval | generate | zoo | bench | experiment | convert | kernels.

Run ``seqzoo COMMAND --help`` for each command's options; ``-v`` / ``-q`` and ``--version`` are global (cli_options.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from .cli_logging import command_logging
from .cli_options import add_device_option, add_hidden_alias, concrete_device, finish_parsers
from .errors import InputError, TrainingDivergedError, TrainingInterrupted
from .host_memory import apply_malloc_setting
from .outputs import check_output_dir, check_output_file

EPILOG = """examples:
  seqzoo zoo                                     # every seed system on the quick probe suite: report.html
  seqzoo train --model attention-tiny --task mqar --task-arg num_pairs=4 --steps 600 --out runs/mqar
  seqzoo eval --run runs/mqar
  seqzoo generate --run runs/shakespeare --prompt "ROMEO:" --max-new-tokens 200 --temperature 0.8 --top-k 40
  seqzoo bench --mixers attention,local_attention --lengths 256,512,1024,2048 --out results/bench
  seqzoo bench --suite models --out results/bench-models   # whole models per family: tokens/s, memory, decode
  seqzoo list presets
"""


def _kv(items: list[str] | None, what: str) -> dict[str, Any]:
    from .train.spec import parse_assignments

    return parse_assignments(items, what)


class TrainOption(NamedTuple):
    """One ``seqzoo train`` flag that sets the TrainConfig field of its name (``--batch-size`` -> ``batch_size``)."""

    flag: str
    text: str  # the help; "(default: ...)" is added: the --config file's value, else TrainConfig's
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None

    @property
    def field(self) -> str:
        return self.flag[2:].replace("-", "_")


# the trainer's options that take a value; --device is the shared option of every subcommand (cli_options.py)
TRAIN_OPTIONS = (
    TrainOption("--steps", "optimiser steps", int),
    TrainOption("--batch-size", "sequences per optimiser step, over all ranks and --grad-accum micro-batches", int),
    TrainOption("--grad-accum", "micro-batches per optimiser step (--batch-size must be divisible by it)", int),
    TrainOption("--lr", "peak learning rate (AdamW; linear warm-up, then cosine decay)", float),
    TrainOption("--warmup-steps", "steps of linear learning-rate warm-up", int),
    TrainOption("--eval-every", "validate every N steps (0: only at the end)", int),
    TrainOption("--ckpt-every", "checkpoint every N steps (0: only at the end)", int),
    TrainOption("--seed", "seed of the initialisation and the data order", int),
    TrainOption("--precision", "auto: bf16 autocast where supported, else fp32", choices=("auto", "fp32", "bf16")),
    TrainOption("--distributed", "auto: DDP when launched by torchrun", choices=("auto", "none", "ddp", "fsdp")),
    TrainOption(
        "--context-parallel",
        "split each sequence along time over N ranks (under torchrun; world size = data x N; docs/context-parallel.md)",
        int,
        metavar="N",
    ),
)


def add_train_options(parser: argparse.ArgumentParser) -> None:
    """``TRAIN_OPTIONS`` and the shared ``--device`` on ``parser``, each saying what leaving it out means."""
    for option in TRAIN_OPTIONS:
        settings = {"type": option.type, "choices": option.choices, "metavar": option.metavar}
        given = {k: v for k, v in settings.items() if v is not None}
        parser.add_argument(option.flag, **given, help=f"{option.text} (default: {_train_default(option.flag)})")
    add_device_option(parser, None, _train_default("--device"))


def _train_default(flag: str) -> str:
    """What a train flag left out means: the --config file's value, else TrainConfig's default."""
    from .train.config import TrainConfig

    return f"the config file's, else {getattr(TrainConfig, flag[2:].replace('-', '_'))}"


# --------------------------------------------------------------------------- list
def cmd_list(args) -> int:
    from .experiments import EXPERIMENTS
    from .mixers import MIXERS
    from .models import PRESETS
    from .tasks import TASKS

    what = args.what
    if what in ("all", "mixers"):
        print("mixers:")
        for name, cls in sorted(MIXERS.items()):
            print(f"  {name:18s} modes={','.join(cls.modes):32s} causal={cls.causal}")
    if what in ("all", "presets"):
        print("presets:")
        for name, p in sorted(PRESETS.items()):
            print(f"  {name:26s} [{p.family}, {p.kind}] {p.description}")
    if what in ("all", "families"):
        print_families()
    if what in ("all", "tasks"):
        print("tasks:")
        for name, cls in sorted(TASKS.items()):
            doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
            print(f"  {name:18s} {doc[0] if doc else ''}")
    if what in ("all", "experiments"):
        print("experiments:")
        for name, e in sorted(EXPERIMENTS.items()):
            print(f"  {name:26s} {e.description}")
    return 0


def print_families() -> None:
    """The names ``zoo --families`` and ``bench --suite models --families`` take (a preset is one sized model of a
    family: ``train --model``)."""
    from .bench.models import FAMILIES as BENCH_FAMILIES
    from .experiments.zoo_models import DESCRIPTIONS, ZOO_MODELS

    print("families (seqzoo zoo --families):")
    for name in ZOO_MODELS:
        print(f"  {name:18s} {DESCRIPTIONS.get(name, '')}")
    print("model families (seqzoo bench --suite models --families):")
    for name, title in BENCH_FAMILIES.items():
        print(f"  {name:18s} {title}")


# -------------------------------------------------------------------------- train
def build_run_spec(args) -> dict[str, Any]:
    from .overrides import deep_merge
    from .train.spec import apply_dotted, load_config_file

    spec: dict[str, Any] = load_config_file(args.config) if args.config else {}
    spec = {k: dict(spec.get(k, {})) for k in ("model", "task", "train")}
    if args.model:
        spec["model"]["preset"] = args.model
    spec["model"] = deep_merge(spec["model"], _kv(args.model_arg, "--model-arg"))
    if args.task:
        spec["task"]["name"] = args.task
    spec["task"] = deep_merge(spec["task"], _kv(args.task_arg, "--task-arg"))
    for flag in (*(option.field for option in TRAIN_OPTIONS), "device"):
        value = getattr(args, flag, None)
        if value is not None:
            spec["train"][flag] = value
    if args.out:
        spec["train"]["out_dir"] = args.out
    if args.no_progress:
        spec["train"]["progress"] = False
    if args.no_resume:
        spec["train"]["resume"] = False
    if getattr(args, "compile", False):
        spec["train"]["compile"] = True
    if getattr(args, "tensorboard", False):
        spec["train"]["tensorboard"] = True
    return apply_dotted(spec, _kv(args.set, "--set"))


def cmd_train(args) -> int:
    from .train import train
    from .train.checkpoint import CHECKPOINT_NAME
    from .train.distributed import world
    from .train.loop import check_resume
    from .train.spec import RunSpec

    spec = build_run_spec(args)
    spec["train"].setdefault("out_dir", "runs/latest")
    model, task, cfg = RunSpec.from_dict(spec).build()
    rank, _ = world()
    if rank == 0:
        print(
            f"model: {model.config.layer_mixers()} d_model={model.config.d_model} "
            f"params={model.num_parameters():,} | task: {task.describe()} | out: {cfg.out_dir}",
            flush=True,
        )
        if cfg.resume and (Path(cfg.out_dir) / CHECKPOINT_NAME).exists():
            check_resume(Path(cfg.out_dir), cfg, task, model)  # refuse another run's folder before writing to it
        Path(cfg.out_dir).mkdir(parents=True, exist_ok=True)
        (Path(cfg.out_dir) / "run.json").write_text(json.dumps(spec, indent=2, default=str) + "\n")
    result = train(model, task, cfg)
    if rank == 0:
        print(json.dumps(result, indent=2))
    return 0


# --------------------------------------------------------------------------- eval
def _load_run(run: str | None, model_dir: str | None):
    from .models.base import SeqzooModel

    if run is None and model_dir is None:
        raise InputError("pass --run DIR (a training output folder) or --model-dir DIR (a save_pretrained folder)")
    mdir = Path(model_dir) if model_dir else Path(run) / "model"
    model = SeqzooModel.from_pretrained(mdir)
    task_spec = None
    for cand in ([Path(run) / "task.json"] if run else []) + [mdir / "task.json", mdir.parent / "task.json"]:
        if cand.is_file():
            task_spec = json.loads(cand.read_text())
            break
    return model, task_spec


def cmd_eval(args) -> int:
    for flag, value in (("--samples", args.samples), ("--batch-size", args.batch_size)):
        if value < 1:
            raise InputError(f"{flag} must be >= 1, got {value}")
    if args.out:  # before the model is loaded and evaluated, not after
        check_output_file(args.out, "--out")
    from .eval import evaluate
    from .tasks import build_task

    model, task_spec = _load_run(args.run, args.model_dir)
    if args.task:
        task_spec = {"name": args.task}
    if task_spec is None:
        raise InputError("no task.json beside the model: pass --task NAME (and --task-arg k=v)")
    task_spec = {**task_spec, **_kv(args.task_arg, "--task-arg")}
    name = task_spec.pop("name")
    task_spec.pop("train_size", None) if name != "mqar" else None
    task = build_task(name, **task_spec)
    inputs, targets, segment_pos = task.build_batch(args.samples, args.seed, args.split)  # packed documents
    kind = getattr(task, "kind", "lm")
    m = evaluate(model, inputs, targets, batch_size=args.batch_size, kind=kind, segment_pos=segment_pos)
    out = {"task": task.describe(), "split": args.split, "samples": args.samples, **m}
    print(json.dumps(out, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


# ----------------------------------------------------------------------- generate
def cmd_generate(args) -> int:
    from .models.sampling import check_sampling

    check_sampling(args.temperature, args.top_k, args.top_p)
    if args.temperature == 0 and (args.top_k is not None or args.top_p is not None):
        raise InputError("--top-k / --top-p only apply when sampling: pass --temperature > 0 with them")
    if args.max_new_tokens < 1:
        raise InputError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    import torch

    from .tasks.tokenizers import make_tokenizer

    model, task_spec = _load_run(args.run, args.model_dir)
    tok = None
    if args.ids is None:
        spec = task_spec or {}
        if spec.get("name") != "text" and args.tokenizer is None:
            raise InputError("this model was not trained on text: pass --ids 1,2,3 or --tokenizer byte|gpt2")
        tok = make_tokenizer(args.tokenizer or spec.get("tokenizer", "byte"), args.bpe_dir or spec.get("bpe_dir"))
        ids = tok.encode(args.prompt)
    else:
        try:
            ids = [int(i) for i in args.ids.split(",") if i.strip()]
        except ValueError:
            raise InputError(f"--ids must be comma-separated token ids (ints), got {args.ids!r}") from None
    if not ids:
        raise InputError("the prompt is empty: pass --prompt TEXT or --ids 1,2,3")
    g = torch.Generator().manual_seed(args.seed)
    out = model.generate(
        torch.tensor([ids]),
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        do_sample=args.temperature > 0,
        generator=g,
    )
    new = out[0, len(ids) :].tolist()
    print(tok.decode(ids + new) if tok else " ".join(map(str, ids + new)))
    return 0


# ---------------------------------------------------------------------------- zoo
def cmd_zoo(args) -> int:
    from .experiments.zoo import run_zoo

    check_output_dir(args.out, "--out")
    task = None
    if args.task or args.task_arg:
        task = {"name": args.task or "mqar", **_kv(args.task_arg, "--task-arg")}
    res = run_zoo(
        out_dir=args.out,
        suite=args.suite,
        models=args.families or "",
        probes=args.probes or "",
        seeds=args.seeds or "",
        data=args.data or "",
        procs=args.procs,
        d_model=args.d_model,
        n_layers=args.n_layers,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        device=args.device,
        task=task,
        progress=not args.no_progress,
        collect_only=args.collect_only,
    )
    print()
    print(res["table"])
    print(f"\nreport: {res['report']} (and report.md, summary.csv/json/md, figures/)")
    return 0 if not res["errors"] else 1


# -------------------------------------------------------------------------- bench
BENCH_OUT = {
    "mixers": "results/bench",
    "models": "results/bench-models",
    "decode": "results/bench-decode",
    "official": "results/bench-official",
}


def check_bench_options(args) -> None:
    """The numbers every suite (or the mixers suite) reads, refused before anything is measured."""
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise InputError(f"--timeout must be a finite number of seconds > 0, got {args.timeout}")
    if args.threads is not None and args.threads < 1:
        raise InputError(f"--threads must be >= 1, got {args.threads}")
    if args.suite == "mixers":
        for flag, value in (("--d-model", args.d_model), ("--batch-size", args.batch_size)):
            if value < 1:
                raise InputError(f"{flag} must be >= 1, got {value}")
        if args.mixer_kwargs:
            try:
                kwargs = json.loads(args.mixer_kwargs)
            except json.JSONDecodeError as e:
                raise InputError(f'--mixer-kwargs must be JSON, {{"mixer": {{kwarg: value}}}}: {e}') from None
            if not isinstance(kwargs, dict) or not all(isinstance(v, dict) for v in kwargs.values()):
                raise InputError(f"--mixer-kwargs must map mixer names to objects of arguments, got {kwargs!r}")


def cmd_bench(args) -> int:
    out = args.out or BENCH_OUT[args.suite]
    check_bench_options(args)
    args.device = concrete_device(args.device)  # the suites take a real device; auto means this machine's
    check_output_dir(out, "--out")  # before anything is measured
    if args.suite == "official":
        from .bench.official import run_from_args as run_official

        args.out = out
        rows = run_official(args)
        return 0 if all(r["status"] in ("measured", "not importable") for r in rows) else 1
    if args.suite in ("models", "decode"):
        from .bench.models import run_from_args

        args.out = out
        args.threads = 1 if args.threads is None else args.threads
        rows = run_from_args(args, train=args.suite == "models", decode=True)
        return 0 if all("error" not in r for r in rows) else 1
    from .bench import format_table, run_mixer_bench
    from .bench.models import _check_lengths

    lengths = _check_lengths((args.lengths or "256,512,1024,2048").split(","), "--lengths")
    modes: Any = args.modes if args.modes in ("default", "all") else args.modes.split(",")
    rows = run_mixer_bench(
        mixers=args.mixers.split(","),
        lengths=lengths,
        modes=modes,
        d_model=args.d_model,
        batch=args.batch_size,
        baseline=args.baseline or None,
        device=args.device,
        dtype=args.dtype,
        backward=not args.no_backward,
        timeout=args.timeout,
        threads=args.threads,
        mixer_kwargs=json.loads(args.mixer_kwargs) if args.mixer_kwargs else None,
        out_dir=out,
        progress=not args.no_progress,
        doc_length=args.doc_length,
    )
    print(format_table(rows))
    print(f"\nresults: {out}/bench.csv, bench.json, bench.png")
    return 0


# --------------------------------------------------------------------- experiment
def cmd_experiment(args) -> int:
    from .experiments import get_experiment

    exp = get_experiment(args.name)
    out = args.out or f"results/{exp.name}"
    check_output_dir(out, "--out")
    from .sweep.runner import progress_bars

    with progress_bars(not args.no_progress):
        res = exp.run(out_dir=out, **_kv(args.set, "--set"))
    print(res.get("table", json.dumps(res, indent=2, default=str)) if isinstance(res, dict) else res)
    print(f"\nresults written to {out}")
    return 0


# --------------------------------------------------------------------------- main
def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="seqzoo",
        description="Train, compare, benchmark and serve efficient long-sequence "
        "models (GateLoop, Orchid, RMT, xLSTM, Griffin/Hawk, attention).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser(
        "list",
        help="list mixers, presets, families, tasks and experiments",
        description="List what is registered: mixers with their modes and causality, model presets "
        "(family, kind, size; `train --model`), the families that `zoo --families` and `bench --suite models "
        "--families` take, tasks and experiments. Families register themselves on import.",
    )
    s.add_argument(
        "what",
        nargs="?",
        default="all",
        choices=["all", "mixers", "presets", "families", "tasks", "experiments"],
        help="which registry to print (default: all)",
    )
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser(
        "train",
        help="train a model on a task (config file and/or flags)",
        description="Train a model. Settings come from --config (JSON/TOML with model/task/train "
        "sections), then flags, then --set section.key=value. Resumes from OUT/checkpoint.pt if present. "
        "Multi-process: torchrun --nproc-per-node N -m seqzoo train ...",
    )
    s.add_argument("--config", help="JSON or TOML file with [model], [task], [train] sections (default: none)")
    s.add_argument("--model", help="preset name, see `seqzoo list presets` (default: the config file's)")
    s.add_argument(
        "--model-arg",
        action="append",
        metavar="K=V",
        help="ModelConfig override of the preset, repeatable (default: none)",
    )
    s.add_argument("--task", help="task name, see `seqzoo list tasks` (default: the config file's)")
    s.add_argument("--task-arg", action="append", metavar="K=V", help="task argument, repeatable (default: none)")
    add_train_options(s)
    s.add_argument("--out", help="output folder (default: the config file's, else runs/latest)")
    s.add_argument(
        "--set",
        action="append",
        metavar="SECTION.KEY=V",
        help="any override, e.g. train.grad_clip=0.5, applied last (default: none)",
    )
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument(
        "--compile",
        action="store_true",
        help="run the training forward through torch.compile (optional; compiles in the first step; measured "
        "gains in docs/benchmarks.md)",
    )
    s.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write the logged metrics as TensorBoard scalars into OUT/tensorboard/ (needs: pip install tensorboard)",
    )
    s.add_argument(
        "--no-resume",
        "--overwrite",
        dest="no_resume",
        action="store_true",
        help="start fresh even if OUT/checkpoint.pt exists (its files are replaced); without it a run resumes only "
        "when the folder holds the same model, task and training settings",
    )
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser("eval", help="evaluate a trained model (loss and accuracy on held-out samples)")
    s.add_argument("--run", help="training output folder, holds model/ and task.json (default: none; or --model-dir)")
    s.add_argument("--model-dir", help="a save_pretrained folder (default: RUN/model)")
    s.add_argument("--task", help="task name (default: the run's task)")
    s.add_argument(
        "--task-arg", action="append", metavar="K=V", help="task argument over the run's, repeatable (default: none)"
    )
    s.add_argument("--split", default="test", choices=["train", "valid", "test"], help="which samples of the task")
    s.add_argument("--samples", type=int, default=1024, help="sequences evaluated")
    s.add_argument("--batch-size", type=int, default=64, help="sequences per forward pass")
    s.add_argument("--seed", type=int, default=0, help="seed of the sampled sequences")
    s.add_argument("--out", help="also write the metrics to this JSON file (default: print only)")
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser("generate", help="generate tokens from a trained model with carried states")
    s.add_argument("--run", help="training output folder (default: none; or --model-dir)")
    s.add_argument("--model-dir", help="a save_pretrained folder (default: RUN/model)")
    s.add_argument("--prompt", default="\n", help="text prompt of a text model (default: a newline)")
    s.add_argument("--ids", help="comma-separated token ids instead of a text prompt (default: none)")
    s.add_argument("--tokenizer", choices=["byte", "gpt2"], help="tokenizer of --prompt (default: the run's)")
    s.add_argument("--bpe-dir", help="folder with GPT-2 encoder.json and vocab.bpe (default: the run's)")
    s.add_argument("--max-new-tokens", type=int, default=100, help="tokens generated after the prompt")
    s.add_argument("--temperature", type=float, default=0.0, help="sampling temperature, 0 = greedy")
    s.add_argument("--top-k", type=int, help="sample from the k most likely tokens (default: all)")
    s.add_argument("--top-p", type=float, help="sample from the smallest set of mass p (default: 1, all)")
    s.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    s.set_defaults(fn=cmd_generate)

    s = sub.add_parser(
        "zoo",
        help="every seed system on a suite of probes at one budget; report.md + report.html",
        description="Train every zoo model (attention, local attention, GateLoop, mLSTM, sLSTM, xLSTM, Hawk, "
        "Griffin; RMT and Orchid on their own probes) on the suite's probes (MQAR at growing pairs, Memory "
        "Horizon, parity and induction heads scored at longer lengths, byte-level text with loss per position) "
        "with the same width, depth and budget, through the sweep runner: runs are folders named by a "
        "hash of their configuration under --out/runs, so a rerun retrains only what changed. Writes report.md, "
        "a self-contained report.html, summary/results tables (csv, json, md) and figures/ to --out.",
    )
    s.add_argument(
        "--suite",
        default="quick",
        choices=["quick", "full"],
        help="quick (default: 2 seeds, small budgets) | full (2 seeds, longer budgets)",
    )
    families = s.add_argument(
        "--families", help="comma-separated zoo families, see `seqzoo list families` (default: all of the suite's)"
    )
    add_hidden_alias(s, "--models", "--mixers", of=families)  # their names before --families
    s.add_argument("--probes", help="comma-separated probes of the suite (default: all)")
    seeds = s.add_argument("--seeds", help="comma-separated seeds (default: the suite's)")
    add_hidden_alias(s, "--seed", of=seeds)
    s.add_argument(
        "--data",
        help="text corpus for the text probe (default: $SEQZOO_DATA/tinyshakespeare/input.txt; "
        "without either the text probe is skipped)",
    )
    s.add_argument(
        "--procs", type=int, default=None, help="parallel processes, one thread each (default: min(2, CPU count))"
    )
    s.add_argument(
        "--task", help="one custom task instead of the suite's probes, see `seqzoo list tasks` (default: none)"
    )
    s.add_argument(
        "--task-arg", action="append", metavar="K=V", help="argument of --task, repeatable (default: none; mqar)"
    )
    s.add_argument("--d-model", type=int, help="width (default: the suite's)")
    s.add_argument("--n-layers", type=int, help="depth (default: the suite's)")
    s.add_argument("--steps", type=int, help="training steps per run (default: the suite's)")
    s.add_argument("--batch-size", type=int, help="sequences per optimiser step (default: the suite's)")
    s.add_argument("--lr", type=float, help="peak learning rate (default: the suite's)")
    add_device_option(s, None, "the suite's, cpu")
    s.add_argument("--out", default="results/zoo", help="output folder (runs/ and the report)")
    s.add_argument("--no-progress", action="store_true", help="no progress bars and no per-run lines")
    s.add_argument(
        "--collect-only",
        action="store_true",
        help="train nothing: write the report from the runs already finished under --out and list the rest",
    )
    s.set_defaults(fn=cmd_zoo)

    s = sub.add_parser(
        "bench",
        help="benchmarks vs sequence length, as ratios to attention (or the official packages) in the same run",
        description="Four suites; every figure is also a ratio to a baseline measured in the same run (attention;\n"
        "the official package for 'official').\n"
        "  mixers (default): forward and forward+backward time and peak memory of mixers (and their\n"
        "      modes) vs sequence length -> bench.csv, bench.json, bench.png\n"
        "  models: whole models of each family (SDPA transformer, GateLoop, xLSTM[1:0], xLSTM[7:1],\n"
        "      Hawk, Griffin): training tokens/s and peak memory vs context length at a fixed token\n"
        "      budget per step (forward + backward + the trainer's AdamW), then decode ms/token and\n"
        "      carried-state size vs context -> models.csv, models.json, config.json, models.png\n"
        "  decode: the decode points of 'models' only\n"
        "  official: sLSTM layer, RG-LRU block and mLSTM chunkwise cell forward+backward against the\n"
        "      official packages' CPU paths (xlstm vanilla, recurrentgemma torch, mlstm_kernels native),\n"
        "      same weights, outputs checked first, min of interleaved runs, ratio official / ours\n"
        "      -> official.json, official.csv, official.md (a package that does not import: a row with the reason)\n"
        "On CPU every mixers/models point runs in a fresh process (its own peak memory; a timeout is recorded\n"
        "as an error); on CUDA points run in-process (max_memory_allocated, CUDA events, bf16 autocast).\n"
        "The official suite runs on CPU in one process.",
        epilog="examples:\n"
        "  seqzoo bench --mixers attention,local_attention --lengths 256,512,1024,2048\n"
        "  seqzoo bench --suite models                          # CPU: small models, T 128..1024\n"
        "  seqzoo bench --suite models --device cuda            # GPU: ~125M models, T 2k..16k\n"
        "  seqzoo bench --suite decode --families hawk,griffin --decode-lengths 1024,4096,16384\n"
        "  seqzoo bench --suite official --out results/bench-official   # T 2048, 1 thread, 5 repeats",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s.add_argument(
        "--suite",
        default="mixers",
        choices=["mixers", "models", "decode", "official"],
        help="what to measure (default: mixers)",
    )
    s.add_argument(
        "--lengths",
        help="comma-separated sequence lengths (default: 256,512,1024,2048 for mixers; "
        "models: 128,256,512,1024 at --size small, 1024,4096 at --size 10m, 2048,4096,8192,16384 at --size 125m; "
        "official: 2048)",
    )
    add_device_option(s, "cpu", note="models on CUDA: bf16 autocast; official: cpu only")
    s.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads per measurement (default: 1 for models, decode and official; torch's for mixers)",
    )
    s.add_argument("--timeout", type=float, default=300.0, help="seconds per point before it is recorded as a timeout")
    s.add_argument("--out", help="output folder (default: results/bench, results/bench-models, -decode, -official)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = s.add_argument_group("mixers suite")
    g.add_argument("--mixers", default="attention,local_attention", help="comma-separated mixer names")
    g.add_argument(
        "--modes", default="default", help="'default' (each mixer's default mode), 'all', or comma-separated mode names"
    )
    g.add_argument("--d-model", type=int, default=64, help="width of each mixer")
    batch_size = g.add_argument("--batch-size", type=int, default=1, help="sequences per measured call")
    add_hidden_alias(g, "--batch", of=batch_size)  # its name before --batch-size
    g.add_argument("--mixer-kwargs", help='JSON: {"mixer": {kwarg: value}} (default: each mixer\'s own)')
    g.add_argument("--baseline", default="attention", help="mixer the ratios refer to ('' for none)")
    g.add_argument(
        "--dtype", default="float32", choices=["float32", "float64", "bfloat16", "float16"], help="input dtype"
    )
    g.add_argument("--no-backward", action="store_true", help="forward only")
    from .bench.models import DOC_LENGTH_HELP

    s.add_argument("--doc-length", type=int, help=f"mixers and models suites: {DOC_LENGTH_HELP} (default: none)")
    from .bench.models import add_arguments

    add_arguments(s.add_argument_group("models and decode suites"))
    from .bench.official import add_arguments as add_official_arguments

    add_official_arguments(s.add_argument_group("official suite"))
    s.set_defaults(fn=cmd_bench)

    s = sub.add_parser(
        "experiment",
        help="run a registered experiment (see `seqzoo list experiments`)",
        description="Run one registered experiment end to end; it writes its config, metrics files "
        "and plots under --out. Options reach the experiment as --set key=value (JSON values).",
    )
    s.add_argument("name", help="experiment name (see `seqzoo list experiments`)")
    s.add_argument("--out", help="output folder (default: results/NAME)")
    s.add_argument(
        "--set", action="append", metavar="K=V", help="experiment option, repeatable (default: the experiment's)"
    )
    s.add_argument("--no-progress", action="store_true", help="no progress bar over the experiment's runs")
    s.set_defaults(fn=cmd_experiment)
    from .convert.cli import add_parser as add_convert_parser

    add_convert_parser(sub)
    from .bench.aot_cli import add_parser as add_kernels_parser

    add_kernels_parser(sub)
    from . import __version__

    return finish_parsers(p, __version__)


def main(argv: list[str] | None = None) -> int:
    try:
        args = make_parser().parse_args(argv)  # imports the subcommands' modules: seconds on a busy machine
    except KeyboardInterrupt:
        print("seqzoo: interrupted", file=sys.stderr)
        return 130
    verbosity = getattr(args, "verbosity", 0)  # -v: 1, -q: -1 (a namespace made by a caller may lack it)
    if verbosity < 0 and hasattr(args, "no_progress"):
        args.no_progress = True  # -q: the command's own --no-progress
    try:
        apply_malloc_setting()  # CPU training steps reuse their freed activations' pages (host_memory.py)
        with command_logging(verbosity):
            return args.fn(args)
    except InputError as e:  # refused input: one line, exit 2; any other exception is a bug and keeps its traceback
        print(f"seqzoo {args.command}: error: {e}", file=sys.stderr)
        return 2
    except TrainingDivergedError as e:  # valid input, failed optimisation: one line, exit 3, last checkpoint kept
        print(f"seqzoo {args.command}: training diverged: {e}", file=sys.stderr)
        return 3
    except TrainingInterrupted as e:  # SIGINT/SIGTERM in training: the last whole step is saved; 128 + the signal
        print(f"seqzoo {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:  # Ctrl-C elsewhere: the user's request, not a bug, so no traceback
        print(f"seqzoo {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
