"""Recurrent Memory Transformer experiments (Bulatov et al., arXiv:2207.06881, arXiv:2304.11062), CPU-sized.

* ``rmt-memory``: a memory task with RMT vs the same backbone with zero memory tokens (does memory carry
  the fact across segments?).
* ``rmt-curriculum``: the protocol of arXiv:2304.11062 Fig. 11 at CPU scale: ``memorize`` (the fact always in
  the first segment), a backbone pre-trained on text (masked-LM on the task's training book text,
  rmt_pretrain.py) fine-tuned at a low learning rate; naive training at N segments vs a curriculum 1 -> N (fixed
  per stage, or mixing all previous lengths), evaluated at 1 ... 16 segments (more than trained).
* ``rmt-resources``: the AAAI appendix Fig. 10 setting at CPU scale: peak memory and time per training /
  validation iteration vs input length for RMT (two segment sizes) and full attention on the whole input
  (a measurement, not a training sweep: every point runs in a fresh process).

``rmt-memory`` and ``rmt-curriculum`` train through the sweep runner (seqzoo/sweep): one folder per run under
``runs/<hash of the whole configuration>`` (task, model, curriculum, optimiser, evaluation, seed, code version),
so an unchanged rerun trains nothing and a changed setting trains only the runs it changes. The runner has no
dependencies: ``rmt-curriculum`` runs its pre-training sweep (one run) first and puts that run's key into every
curriculum run's configuration (``model.pretrained``), so a changed pre-training retrains them; they load the
encoder from ``runs/<key>/backbone`` in the same output folder. The curriculum (and pre-training) trainers keep no
checkpoint, so a run cut before its end starts again from step 0. The bAbI / noise data come from
``data_dir=`` or ``$SEQZOO_DATA`` (a folder holding ``babi/``, ``gutenberg-nltk/``, ``gpt2-bpe/``).

Each writes ``config.json``, ``results.{json,csv,md}`` and a PNG plot into the output folder.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..sweep import RunSpec, choose
from . import register_experiment
from ._runs import as_ints, as_list, run_specs, write_rows
from .data import ENV, find_data
from .launcher import Axis, GridExperiment, Settings, register_grid

RUN = "seqzoo.experiments.rmt:rmt_run"


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _data_root(data_dir: str | None) -> str:
    """The data folder (``data_dir=`` or ``$SEQZOO_DATA``); an :class:`InputError` says how to give one."""
    root = find_data(data_dir, "")
    if root is None:
        raise InputError(f"data_dir= is needed (a folder holding babi/, gutenberg-nltk/, gpt2-bpe/), or set ${ENV}")
    return str(root.resolve())


def _task(cfg: dict[str, Any]):
    from ..tasks.babi import BabiMemory

    return BabiMemory(**cfg)


def _model(vocab_size: int, m: int, L: int, kind: str = "rmt-tiny", **rmt):
    from ..models.presets.rmt import build_rmt

    return build_rmt(kind, vocab_size=vocab_size, rmt_overrides={"num_mem_tokens": m, "segment_size": L, **rmt})


def _pretrained_model(pre_run: Path, task, spec: dict[str, Any], **rmt):
    """RMT around the encoder saved by the pre-training run ``pre_run``; memory, [CLS] and head start random
    (from the run's seed, which is set before this call)."""
    from ..models.base import MODEL_TYPES
    from ..models.presets import PRESETS
    from ..models.presets.rmt import RMT_DEFAULTS
    from ..models.rmt import RMT, RMTConfig
    from .rmt_pretrain import BACKBONE_DIR

    path = pre_run / BACKBONE_DIR
    if not (pre_run / "done.json").is_file():
        raise InputError(f"pre-trained backbone {path} is missing: its pre-training run has not finished")
    enc = MODEL_TYPES[PRESETS[spec["preset"]].kind].from_pretrained(path)
    if enc.config.vocab_size != task.vocab_size + 1:  # the task's compact vocabulary + [MASK]
        raise InputError(
            f"pre-trained backbone {path} has vocab_size {enc.config.vocab_size}; this task needs {task.vocab_size + 1}"
        )
    over = {"num_mem_tokens": spec["num_mem_tokens"], "segment_size": task.segment_size, **rmt}
    return RMT(enc, RMTConfig(**{**RMT_DEFAULTS[spec["preset"]], **over}))


def rmt_run(config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Sweep run function: build the bAbI task, seed, build the RMT (``config["model"]``), train it with
    ``train_curriculum`` (``config["curriculum"]``, ``config["optim"]``), then score the test split at each
    number of segments in ``config["eval"]["segments"]`` with the no-memory ceiling there."""
    from ..sweep import seed_everything
    from ..train.curriculum import Curriculum, OptimConfig, evaluate_segments, train_curriculum

    task = _task(config["task"])
    seed = int(config["seed"])
    seed_everything(seed)  # before the model is built: its initialisation depends on the seed only
    spec = config["model"]
    extra = {"pool": spec["pool"]} if spec.get("pool") else {}
    if spec.get("pretrained"):  # the key of a pre-training run in the same sweep folder (rmt_pretrain.py)
        model = _pretrained_model(Path(run_dir).parent / spec["pretrained"], task, spec, **extra)
    else:
        model = _model(task.vocab_size, spec["num_mem_tokens"], task.segment_size, kind=spec["preset"], **extra)
    cur = Curriculum(**config["curriculum"])
    opt = config["optim"]
    res = train_curriculum(
        model,
        task,
        cur,
        OptimConfig(lr=opt["lr"], batch_size=opt["batch_size"], warmup_steps=opt["warmup_steps"]),
        eval_every=int(config["eval_every"]),
        eval_samples=int(config["valid_samples"]),
        seed=seed,
        out_dir=Path(run_dir) / "train",
    )
    ev = config["eval"]
    by_segments = []
    for n in ev["segments"]:
        m = evaluate_segments(model, task, int(n), int(ev["samples"]), seed, "test")
        t = task.with_segments(int(n))
        ceiling = t.no_memory_ceiling(t.build_samples(int(ev["samples"]), seed, "test"))
        by_segments.append([int(n), m["accuracy"], m["loss"], round(ceiling, 4)])
    log = Path(run_dir) / "train" / "curriculum.jsonl"
    recs = [json.loads(line) for line in log.read_text().splitlines() if line] if log.is_file() else []
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "steps": res["total_steps"],
        "train_s": res["time_s"],
        "stage_steps": ";".join(f"{s['stage']}:{s['steps']}" for s in res["stages"]),
        "by_segments": by_segments,
        "curve": [[r["global_step"], r["loss"]] for r in recs if r["split"] == "train"],
        "valid_curve": [[r["global_step"], r["loss"], r["accuracy"]] for r in recs if r["split"] == "valid"],
    }


def _task_config(task: str, n_segments: int, segment_size: int, head: str, tokenizer: str, data_dir, cache_dir):
    cfg = {
        "task": task,
        "n_segments": int(n_segments),
        "segment_size": int(segment_size),
        "head": head,
        "tokenizer": tokenizer,
        "data_dir": _data_root(data_dir),
    }
    if cache_dir:  # where tokenised noise is cached; not a setting of the computation, but harmless in the hash
        cfg["cache_dir"] = str(cache_dir)
    try:  # refuse a bad setting here, by name, not once per run inside the sweep
        _task(cfg).build_samples(32, 0, "train")  # a sample that does not fit its segment is refused here
    except (ValueError, FileNotFoundError) as e:
        raise InputError(f"bAbI memory task: {e}") from None
    return cfg


def _memory_settings(opts: dict[str, Any]) -> Settings:
    """``head="class"``: encoder RMT (rmt-tiny) with a 6-way head; ``head="generate"``: causal read/write RMT
    (rmt-tiny-decoder) generating the answer, scored by exact match of the answer tokens and eos. Naive training
    (every segment from the start), evaluated at the training length."""
    from ..train.curriculum import Curriculum

    head = choose([opts["head"]], {"class", "generate"}, "head")[0]
    backbone = "rmt-tiny" if head == "class" else "rmt-tiny-decoder"
    n, steps = opts["n_segments"], opts["steps"]
    task_cfg = _task_config(
        opts["task"], n, opts["segment_size"], head, opts["tokenizer"], opts["data_dir"], opts["cache_dir"]
    )
    base = {
        "task": task_cfg,
        "curriculum": asdict(Curriculum.naive(n, steps)),
        "optim": {"lr": opts["lr"], "batch_size": opts["batch_size"], "warmup_steps": min(100, steps // 5)},
        "eval_every": max(50, steps // 4),
        "valid_samples": 200,
        "eval": {"segments": [n], "samples": opts["eval_samples"]},
    }
    pool = {"pool": "cls"} if head == "class" else {}
    mems = {m: {"model": {"preset": backbone, "num_mem_tokens": m, **pool}} for m in as_ints(opts["mem_sizes"])}
    info = {**base, "mem_sizes": list(mems), "seeds": as_ints(opts["seeds"])}
    return Settings(base=base, points={"num_mem_tokens": mems}, info=info, shared={"backbone": backbone})


def _memory_report(out: Path, opts: dict[str, Any], settings: Settings, records: list, rows: list) -> dict[str, Any]:
    """Accuracy against the number of memory tokens, one line per seed, beside the no-memory ceiling."""
    from ..plots import plot_lines

    seeds = sorted({r["seed"] for r in rows})
    series = {
        f"seed {s}": ([r["num_mem_tokens"] for r in rows if r["seed"] == s], [r["test_accuracy"] for r in rows if r["seed"] == s])
        for s in seeds
    }  # fmt: skip
    series["no-memory ceiling"] = ([r["num_mem_tokens"] for r in rows], [r["no_memory_ceiling"] for r in rows])
    title = f"RMT {opts['task']} ({settings.shared['backbone']}), N={opts['n_segments']}, L={opts['segment_size']}"
    plot_lines(series, out / "accuracy.png", xlabel="memory tokens m", ylabel="test accuracy", title=title)
    return {"results": rows}


def _at_train_length(i: int) -> Callable[[dict[str, Any]], Any]:
    """Column ``i`` of the run's first ``by_segments`` row [segments, accuracy, loss, no-memory ceiling]."""
    return lambda run: run["metrics"]["by_segments"][0][i]


RMT_MEMORY = register_grid(
    GridExperiment(
        name="rmt-memory",
        description="RMT on a bAbI memory task with and without memory tokens (E1/E2)",
        options={
            "task": "memorize",
            "n_segments": 3,
            "segment_size": 16,
            "mem_sizes": "4,0",
            "steps": 300,
            "batch_size": 32,
            "lr": 1e-3,
            "eval_samples": 500,
            "seeds": "0",
            "procs": 1,
            "data_dir": None,
            "head": "class",
            "tokenizer": "gpt2",
            "cache_dir": None,
        },
        axes=(Axis("seed", "seeds", int), Axis("num_mem_tokens", "mem_sizes", int)),
        settings=_memory_settings,
        columns=(
            *((k, f"options.{k}") for k in ("task", "head", "n_segments", "segment_size")),
            ("num_mem_tokens", "labels.num_mem_tokens"),
            ("seed", "labels.seed"),
            ("steps", "metrics.steps"),
            ("test_accuracy", _at_train_length(1)),
            ("test_loss", _at_train_length(2)),
            ("no_memory_ceiling", _at_train_length(3)),
            ("chance", lambda run: round(1 / 6, 4)),
            ("train_time_s", "metrics.train_s"),
            ("run", "key"),
        ),
        fn=RUN,
        label_order=("num_mem_tokens", "seed"),
        report=_memory_report,
        aliases=("rmt_memory",),
    )
)


@register_experiment(
    "rmt-curriculum",
    "RMT curriculum (fixed / mixed) vs naive training on memorize, pre-trained backbone; accuracy vs segments (E4/E5)",
    aliases=("rmt_curriculum",),
)
def rmt_curriculum(
    out_dir: Path,
    task: str = "memorize",
    n_train: int = 4,
    segment_size: int = 64,
    mem: int = 4,
    total_steps: int = 4000,
    methods: str = "naive,fixed,mixed",
    eval_max: int = 16,
    batch_size: int = 32,
    lr: float = 1e-4,
    eval_samples: int = 300,
    seeds: str = "0,1",
    procs: int = 1,
    data_dir: str | None = None,
    tokenizer: str = "gpt2",
    cache_dir: str | None = None,
    pretrain_steps: int = 2000,
    pretrain_lr: float = 1e-3,
    pretrain_batch_size: int = 32,
) -> dict:
    """The protocol of arXiv:2304.11062 Fig. 11 at CPU scale (docs/rmt.md E4/E5): ``memorize`` (the fact always
    in the first segment), a backbone pre-trained on text (``pretrain_steps`` of masked-LM, rmt_pretrain.py; 0 =
    random initialisation) fine-tuned with a low learning rate ``lr`` (AdamW, warm-up a third of each stage, as the
    paper's scripts); ``naive`` = ``total_steps`` at ``n_train`` segments, ``fixed`` / ``mixed`` = stages
    1..``n_train`` of ``total_steps // n_train`` steps each; test accuracy at 1..``eval_max`` segments (0 = 2
    ``n_train``)."""
    from ..train.curriculum import Curriculum
    from .rmt_pretrain import FN as PRETRAIN_FN
    from .rmt_pretrain import pretrain_config

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n_train, total_steps, pretrain_steps = int(n_train), int(total_steps), int(pretrain_steps)
    if n_train < 1 or total_steps < n_train:
        raise InputError(
            f"n_train must be >= 1 and total_steps >= n_train, got n_train={n_train}, total_steps={total_steps}"
        )
    if pretrain_steps < 0:
        raise InputError(f"pretrain_steps must be >= 0 (0 = no pre-training), got {pretrain_steps}")
    eval_max = int(eval_max) or 2 * n_train
    if eval_max < 1:
        raise InputError(f"eval_max must be >= 1 (0 = 2 * n_train), got {eval_max}")
    methods = choose(as_list(methods), {"naive", "fixed", "mixed"}, "methods")
    task_cfg = _task_config(task, n_train, segment_size, "class", tokenizer, data_dir, cache_dir)
    model = {"preset": "rmt-tiny", "num_mem_tokens": int(mem), "pool": "cls"}
    pre = None
    if pretrain_steps:  # the runner knows no dependencies: the pre-training runs first, its key goes into the config
        pre_cfg = pretrain_config(
            {**task_cfg, "n_segments": 1},  # only its vocabulary and book text are used: not keyed by n_train
            "rmt-tiny",
            int(segment_size) + int(mem) + 1,
            pretrain_steps,
            pretrain_batch_size,
            pretrain_lr,
            0.15,
        )
        pre = run_specs(out, [RunSpec.of(PRETRAIN_FN, pre_cfg, {"run": "pretrain"})])[0]
        model["pretrained"] = pre["key"]
        (out / "pretrain.json").write_text(
            json.dumps({"key": pre["key"], **{k: v for k, v in pre["metrics"].items() if k != "curve"}}, indent=2)
            + "\n"
        )
    base = {
        "task": task_cfg,
        "model": model,
        "eval_every": 50,
        "valid_samples": 200,
        "eval": {"segments": list(range(1, eval_max + 1)), "samples": int(eval_samples)},
    }

    def arm(method: str) -> dict[str, Any]:
        """Curriculum and optimiser of one arm. As in the paper's scripts, a stage runs its step budget (keeping its
        best weights) unless it has converged (two validations >= 0.99); the no-improvement patience rule is off:
        at a low learning rate a stage sits at chance for hundreds of steps before it learns, and patience would
        move on before that. The warm-up is a third of a stage (the scripts)."""
        if method == "naive":
            cur = Curriculum.naive(n_train, total_steps)
        else:
            stages = list(range(1, n_train + 1))
            cur = Curriculum(
                stages=stages, mix_previous=method == "mixed", steps_per_stage=total_steps // n_train, patience=10**9
            )
        optim = {"lr": float(lr), "batch_size": int(batch_size), "warmup_steps": max(1, cur.steps_per_stage // 3)}
        return {"curriculum": asdict(cur), "optim": optim}

    seeds = as_ints(seeds)
    (out / "config.json").write_text(
        json.dumps({**base, "arms": {m: arm(m) for m in methods}, "seeds": seeds}, indent=2) + "\n"
    )
    specs = [RunSpec.of(RUN, {**base, **arm(m), "seed": s}, {"method": m, "seed": s}) for s in seeds for m in methods]
    rows = []
    for r in run_specs(out, specs, int(procs)):
        met = r["metrics"]
        for n_eval, acc, _, ceil in met["by_segments"]:
            rows.append(
                {
                    "task": task,
                    **r["labels"],
                    "n_train": n_train,
                    "n_eval": n_eval,
                    "segment_size": int(segment_size),
                    "num_mem_tokens": int(mem),
                    "accuracy": acc,
                    "no_memory_ceiling": ceil,
                    "chance": round(1 / 6, 4),
                    "lr": float(lr),
                    "pretrained": pre["key"] if pre else "",
                    "train_steps": met["steps"],
                    "train_time_s": met["train_s"],
                    "stage_steps": met["stage_steps"],
                    "run": r["key"],
                }
            )
    write_rows(out, rows)
    _plot_curriculum(rows, methods, out / "accuracy_vs_segments.png", task, n_train, int(segment_size), int(mem), pre)
    return {"results": rows}


def _plot_curriculum(rows, methods, path: Path, task: str, n_train: int, L: int, m: int, pre) -> None:
    """Mean accuracy over seeds vs segments at evaluation, one line per arm, with the no-memory ceiling."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for method in methods:
        pts: dict[int, list[float]] = {}
        for r in rows:
            if r["method"] == method:
                pts.setdefault(r["n_eval"], []).append(r["accuracy"])
        xs = sorted(pts)
        ax.plot(xs, [sum(pts[x]) / len(pts[x]) for x in xs], marker="o", label=method)
    ceil_pts: dict[int, float] = {}
    for r in rows:
        ceil_pts.setdefault(r["n_eval"], r["no_memory_ceiling"])
    xs = sorted(ceil_pts)
    ax.plot(xs, [ceil_pts[x] for x in xs], ls="--", color="gray", label="no-memory ceiling")
    ax.axvline(n_train, color="k", lw=0.8, ls=":")
    ax.set_xlabel("segments at evaluation")
    ax.set_ylabel("test accuracy (mean over seeds)")
    ax.set_ylim(0, 1.05)
    init = "pre-trained" if pre else "random init"
    ax.set_title(f"RMT {task} ({init}): trained on N={n_train}, L={L}, m={m}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- resources (Fig. 10 at CPU scale)
_PROBE = r"""
import json, resource, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
method, T, L, m, B, d, layers, iters = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
from seqzoo.models import LanguageModel, ModelConfig
from seqzoo.models.rmt import RMT, RMTConfig
torch.manual_seed(0)
cfg = ModelConfig(vocab_size=256, d_model=d, n_layers=layers, pattern=["attention"], mixer_kwargs={"attention": {"n_heads": 4}}, mlp="gelu")
lm = LanguageModel(cfg)
model = lm if method == "full" else RMT(lm, RMTConfig(num_mem_tokens=m, segment_size=L))
x = torch.randint(0, 256, (B, T)); y = torch.randint(0, 256, (B, T))
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
def fwd(train):
    if method == "full":
        return lm(x, labels=y).loss
    return model(x, labels=y, return_logits=False).loss
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
with torch.no_grad():
    fwd(False)  # warm-up
base = rss_mb()
t0 = time.perf_counter()
with torch.no_grad():
    for _ in range(iters):
        fwd(False)
val_s = (time.perf_counter() - t0) / iters
val_peak = peak_mb()
def step():
    loss = fwd(True); opt.zero_grad(); loss.backward(); opt.step()
step()
t0 = time.perf_counter()
for _ in range(iters):
    step()
train_s = (time.perf_counter() - t0) / iters
print(json.dumps({"val_s": val_s, "train_s": train_s, "base_rss_mb": base, "val_peak_rss_mb": val_peak, "train_peak_rss_mb": peak_mb()}))
"""


@register_experiment(
    "rmt-resources",
    "RMT vs full attention: peak memory and time per train/valid iteration vs length",
    aliases=("rmt_resources",),
)
def rmt_resources(
    out_dir: Path,
    lengths: str = "256,512,1024,2048",
    segment_sizes: str = "128,256",
    mem: int = 8,
    batch_size: int = 4,
    d_model: int = 64,
    n_layers: int = 2,
    iters: int = 2,
    threads: int = 1,
) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = {
        "lengths": lengths,
        "segment_sizes": segment_sizes,
        "mem": mem,
        "batch_size": batch_size,
        "d_model": d_model,
        "n_layers": n_layers,
        "iters": iters,
        "threads": threads,
        "device": "cpu",
        "dtype": "float32",
        "memory_metric": "process peak RSS (ru_maxrss) of a fresh process per point, minus its RSS before the timed "
        "iterations (weights, data, one warm-up forward)",
    }
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    methods = [("full", 0)] + [(f"rmt-L{L}", L) for L in as_ints(segment_sizes)]
    rows = []
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for T in as_ints(lengths):
        for name, L in methods:
            method = "full" if name == "full" else "rmt"
            args = [
                sys.executable,
                "-c",
                _PROBE,
                str(threads),
                method,
                str(T),
                str(L or 1),
                str(mem),
                str(batch_size),
                str(d_model),
                str(n_layers),
                str(iters),
            ]
            t0 = time.time()
            proc = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
            if proc.returncode != 0:
                row = {"method": name, "T": T, "error": proc.stderr.strip().splitlines()[-1][:200]}
            else:
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                row = {
                    "method": name,
                    "T": T,
                    "segment_size": L or T,
                    "train_iter_s": round(res["train_s"], 4),
                    "valid_iter_s": round(res["val_s"], 4),
                    "train_peak_mb": round(res["train_peak_rss_mb"] - res["base_rss_mb"], 1),
                    "valid_peak_mb": round(res["val_peak_rss_mb"] - res["base_rss_mb"], 1),
                    "base_rss_mb": round(res["base_rss_mb"], 1),
                    "wall_s": round(time.time() - t0, 1),
                }
            rows.append(row)
            print(json.dumps(row), flush=True)
            with open(out_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
    ok = [r for r in rows if "error" not in r]
    if ok:
        _write_csv(out_dir / "results.csv", ok)
        fig, axes = plt.subplots(1, 4, figsize=(15, 3.4))
        for key, ax in zip(("train_iter_s", "valid_iter_s", "train_peak_mb", "valid_peak_mb"), axes):
            for name, _ in methods:
                pts = [(r["T"], r[key]) for r in ok if r["method"] == name]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=name)
            ax.set_xlabel("input length T (tokens)")
            ax.set_title(key)
            ax.set_xscale("log", base=2)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"RMT vs full attention on CPU (d={d_model}, {n_layers} layers, batch {batch_size}, m={mem})")
        fig.tight_layout()
        fig.savefig(out_dir / "resources.png", dpi=120)
        plt.close(fig)
    return {"results": rows}
