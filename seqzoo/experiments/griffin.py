"""Griffin experiments (arXiv:2402.19427 §3-§6): Hawk vs Griffin vs the MQA Transformer at
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
from pathlib import Path
from typing import Any

from ..sweep import choose
from . import register_experiment
from ._mqar import mqar_comparison
from ._runs import as_ints, as_list, train_runs, write_rows
from .data import TEXT, require_data
from .launcher import register_grid

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


GRIFFIN_MQAR = register_grid(
    mqar_comparison(
        "griffin-mqar",
        "Hawk vs Griffin vs MQA Transformer (equal size) on multi-query associative recall",
        {"models": "hawk,griffin,mqa", "d_model": 64, "n_layers": 3, "window": 16},
        KINDS,
        equal_size_configs,
        ("d_model", "n_layers", "window"),
        (
            ("model", "labels.model"),
            ("seed", "labels.seed"),
            ("params_non_emb", "metrics.params_non_emb"),
            ("mlp_hidden", "config.model.config.mlp_hidden"),
        ),
        "MQAR: {num_pairs} pairs, T={seq_len}, vocab {vocab_size}",
    )
)


@register_experiment(
    "griffin-text", "Hawk vs Griffin vs MQA (equal size): byte-level LM on real text, eval beyond train length"
)
def griffin_text(
    out_dir: Path,
    path: str = "",
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
    seeds: str = "0",
    procs: int = 1,
) -> dict[str, Any]:
    """``path``: a text file or folder; default ``$SEQZOO_DATA/tinyshakespeare/input.txt``."""
    from ..tasks import build_task

    out = Path(out_dir)
    kinds = choose(as_list(models), set(KINDS), "models")
    corpus = require_data(path or None, TEXT, "path")
    task = {"name": "text", "path": str(corpus), "seq_len": int(seq_len), "tokenizer": "byte"}
    t = build_task(**task)
    configs = equal_size_configs(t.vocab_size, int(d_model), int(n_layers), window=int(window), kinds=kinds)
    lengths = as_ints(eval_lengths)
    train = {
        "steps": int(steps),
        "batch_size": int(batch_size),
        "lr": float(lr),
        "warmup_steps": int(steps) // 10,
        "eval_every": 0,
        "eval_samples": 64,
        "device": "cpu",
        "precision": "fp32",
    }
    runs = [
        ({"model": k, "seed": s}, {"type": "lm", "config": configs[k].to_dict()}) for k in kinds for s in as_ints(seeds)
    ]
    ev = {"lengths": lengths, "tokens": int(eval_tokens), "bins": 16}
    records = train_runs(out, runs, task, train, procs=int(procs), eval=ev)
    rows, curves = [], {}
    for r in records:
        m = r["metrics"]
        for L, loss in m["by_length"]:
            rows.append(
                {
                    "model": r["labels"]["model"],
                    "seed": r["labels"]["seed"],
                    "train_len": int(seq_len),
                    "eval_len": L,
                    "loss": loss,
                    "bits_per_byte": loss / 0.6931471805599453,
                    "params_non_emb": m["params_non_emb"],
                    "train_loss": m["train_loss"],
                    "train_s": m["train_s"],
                }
            )
        curves[f"{r['labels']['model']} s{r['labels']['seed']}"] = (
            [p[0] for p in m["by_length"]],
            [p[1] for p in m["by_length"]],
        )
    (out / "config.json").write_text(
        json.dumps(
            {"task": task, "models": {k: c.to_dict() for k, c in configs.items()}, "train": train, "eval": ev}, indent=2
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


@register_experiment(
    "griffin-decode",
    "Decode latency and state memory vs context length: Hawk, Griffin, MQA",
    forwards="seqzoo.bench.decode:run_decode_bench",
)
def griffin_decode(out_dir: Path, **options: Any) -> dict[str, Any]:
    from ..bench.decode import run_decode_bench

    return run_decode_bench(Path(out_dir), **options)
