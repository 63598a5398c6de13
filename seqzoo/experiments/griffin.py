"""Griffin experiments (arXiv:2402.19427 §3-§4, spec/griffin.md §6): Hawk vs Griffin vs the MQA Transformer at
equal parameter count, small CPU settings. Results are files (config, JSON/CSV, PNG).

* ``griffin-mqar``: multi-query associative recall (task ``mqar``), validation accuracy per model.
* ``griffin-text``: byte-level language modelling on real text (default Tiny Shakespeare), trained at
  ``seq_len`` and evaluated at 1×, 2×, 4×, 8× that length (length extrapolation, paper §6.1).
* ``griffin-decode``: decode latency and state memory vs context length (seqzoo/bench/decode.py).

Equal size: Hawk and Griffin use D_RNN = 4D/3 (paper); the MLP width of Griffin and of the MQA baseline is
chosen so that their non-embedding parameter count is the closest to Hawk's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from . import register_experiment
from ._common import as_ints, as_list, train_then_eval_lengths, write_rows

KINDS = ("hawk", "griffin", "mqa")


def equal_size_configs(
    vocab_size: int, d_model: int = 64, n_layers: int = 3, n_heads: int = 2, window: int = 32, kinds=KINDS
) -> dict[str, Any]:
    """ModelConfigs of the three families with matched non-embedding parameter counts (see module docstring)."""
    from ..models import LanguageModel
    from ..models.presets.griffin import griffin_config

    d_rnn = (4 * d_model // 3) // 16 * 16 or 16
    n_blocks = min(16, d_rnn // 8) if d_rnn % min(16, d_rnn // 8) == 0 else 1

    def build(kind, hidden):
        return griffin_config(
            kind, vocab_size, d_model, d_rnn, n_layers, n_heads, n_blocks=n_blocks, window=window, mlp_hidden=hidden
        )

    def size(cfg):
        return LanguageModel(cfg).num_parameters(exclude_embeddings=True)

    target = size(build("hawk", 3 * d_model))
    out = {}
    for kind in kinds:
        if kind == "hawk":
            out[kind] = build(kind, 3 * d_model)
            continue
        lo, hi = 3 * d_model, 8 * d_model
        cfg = build(kind, lo)
        per_unit = size(build(kind, lo + 1)) - size(cfg)  # parameters per unit of MLP width (linear)
        hidden = max(1, lo + round((target - size(cfg)) / per_unit))
        out[kind] = build(kind, min(hidden, hi))
    return out


def _plot(
    path: Path, series: dict[str, tuple[list, list]], xlabel: str, ylabel: str, title: str, logx: bool = False
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=label)
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _valid_curve(run_dir: Path, key: str) -> tuple[list, list]:
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    recs = [r for r in recs if r.get("split") == "valid"]
    return [r["step"] for r in recs], [r[key] for r in recs]


@register_experiment(
    "griffin-mqar", "Hawk vs Griffin vs MQA Transformer (equal size) on multi-query associative recall"
)
def griffin_mqar(
    out_dir: Path,
    models: str = "hawk,griffin,mqa",
    d_model: int = 64,
    n_layers: int = 3,
    window: int = 16,
    vocab_size: int = 64,
    num_pairs: int = 8,
    seq_len: int = 64,
    steps: int = 400,
    batch_size: int = 32,
    lr: float = 3e-3,
    eval_every: int = 100,
    eval_samples: int = 256,
    seed: int = 0,
) -> dict[str, Any]:
    import torch

    from ..models import LanguageModel
    from ..tasks import build_task
    from ..train import TrainConfig, train

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kinds = as_list(models)
    task = build_task("mqar", vocab_size=int(vocab_size), num_pairs=int(num_pairs), seq_len=int(seq_len))
    configs = equal_size_configs(task.vocab_size, int(d_model), int(n_layers), window=int(window), kinds=kinds)
    rows, curves = [], {}
    for kind in kinds:
        torch.manual_seed(int(seed))
        model = LanguageModel(configs[kind])
        cfg = TrainConfig(
            steps=int(steps),
            batch_size=int(batch_size),
            lr=float(lr),
            warmup_steps=int(steps) // 10,
            eval_every=int(eval_every),
            eval_samples=int(eval_samples),
            seed=int(seed),
            device="cpu",
            precision="fp32",
            progress=False,
            out_dir=str(out / kind),
            weight_decay=0.1,
        )
        t0 = time.time()
        res = train(model, task, cfg)
        rows.append(
            {
                "model": kind,
                "params_non_emb": model.num_parameters(exclude_embeddings=True),
                "mlp_hidden": configs[kind].mlp_hidden,
                "valid_accuracy": res["valid_accuracy"],
                "valid_loss": res["valid_loss"],
                "train_s": round(time.time() - t0, 1),
            }
        )
        curves[kind] = _valid_curve(out / kind, "accuracy")
    (out / "config.json").write_text(
        json.dumps(
            {
                "task": task.config(),
                "models": {k: c.to_dict() for k, c in configs.items()},
                "steps": steps,
                "batch_size": batch_size,
                "lr": lr,
                "seed": seed,
            },
            indent=2,
        )
        + "\n"
    )
    write_rows(out, rows, "results")
    _plot(
        out / "mqar_accuracy.png",
        curves,
        "step",
        "valid accuracy (queried positions)",
        f"MQAR: {num_pairs} pairs, T={seq_len}, vocab {vocab_size}",
    )
    return {"rows": rows}


@register_experiment(
    "griffin-text", "Hawk vs Griffin vs MQA (equal size): byte-level LM on real text, eval beyond train length"
)
def griffin_text(
    out_dir: Path,
    path: str = "/work/shared/data/tinyshakespeare/input.txt",
    models: str = "hawk,griffin,mqa",
    d_model: int = 64,
    n_layers: int = 3,
    window: int = 32,
    seq_len: int = 128,
    eval_lengths: str = "128,256,512,1024",
    eval_tokens: int = 32768,
    steps: int = 300,
    batch_size: int = 16,
    lr: float = 3e-3,
    seed: int = 0,
) -> dict[str, Any]:
    import torch

    from ..models import LanguageModel
    from ..tasks import build_task
    from ..train import TrainConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    kinds = as_list(models)
    task = build_task("text", path=path, seq_len=int(seq_len), tokenizer="byte")
    configs = equal_size_configs(task.vocab_size, int(d_model), int(n_layers), window=int(window), kinds=kinds)
    lengths = as_ints(eval_lengths)
    rows, curves = [], {}
    for kind in kinds:
        torch.manual_seed(int(seed))
        model = LanguageModel(configs[kind])
        cfg = TrainConfig(
            steps=int(steps),
            batch_size=int(batch_size),
            lr=float(lr),
            warmup_steps=int(steps) // 10,
            eval_every=int(steps),
            eval_samples=64,
            seed=int(seed),
            device="cpu",
            precision="fp32",
            progress=False,
            out_dir=str(out / kind),
        )
        _, per_len = train_then_eval_lengths(model, task, cfg, lengths, int(eval_tokens), eval_batch=8)
        rows += [{"model": kind, "train_len": int(seq_len), **r} for r in per_len]
        losses = [r["loss"] for r in per_len]
        curves[kind] = (lengths, losses)
    (out / "config.json").write_text(
        json.dumps(
            {
                "task": task.config(),
                "models": {k: c.to_dict() for k, c in configs.items()},
                "steps": steps,
                "batch_size": batch_size,
                "lr": lr,
                "seed": seed,
                "eval_lengths": lengths,
                "eval_tokens": eval_tokens,
            },
            indent=2,
        )
        + "\n"
    )
    write_rows(out, rows, "results")
    _plot(
        out / "text_loss_vs_length.png",
        curves,
        "evaluation length (bytes)",
        "held-out loss (nats/byte)",
        f"trained at T={seq_len}; Griffin window {window}",
        logx=True,
    )
    return {"rows": rows}


@register_experiment("griffin-decode", "Decode latency and state memory vs context length: Hawk, Griffin, MQA")
def griffin_decode(out_dir: Path, **options: Any) -> dict[str, Any]:
    from ..bench.decode import run_decode_bench

    return run_decode_bench(Path(out_dir), **options)
