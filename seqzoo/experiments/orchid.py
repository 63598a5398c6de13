"""Orchid experiments (arXiv:2402.18508, §4; docs/orchid.md): results are files (config, JSONL/CSV, PNG).

* ``orchid-ar``: associative recall over a grid of vocabulary sizes and lengths, Orchid vs the static
  long convolution (Hyena-style, same block without H_theta) vs attention, one row per run; the implicit
  filters train by Hyena's optimiser rule (``filter_optim``).
* ``orchid-images``: 8x8 digits classification, Orchid vs static vs attention (needs scikit-learn).
* ``orchid-mlm``: byte-level masked-LM pre-training, Orchid-BERT vs the same M2 model with another mixer.
* ``orchid-bench``: time and peak memory of one forward+backward vs length (1K-64K), Orchid vs attention;
  attention is dropped at the first length where it times out or runs out of memory.
* ``orchid-ar-long``: the cost of training recall at 8K-64K tokens, each run in a fresh, CPU-limited process.

The training experiments (``-ar``, ``-images``, ``-mlm``) run through the sweep runner (``seqzoo/sweep``): each
run lives in ``<out>/runs/<hash>/``, the hash of its whole configuration (model, task, training settings, seed,
code version), so a rerun with another ``steps`` or ``lr`` trains anew, an unchanged rerun trains nothing and a
cut run resumes from its checkpoint. The models come from the builders of ``orchid_models.py`` (``ar_model``,
``vision_model``, ``mlm_model``), named in the run configuration as ``{"builder":
"seqzoo.experiments.orchid_models:...", "args": ...}``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..sweep import RunSpec, as_bool, choose
from . import register_experiment
from ._runs import FN, as_ints, as_list, run_specs, write_rows
from .data import require_data
from .launcher import Axis, GridExperiment, Settings, register_grid
from .orchid_models import vision_config

MIXERS = ("orchid", "long_conv", "attention")


def _records(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def _train_settings(steps: int, batch_size: int, lr: float, eval_every: int, eval_samples: int, **overrides) -> dict:
    """The TrainConfig fields shared by the Orchid training runs (§4 protocol: warm-up 10 %, cosine to 0, clip 1)."""
    return {
        "steps": int(steps),
        "batch_size": int(batch_size),
        "lr": float(lr),
        "warmup_steps": max(1, int(steps) // 10),
        "min_lr_ratio": 0.0,
        "grad_clip": 1.0,
        "eval_every": int(eval_every),
        "eval_samples": int(eval_samples),
        "device": "cpu",
        "precision": "fp32",
        **overrides,
    }


def _spec(labels: dict, builder: str, args: dict, task: dict, train: dict, eval: dict | None = None) -> RunSpec:
    model = {"builder": f"seqzoo.experiments.orchid_models:{builder}", "args": args}
    config = {"seed": int(labels["seed"]), "model": model, "task": task, "train": train}
    return RunSpec.of(FN, {**config, "eval": eval} if eval else config, labels)


# the grid of the Orchid declarations, seeds outermost (the order of their runs and rows): mixer x seed
ORCHID_AXES = (Axis("seed", "seeds", int), Axis("model", "models", str, MIXERS))
# the columns of every Orchid table, as launcher sources (``_result`` for the experiments written as functions)
ORCHID_COLUMNS = (
    ("params", "metrics.params"),
    ("valid_accuracy", "metrics.valid_accuracy"),
    ("valid_loss", "metrics.valid_loss"),
    ("time_s", "metrics.train_s"),
    ("curve", lambda run: [(p[0], p[2]) for p in run["metrics"]["valid_curve"]]),
    ("run", "key"),
)


def _result(record: dict) -> dict[str, Any]:
    """The columns every Orchid table shows, from a sweep record (``curve``: [step, held-out accuracy])."""
    m = record["metrics"]
    return {
        "params": m["params"],
        "valid_accuracy": m["valid_accuracy"],
        "valid_loss": m["valid_loss"],
        "time_s": m["train_s"],
        "curve": [(p[0], p[2]) for p in m["valid_curve"]],
        "run": record["key"],
        **{k: m[k] for k in ("test_accuracy", "test_loss") if k in m},
    }


# ------------------------------------------------------------------ associative recall
def filter_optim(filter_lr: Any, pos_lr: Any, filter_wd: Any, param_groups: Any) -> dict[str, Any]:
    """The mixer kwargs of the implicit filters' optimiser rule (Hyena, arXiv:2302.10866; ``Orchid.optim_overrides``):
    the filter FFN and Sin frequencies at ``filter_lr`` with weight decay ``filter_wd``, the positional features
    at ``pos_lr`` without weight decay (0 freezes them, as Hyena's recall configs do). ``param_groups`` false:
    one group for every parameter, the rule of the older tables."""
    if not as_bool(param_groups, "param_groups"):
        return {"param_groups": False}
    from ..mixers.orchid import check_optim_setting

    out = {"param_groups": True}
    for name, value in (("filter_lr", filter_lr), ("pos_lr", pos_lr), ("filter_wd", filter_wd)):
        try:
            out[name] = float(value)
        except (TypeError, ValueError):
            out[name] = value  # refused, by name, just below
        check_optim_setting(name, out[name])
    return out


def _peek(out: Path, spec: RunSpec) -> dict[str, Any]:
    """A run's numbers without training: its ``done.json`` if finished, else the curve logged so far."""
    key = spec.key()  # code version, builder source and data digest: computed once
    run_dir = out / "runs" / key
    done = run_dir / "done.json"
    if done.is_file():
        return {"status": "done", **_result({"key": key, "metrics": json.loads(done.read_text())["metrics"]})}
    curve = [(r["step"], r["accuracy"]) for r in _records(run_dir / "train") if r.get("split") == "valid"]
    return {
        "status": "unfinished",
        "params": None,
        "valid_accuracy": curve[-1][1] if curve else None,
        "valid_loss": None,
        "time_s": None,
        "curve": curve,
        "last_eval_step": curve[-1][0] if curve else 0,
        "run": key,
    }


def _plot_ar(out: Path, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = sorted({(r["vocab"], r["length"]) for r in rows})
    fig, axes = plt.subplots(1, len(cells), figsize=(4 * len(cells), 3.4), squeeze=False)
    colors = {"orchid": "C0", "long_conv": "C1", "attention": "C2"}
    for ax, (V, T) in zip(axes[0], cells):
        for r in rows:
            if (r["vocab"], r["length"]) != (V, T) or not r["curve"]:
                continue
            s, a = zip(*r["curve"])
            first = r["seed"] == min(q["seed"] for q in rows if q["model"] == r["model"])
            size = f"{r['params'] / 1e3:.0f}k" if r["params"] else "unfinished"
            ax.plot(
                s, a, color=colors.get(r["model"], "k"), alpha=0.8, label=f"{r['model']} ({size})" if first else None
            )
        chance = next(r["chance"] for r in rows if (r["vocab"], r["length"]) == (V, T))
        ax.axhline(chance, color="gray", ls=":", lw=1)
        ax.set(title=f"V={V}, T={T}", xlabel="step", ylim=(0, 1.02))
        if ax.get_legend_handles_labels()[0]:  # a cell with no curve yet (collect_only) has nothing to label
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("held-out recall accuracy")
    fig.tight_layout()
    fig.savefig(out / "ar_curves.png", dpi=120)
    plt.close(fig)


@register_experiment("orchid-ar", "Associative recall grid: Orchid vs static long conv vs attention (Orchid §4.1)")
def orchid_ar(
    out_dir: Path,
    vocab_sizes="10,20,30",
    lengths="64,128",
    models="orchid,long_conv,attention",
    seeds="0,1,2",
    steps: int = 15000,
    batch_size: int = 32,
    lr: float = 2e-3,
    eval_every: int = 500,
    eval_samples: int = 1000,
    d_model: int = 64,
    n_layers: int = 2,
    filter_lr: float = 1e-3,
    pos_lr: float = 1e-5,
    filter_wd: float = 0.0,
    param_groups: bool = True,
    schedule: str = "cosine",
    beta2: float = 0.95,
    fft_scaling: str = "exact",
    procs: int = 1,
    collect_only: bool = False,
) -> dict[str, Any]:
    """The full grid by default (3 vocabularies x 2 lengths x 3 models x 3 seeds, 15,000 steps: V = 30 needs
    more than 6,000 to leave the frequency-counting plateau, docs/orchid.md). Orchid and the static long conv
    train their implicit filters by Hyena's rule (``filter_optim``; defaults of Hyena's ``HyenaFilter``,
    arXiv:2302.10866: filter lr 1e-3, wd 0, positional features 1e-5); attention has no implicit filter and keeps one group.
    ``schedule``: "cosine" (10 % linear warm-up, cosine to 0) or "onecycle" (PyTorch's OneCycleLR with a 10 %
    rise, beta1 cycled 0.95-0.85: ``TrainConfig.schedule``); ``beta2``: AdamW's second-moment decay (PyTorch's
    default is 0.999, this project's 0.95). ``fft_scaling``: the Orchid block's spectrum convention for Orchid and
    the static long conv, "exact" (the DFT) or "authors" (the authors' code's 1/n spectra, under which H_theta
    starts nearly constant; docs/orchid.md); it enters a run's configuration only when "authors", so the default
    leaves every run's configuration, and so its key, as it was before the option existed.
    ``collect_only=True`` trains nothing: it tabulates the finished runs and the curves of unfinished ones."""
    from ..mixers.orchid import SCALINGS
    from ..tasks import build_task
    from ..train.config import SCHEDULES

    collect_only = as_bool(collect_only, "collect_only")  # before anything is written
    schedule = choose([str(schedule)], SCHEDULES, "schedule")[0]
    beta2 = float(beta2)
    if not 0.0 < beta2 < 1.0:
        raise InputError(f"beta2 must be in (0, 1), got {beta2}")
    fft_scaling = choose([str(fft_scaling)], SCALINGS, "fft_scaling")[0]
    options = dict(
        vocab_sizes=as_ints(vocab_sizes),
        lengths=as_ints(lengths),
        models=choose(as_list(models), set(MIXERS), "models"),
        seeds=as_ints(seeds),
        steps=int(steps),
        batch_size=int(batch_size),
        lr=float(lr),
        eval_every=int(eval_every),
        eval_samples=int(eval_samples),
        d_model=int(d_model),
        n_layers=int(n_layers),
        filter_optim=filter_optim(filter_lr, pos_lr, filter_wd, param_groups),
        schedule=schedule,
        beta2=beta2,
        fft_scaling=fft_scaling,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"experiment": "orchid-ar", **options}, indent=2) + "\n")
    train = _train_settings(steps, batch_size, lr, eval_every, eval_samples, weight_decay=0.1, schedule=schedule)
    train["betas"] = [0.9, beta2]
    scaling = {} if fft_scaling == "exact" else {"fft_scaling": fft_scaling}
    filters = {m: {**options["filter_optim"], **scaling} if m in ("orchid", "long_conv") else {} for m in MIXERS}
    cells = [
        (V, T, s, m)
        for V in options["vocab_sizes"]
        for T in options["lengths"]
        for s in options["seeds"]
        for m in options["models"]
    ]
    specs = [
        _spec(
            {"model": m, "vocab": V, "length": T, "seed": s},
            "ar_model",
            {"mixer": m, "d_model": options["d_model"], "n_layers": options["n_layers"], **filters[m]},
            {"name": "associative_recall", "vocab_size": V, "seq_len": T},
            train,
        )
        for V, T, s, m in cells
    ]
    if collect_only:
        results = [_peek(out, spec) for spec in specs]
    else:
        results = [{"status": "done", **_result(r)} for r in run_specs(out, specs, int(procs))]
    rows = []
    for spec, res in zip(specs, results):
        task = build_task(**spec.config["task"])
        rows.append({**spec.labels, "steps": options["steps"], "chance": 1.0 / task.n_values, **res})
    write_rows(out, rows)
    _plot_ar(out, rows)
    summary = {f"{r['model']}_V{r['vocab']}_T{r['length']}_s{r['seed']}": r["valid_accuracy"] for r in rows}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


# ---------------------------------------------------------------------------- images
def matched_mlp_hidden(mixer: str, target: int, task, patch: int, d_model: int, n_layers: int) -> int | None:
    """The MLP width (a multiple of 4 blocks) that brings ``mixer``'s model closest to ``target`` parameters."""
    from ..models.vision import VisionClassifier

    def count(h):
        return VisionClassifier(vision_config(mixer, task, patch, d_model, n_layers, h)).num_parameters()

    base = 4 * d_model
    per = (count(base + 4) - count(base)) / 4  # parameters per unit of MLP width
    h = round((base + (target - count(base)) / per) / 4) * 4
    return max(4, h)


def _images_settings(opts: dict[str, Any]) -> Settings:
    """The image task split into patches, a ViT per mixer; the static long conv's and attention's MLP widened to the
    Orchid model's parameter count (``matched_mlp_hidden``); the held-out test split scored after training."""
    from ..models.vision import VisionClassifier
    from ..tasks import build_task

    models = choose(as_list(opts["models"]), set(MIXERS), "models")
    patch, d_model, n_layers = opts["patch"], opts["d_model"], opts["n_layers"]
    t = build_task(opts["task"])
    target = VisionClassifier(vision_config("orchid", t, patch, d_model, n_layers)).num_parameters()
    hidden = {
        m: (None if m == "orchid" else matched_mlp_hidden(m, target, t, patch, d_model, n_layers)) for m in models
    }
    train = _train_settings(
        opts["steps"], opts["batch_size"], opts["lr"], opts["eval_every"], t.split_size("valid"), weight_decay=0.05
    )
    shape = {"patch": patch, "d_model": d_model, "n_layers": n_layers}
    builder = "seqzoo.experiments.orchid_models:vision_model"
    points = {
        m: {"model": {"builder": builder, "args": {"mixer": m, **shape, "mlp_hidden": hidden[m]}}} for m in models
    }
    # valid (carved from training images) is what training reports; test is apart
    base = {"task": {"name": opts["task"]}, "train": train, "eval": {"test": True}}
    return Settings(base=base, points={"model": points}, info={"experiment": "orchid-images", "mlp_hidden": hidden})


def _images_report(out: Path, opts: dict[str, Any], settings: Settings, records: list, rows: list) -> dict[str, Any]:
    """summary.json per model on the test split (valid, what training watched, beside it), Orchid minus the static
    long conv, and the accuracy curves."""
    summary: dict[str, Any] = {}
    for m in dict.fromkeys(r["model"] for r in rows):
        accs = [r["test_accuracy"] for r in rows if r["model"] == m]
        valid = [r["valid_accuracy"] for r in rows if r["model"] == m]
        summary[m] = {
            "mean_accuracy": sum(accs) / len(accs),
            "accuracies": accs,
            "valid_accuracies": valid,
            "params": next(r["params"] for r in rows if r["model"] == m),
        }
    if "orchid" in summary and "long_conv" in summary:
        summary["orchid_minus_static"] = summary["orchid"]["mean_accuracy"] - summary["long_conv"]["mean_accuracy"]
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    _plot_images(out, rows)
    return summary


ORCHID_IMAGES = register_grid(
    GridExperiment(
        name="orchid-images",
        description="8x8 digits (or Fashion-MNIST) ViT: Orchid vs static long conv vs attention",
        options={
            "task": "digits",
            "models": ",".join(MIXERS),
            "seeds": "0,1,2",
            "patch": 2,
            "steps": 600,
            "batch_size": 64,
            "lr": 2e-3,
            "eval_every": 100,
            "d_model": 64,
            "n_layers": 4,
            "procs": 1,
        },
        axes=ORCHID_AXES,
        settings=_images_settings,
        columns=(
            ("model", "labels.model"),
            ("task", "options.task"),
            ("patch", "options.patch"),
            ("seed", "labels.seed"),
            ("steps", "options.steps"),
            ("mlp_hidden", "config.model.args.mlp_hidden"),
            *ORCHID_COLUMNS,
            ("test_accuracy", "metrics.test_accuracy"),
            ("test_loss", "metrics.test_loss"),
        ),
        label_order=("model", "seed"),
        report=_images_report,
    )
)


def _plot_images(out: Path, rows: list[dict]) -> None:
    _plot_curves(out / "image_curves.png", rows, f"{rows[0]['task']}, patch {rows[0]['patch']}", "valid accuracy")


def _plot_curves(path: Path, rows: list[dict], title: str, ylabel: str) -> None:
    """Held-out accuracy vs step, one colour per model (seeds share it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.4))
    colors = {"orchid": "C0", "long_conv": "C1", "attention": "C2"}
    seen = set()
    for r in rows:
        if r["curve"]:
            s, a = zip(*r["curve"])
            ax.plot(
                s,
                a,
                color=colors.get(r["model"], "k"),
                alpha=0.8,
                label=None if r["model"] in seen else f"{r['model']} ({r['params'] / 1e3:.0f}k)",
            )
            seen.add(r["model"])
    ax.set(xlabel="step", ylabel=ylabel, title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------- benchmark
_BENCH_CHILD = r"""
import json, resource, sys, time, torch
torch.set_num_threads({threads})
from seqzoo.mixers import build_mixer
name, T, D, B, reps, backward = {name!r}, {T}, {D}, {B}, {reps}, {backward}
kw = {{"l_max": T, "filter_width": 64}} if name in ("orchid", "long_conv") else {{"n_heads": 4, "causal": False}}
torch.manual_seed(0)
m = build_mixer(name, d_model=D, **kw)
x = torch.randn(B, T, D, requires_grad=backward)
def step():
    y, _ = m(x)
    if backward:
        y.square().mean().backward()
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
step()  # warm-up
times = []
for _ in range(reps):
    t0 = time.process_time(); step(); times.append(time.process_time() - t0)  # CPU time: robust to a shared machine
rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"cpu_s": sorted(times)[len(times) // 2], "peak_rss_delta_mb": (rss1 - rss0) / 1024}}))
"""


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run_child(code: str, timeout: float, cpu_limit: float | None = None) -> dict:
    """Run ``python -c code`` in a fresh process; its last stdout line is a JSON dict. Timeouts and crashes
    (an out-of-memory kill included) come back as a ``status``, so a sweep goes on.

    ``cpu_limit`` caps the child's CPU seconds (RLIMIT_CPU): unlike the wall-clock ``timeout`` it does not
    depend on how loaded the machine is."""
    import signal
    import subprocess
    import sys

    if cpu_limit is not None:
        code = (
            f"import resource; resource.setrlimit(resource.RLIMIT_CPU, ({int(cpu_limit)}, {int(cpu_limit) + 5}))\n"
            + code
        )
    t0 = time.time()
    cpu0 = _children_cpu()
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout>{timeout:.0f}s"}
    child_cpu = round(_children_cpu() - cpu0, 1)
    if cpu_limit is not None and p.returncode != 0 and (p.returncode == -signal.SIGXCPU or child_cpu >= cpu_limit):
        return {"status": f"cpu-limit>{int(cpu_limit)}s", "child_cpu_s": child_cpu}
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {"status": "oom" if "memory" in last.lower() or p.returncode in (-9, 137) else f"error: {last[:120]}"}
    return {"status": "ok", "wall_s": round(time.time() - t0, 1), **json.loads(p.stdout.strip().splitlines()[-1])}


def _bench_one(name: str, T: int, D: int, B: int, reps: int, backward: bool, threads: int, timeout: float) -> dict:
    code = _BENCH_CHILD.format(name=name, T=T, D=D, B=B, reps=reps, backward=backward, threads=threads)
    return _run_child(code, timeout)


@register_experiment(
    "orchid-bench", "Time and peak memory vs length: Orchid (FFT) vs attention, forward+backward on CPU"
)
def orchid_bench(
    out_dir: Path,
    mixers="orchid,attention",
    lengths="1024,2048,4096,8192,16384,32768,65536",
    d_model: int = 64,
    batch: int = 1,
    reps: int = 3,
    backward: bool = True,
    threads: int = 1,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Each measurement runs in a fresh process (peak RSS growth over the process baseline); a mixer is not
    tried at longer lengths once it timed out or ran out of memory."""
    backward = as_bool(backward, "backward")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    options = dict(
        mixers=as_list(mixers),
        lengths=as_ints(lengths),
        d_model=int(d_model),
        batch=int(batch),
        reps=int(reps),
        backward=backward,
        threads=int(threads),
        timeout=float(timeout),
    )
    (out / "config.json").write_text(json.dumps({"experiment": "orchid-bench", **options}, indent=2) + "\n")
    rows = _sweep(
        options["mixers"],
        options["lengths"],
        "mixer",
        lambda name, T: _bench_one(
            name,
            T,
            options["d_model"],
            options["batch"],
            options["reps"],
            backward,
            options["threads"],
            options["timeout"],
        ),
    )
    base = {r["length"]: r for r in rows if r["mixer"] == "attention" and r["status"] == "ok"}
    for r in rows:
        if r["status"] == "ok" and r["length"] in base and r["mixer"] != "attention":
            r["cpu_ratio_vs_attention"] = r["cpu_s"] / base[r["length"]]["cpu_s"]
            r["mem_ratio_vs_attention"] = r["peak_rss_delta_mb"] / max(base[r["length"]]["peak_rss_delta_mb"], 1e-9)
    write_rows(out, rows)
    _plot_bench(out, rows)
    return {"rows": rows}


def _plot_bench(out: Path, rows: list[dict]) -> None:
    import math

    def slopes(ax):  # reference slopes through Orchid's first point
        ok = [r for r in rows if r["mixer"] == "orchid" and r["status"] == "ok"]
        if ok:
            L0, t0 = ok[0]["length"], ok[0]["cpu_s"]
            L = [r["length"] for r in ok]
            ax.loglog(L, [t0 * (n * math.log(n)) / (L0 * math.log(L0)) for n in L], "k:", lw=1, label="~ L log L")
            ax.loglog(L, [t0 * (n / L0) ** 2 for n in L], "k--", lw=1, label="~ L^2")

    _plot_cost(
        out / "bench.png",
        rows,
        "mixer",
        ("cpu_s", "fwd+bwd CPU time (s, 1 thread)"),
        ("peak_rss_delta_mb", "peak RSS growth (MB)"),
        "length",
        extra=slopes,
    )


def _plot_cost(
    path: Path, rows: list[dict], key: str, time: tuple[str, str], mem: tuple[str, str], xlabel: str, extra=None
) -> None:
    """Two log-log panels (time, memory) vs length, one line per ``row[key]``; failures are annotated."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for name in dict.fromkeys(r[key] for r in rows):
        ok = [r for r in rows if r[key] == name and r["status"] == "ok"]
        if ok:
            L = [r["length"] for r in ok]
            axes[0].loglog(L, [r[time[0]] for r in ok], "o-", label=name)
            axes[1].loglog(L, [max(r[mem[0]], 1e-1) for r in ok], "o-", label=name)
        for r in rows:
            if r[key] == name and r["status"].startswith(("timeout", "oom", "cpu-limit")):
                axes[0].axvline(r["length"], color="gray", ls=":", lw=1)
                axes[0].text(
                    r["length"], axes[0].get_ylim()[0], f" {name}: {r['status']}", fontsize=7, rotation=90, va="bottom"
                )
    if extra is not None:
        extra(axes[0])
    axes[0].set(xlabel=xlabel, ylabel=time[1])
    axes[1].set(xlabel="length", ylabel=mem[1])
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _sweep(names: list[str], lengths: list[int], key: str, point) -> list[dict]:
    """``point(name, T) -> dict`` with a ``status`` for every name and length, shortest first; after a name's first
    failure (timeout, out of memory, CPU limit) its longer lengths are skipped, not tried."""
    rows = []
    for name in names:
        failed = None
        for T in lengths:
            res = {"status": f"skipped (failed at a shorter length: {failed})"} if failed else point(name, T)
            rows.append({key: name, "length": T, **res})
            print(json.dumps(rows[-1]), flush=True)
            if res["status"] != "ok" and not failed:
                failed = res["status"]
    return rows


# ------------------------------------------------------------- recall at long lengths
def ar_long_child(job: dict[str, Any]) -> dict[str, Any]:
    """One training run of associative recall at a long length, in this (fresh) process: CPU time per step,
    peak RSS, train-loss trend and held-out accuracy. Every step is logged, so a run killed by the parent's
    timeout still leaves its per-step times in ``metrics.jsonl``."""
    import resource

    import torch

    from ..models import Encoder
    from ..models.presets.orchid import orchid_ar_config
    from ..tasks import build_task
    from ..train import TrainConfig, train

    torch.set_num_threads(job["threads"])
    task = build_task("associative_recall", vocab_size=job["vocab"], seq_len=job["length"])
    torch.manual_seed(job["seed"])
    model = Encoder(orchid_ar_config(job["model"], job["vocab"], task.seq_len, job["d_model"], job["n_layers"]))
    cfg = TrainConfig(
        steps=job["steps"],
        batch_size=job["batch_size"],
        lr=job["lr"],
        weight_decay=0.1,
        warmup_steps=max(1, job["steps"] // 10),
        min_lr_ratio=0.0,
        grad_clip=1.0,
        eval_every=job["steps"],
        eval_samples=job["eval_samples"],
        eval_batch_size=job["batch_size"],
        log_every=1,
        out_dir=job["run_dir"],
        seed=job["seed"],
        device="cpu",
        precision="fp32",
        progress=False,
        resume=False,
    )
    cpu0 = time.process_time()
    res = train(model, task, cfg)
    cpu = time.process_time() - cpu0
    losses = [r["loss"] for r in _records(Path(job["run_dir"])) if r.get("split") == "train"]
    return {
        "params": res["params"],
        "cpu_s": round(cpu, 1),
        "cpu_s_per_step": round(cpu / job["steps"], 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "valid_loss": res["valid_loss"],
        "valid_accuracy": res["valid_accuracy"],
    }


@register_experiment(
    "orchid-ar-long", "Associative recall trained at 8K-64K tokens: Orchid vs static vs attention (cost)"
)
def orchid_ar_long(
    out_dir: Path,
    lengths="8192,16384,32768,65536",
    models="orchid,long_conv,attention",
    vocab: int = 20,
    tokens_per_step: int = 65536,
    steps: int = 16,
    lr: float = 2e-3,
    eval_samples: int = 16,
    d_model: int = 64,
    n_layers: int = 2,
    seed: int = 0,
    threads: int = 1,
    cpu_limit: float = 300.0,
    timeout: float = 3600.0,
) -> dict[str, Any]:
    """The §8 model and protocol at long lengths with a fixed token budget per step (batch = tokens_per_step / T).

    Each run is a fresh process limited to ``cpu_limit`` CPU seconds (and a wall-clock ``timeout``); a model is
    not tried at longer lengths after it hit a limit or ran out of memory. A stopped run reports the steps it
    finished and a bound on its CPU time per step.
    At this budget (a few dozen steps) no model learns recall: the experiment measures what training costs.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    options = dict(
        lengths=as_ints(lengths),
        models=as_list(models),
        vocab=int(vocab),
        tokens_per_step=int(tokens_per_step),
        steps=int(steps),
        lr=float(lr),
        eval_samples=int(eval_samples),
        d_model=int(d_model),
        n_layers=int(n_layers),
        seed=int(seed),
        threads=int(threads),
        cpu_limit=float(cpu_limit),
        timeout=float(timeout),
    )
    if any(T < 2 or T % 2 for T in options["lengths"]):
        raise InputError(f"lengths must be even ints >= 2, got {options['lengths']}")
    (out / "config.json").write_text(json.dumps({"experiment": "orchid-ar-long", **options}, indent=2) + "\n")

    def point(name: str, T: int) -> dict:
        run_dir = out / "runs" / f"{name}_T{T}"
        job = dict(
            model=name,
            length=T,
            vocab=options["vocab"],
            batch_size=max(1, options["tokens_per_step"] // T),
            steps=options["steps"],
            lr=options["lr"],
            eval_samples=options["eval_samples"],
            d_model=options["d_model"],
            n_layers=options["n_layers"],
            seed=options["seed"],
            threads=options["threads"],
            run_dir=str(run_dir),
        )
        code = f"import json; from seqzoo.experiments.orchid import ar_long_child; print(json.dumps(ar_long_child({job!r})))"
        row = {
            "batch_size": job["batch_size"],
            "steps": options["steps"],
            **_run_child(code, options["timeout"], options["cpu_limit"]),
        }
        if row["status"] != "ok":
            done = [r for r in _records(run_dir) if r.get("split") == "train"]
            row["steps_done"] = len(done)  # how far it got before it was stopped
            if done and "child_cpu_s" in row:  # an upper bound: includes imports and model set-up
                row["cpu_s_per_step_at_most"] = round(row["child_cpu_s"] / len(done), 1)
        return row

    rows = _sweep(options["models"], options["lengths"], "model", point)
    write_rows(out, rows)
    _plot_ar_long(out, rows)
    return {"rows": rows}


def _plot_ar_long(out: Path, rows: list[dict]) -> None:
    _plot_cost(
        out / "ar_long.png",
        rows,
        "model",
        ("cpu_s_per_step", "CPU s per training step"),
        ("peak_rss_mb", "peak RSS (MB)"),
        "length T (batch = tokens per step / T)",
    )


# -------------------------------------------------------------------- masked LM (Orchid-BERT)
def _mlm_settings(opts: dict[str, Any]) -> Settings:
    """Byte-level MLM (30 % masking, M2's rate) on a local corpus: ``path`` is a text file or folder, default
    ``$SEQZOO_DATA/wikitext-2-raw``. Accuracy and loss are over the masked positions of held-out windows."""
    path = str(require_data(opts["path"] or None, "wikitext-2-raw", "path"))
    task = {
        "name": "mlm",
        "path": path,
        "seq_len": opts["seq_len"],
        "mask_prob": opts["mask_prob"],
        "test_path": opts["test_path"],
    }
    train = _train_settings(
        opts["steps"],
        opts["batch_size"],
        opts["lr"],
        opts["eval_every"],
        opts["eval_samples"],
        weight_decay=0.01,
        warmup_steps=max(1, opts["steps"] // 16),
        min_lr_ratio=0.02,
        betas=[0.9, 0.98],
        eps=1e-6,
    )
    args = {k: opts[k] for k in ("d_model", "n_layers", "filter_width")}
    builder = "seqzoo.experiments.orchid_models:mlm_model"
    models = {m: {"model": {"builder": builder, "args": {"mixer": m, **args}}} for m in MIXERS}
    return Settings(base={"task": task, "train": train}, points={"model": models}, info={"experiment": "orchid-mlm"})


def _mlm_report(out: Path, opts: dict[str, Any], settings: Settings, records: list, rows: list) -> dict[str, Any]:
    """Held-out masked-token accuracy curves and summary.json (accuracy, loss, size and run of each model and seed)."""
    _plot_curves(out / "mlm_curves.png", rows, f"byte MLM, T={opts['seq_len']}", "masked-token accuracy (held out)")
    keep = ("valid_accuracy", "valid_loss", "params", "run")
    summary = {f"{r['model']}_s{r['seed']}": {k: r[k] for k in keep} for r in rows}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


ORCHID_MLM = register_grid(
    GridExperiment(
        name="orchid-mlm",
        description="Masked-LM pre-training of a small Orchid-BERT vs the same M2 model with a static long conv or "
        "attention",
        options={
            "path": "",
            "test_path": None,
            "models": ",".join(MIXERS),
            "seeds": "0",
            "steps": 600,
            "batch_size": 32,
            "lr": 2e-3,
            "seq_len": 128,
            "mask_prob": 0.3,
            "d_model": 64,
            "n_layers": 2,
            "filter_width": 32,
            "eval_every": 100,
            "eval_samples": 512,
            "procs": 1,
        },
        axes=ORCHID_AXES,
        settings=_mlm_settings,
        columns=(
            ("model", "labels.model"),
            ("seed", "labels.seed"),
            *ORCHID_COLUMNS,
        ),
        label_order=("model", "seed"),
        report=_mlm_report,
    )
)
