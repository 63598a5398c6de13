"""xLSTM experiments (arXiv:2405.04517, §4, at small CPU settings). Results are files: config.json, results.json/.csv, PNG.

* ``xlstm-mqar``: multi-query associative recall, xLSTM[1:0] and xLSTM[7:1] against a RoPE attention Transformer
  of equal non-embedding size (the attention model's SwiGLU width is solved for the xLSTM[1:0] count).
* ``xlstm-extrapolation``: byte-level LM on real text trained at context ``seq_len`` (256), evaluated on the same
  held-out bytes cut into windows of 256 ... 4096, plus the per-position loss inside the longest windows.
* ``xlstm-bench``: mLSTM modes vs sequence length through ``seqzoo.bench`` (time, peak memory, ratios in one run),
  and the same cell shapes through our ops and, when importable, the official ``mlstm_kernels`` native CPU kernels.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..plots import plot_lines
from ..sweep import as_bool, choose
from . import register_experiment
from ._mqar import mqar_comparison
from ._runs import adamw_budget, as_ints, as_list, train_runs, write_rows
from .data import TEXT, require_data
from .launcher import register_grid

KINDS = ("xlstm10", "xlstm71", "attention")
LABELS = {"xlstm10": "xLSTM[1:0]", "xlstm71": "xLSTM[7:1]", "attention": "Transformer (RoPE)"}


def _plot(
    path: Path,
    series: dict[str, tuple[list, list]],
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
    logy: bool = False,
) -> None:
    plot_lines(series, path, xlabel, ylabel, title, logx=logx, logy=logy)


def equal_size_configs(
    vocab_size: int,
    d_model: int = 64,
    n_layers: int = 8,
    slstm_at: int = 3,
    mlstm_n_heads: int = 2,
    attn_heads: int = 4,
    kinds=KINDS,
) -> dict[str, Any]:
    """xLSTM[1:0], xLSTM[7:1] (one sLSTM block at ``slstm_at`` per 8) and an attention model with the same
    depth whose SwiGLU width gives the non-embedding parameter count closest to xLSTM[1:0]'s."""
    from ..models import LanguageModel, ModelConfig
    from ..models.presets.xlstm import xlstm_config

    def size(cfg):
        return LanguageModel(cfg).num_parameters(exclude_embeddings=True)

    at = [i for i in range(n_layers) if i % 8 == slstm_at % 8]
    cfgs = {
        "xlstm10": xlstm_config(
            d_model, n_layers, (), vocab_size=vocab_size, mlstm_n_heads=mlstm_n_heads, chunk_size=64
        ),
        "xlstm71": xlstm_config(
            d_model, n_layers, at, vocab_size=vocab_size, mlstm_n_heads=mlstm_n_heads, chunk_size=64
        ),
    }

    def attn(hidden):
        return ModelConfig(
            vocab_size=vocab_size,
            d_model=d_model,
            n_layers=n_layers,
            pattern=["attention"],
            mixer_kwargs={"attention": {"n_heads": attn_heads}},
            mlp="swiglu",
            mlp_hidden=hidden,
            tie_embeddings=False,
        )

    target = size(cfgs["xlstm10"])
    lo = 8
    per_unit = size(attn(lo + 1)) - size(attn(lo))
    cfgs["attention"] = attn(max(1, lo + round((target - size(attn(lo))) / per_unit)))
    return {k: cfgs[k] for k in kinds}


def _train(steps: int, batch_size: int, lr: float, eval_every: int, eval_samples: int) -> dict[str, Any]:
    opts = {"steps": steps, "batch_size": batch_size, "lr": lr, "eval_every": eval_every, "eval_samples": eval_samples}
    return adamw_budget(opts)


def _model(cfg, kind: str) -> dict:
    return {"type": "lm", "config": cfg.to_dict(), "init": "xlstm" if kind.startswith("xlstm") else None}


XLSTM_MQAR = register_grid(
    mqar_comparison(
        "xlstm-mqar",
        "xLSTM[1:0] and xLSTM[7:1] vs an equal-size RoPE Transformer on MQAR",
        {"models": "xlstm10,xlstm71,attention", "d_model": 64, "n_layers": 8, "eval_samples": 512},
        KINDS,
        equal_size_configs,
        ("d_model", "n_layers"),
        (
            ("model", "shown.model"),
            ("kind", "labels.model"),
            ("seed", "labels.seed"),
            ("params_non_emb", "metrics.params_non_emb"),
        ),
        "MQAR: {num_pairs} pairs, T={seq_len}, vocab {vocab_size}, D={d_model}, {n_layers} blocks",
        shown={"model": LABELS},
        model_entry=_model,  # the xLSTM init for the xLSTMs
    )
)


@register_experiment("xlstm-extrapolation", "xLSTM vs RoPE Transformer: train at 256 bytes, evaluate at 256..4096")
def xlstm_extrapolation(
    out_dir: Path,
    path: str = "",
    models: str = "xlstm10,xlstm71,attention",
    d_model: int = 64,
    n_layers: int = 8,
    seq_len: int = 256,
    eval_lengths: str = "256,512,1024,2048,4096",
    eval_tokens: int = 16384,
    steps: int = 300,
    batch_size: int = 16,
    lr: float = 3e-3,
    bins: int = 16,
    seeds: str = "0",
    procs: int = 1,
) -> dict[str, Any]:
    """``path``: a text file or folder; default ``$SEQZOO_DATA/tinyshakespeare/input.txt``."""
    from ..tasks import build_task

    out = Path(out_dir)
    kinds = choose(as_list(models), set(KINDS), "models")
    corpus = require_data(path or None, TEXT, "path")
    task = {"name": "text", "path": str(corpus), "seq_len": int(seq_len), "tokenizer": "byte"}
    configs = equal_size_configs(build_task(**task).vocab_size, int(d_model), int(n_layers), kinds=kinds)
    lengths = as_ints(eval_lengths)
    train = _train(steps, batch_size, lr, 0, 64)
    ev = {"lengths": lengths, "tokens": int(eval_tokens), "bins": int(bins)}
    runs = [({"model": k, "seed": s}, _model(configs[k], k)) for k in kinds for s in as_ints(seeds)]
    records = train_runs(out, runs, task, train, procs=int(procs), eval=ev)
    rows, pos_rows, curves, pos_curves = [], [], {}, {}
    for r in records:
        kind, m, seed = r["labels"]["model"], r["metrics"], r["labels"]["seed"]
        label = f"{LABELS.get(kind, kind)} s{seed}"
        for L, loss in m["by_length"]:
            rows.append(
                {
                    "model": LABELS.get(kind, kind),
                    "kind": kind,
                    "seed": seed,
                    "train_len": int(seq_len),
                    "eval_len": L,
                    "loss": loss,
                    "bits_per_byte": loss / 0.6931471805599453,
                    "params_non_emb": m["params_non_emb"],
                    "train_loss": m["train_loss"],
                    "train_s": m["train_s"],
                }
            )
        pos_rows += [
            {"model": LABELS.get(kind, kind), "kind": kind, "seed": seed, "pos": c, "loss": v}
            for c, v in m["per_position"]
        ]
        curves[label] = ([p[0] for p in m["by_length"]], [p[1] for p in m["by_length"]])
        pos_curves[label] = ([p[0] for p in m["per_position"]], [p[1] for p in m["per_position"]])
    (out / "config.json").write_text(
        json.dumps(
            {"task": task, "models": {k: c.to_dict() for k, c in configs.items()}, "train": train, "eval": ev}, indent=2
        )
        + "\n"
    )
    write_rows(out, rows, "results")
    write_rows(out, pos_rows, "per_position")
    _plot(
        out / "loss_vs_eval_length.png",
        curves,
        "evaluation context length (bytes)",
        "held-out loss (nats/byte)",
        f"trained at T={seq_len} ({Path(corpus).name}), D={d_model}, {n_layers} blocks",
        logx=True,
    )
    _plot(
        out / "loss_vs_position.png",
        pos_curves,
        "position in the window (bytes)",
        "mean loss (nats/byte)",
        f"per-position loss in {max(lengths)}-byte windows; trained at {seq_len}",
    )
    return {"rows": rows, "per_position": pos_rows}


@register_experiment("xlstm-bench", "mLSTM modes vs length (seqzoo bench) and our ops vs the official native kernels")
def xlstm_bench(
    out_dir: Path,
    lengths: str = "256,1024,2048,4096",
    threads: int = 1,
    heads: int = 4,
    head_dim: int = 64,
    chunk_size: int = 64,
    loop_max_len: int = 2048,
    parallel_max_len: int = 4096,
    min_run_time: float = 0.5,
) -> dict[str, Any]:
    """Cell level, B=1, H=heads, K=V=head_dim, ``threads`` CPU threads (a CPU sanity ratio): forward time of
    our recurrent / parallel / chunkwise ops and of mlstm_kernels' native ones (if importable), ratios in-run."""
    import torch
    from torch.utils import benchmark

    from ..ops.mlstm import mlstm_chunkwise, mlstm_parallel, mlstm_recurrent

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(int(threads))
    H, K = int(heads), int(head_dim)
    impls: dict[str, Any] = {
        "ours_recurrent": lambda q, k, v, i, f, T: mlstm_recurrent(q, k, v, i, f) if T <= loop_max_len else None,
        "ours_parallel": lambda q, k, v, i, f, T: mlstm_parallel(q, k, v, i, f) if T <= parallel_max_len else None,
        "ours_chunkwise": lambda q, k, v, i, f, T: mlstm_chunkwise(q, k, v, i, f, chunk_size=int(chunk_size)),
    }
    official = None
    try:  # test-time oracle only (NXAI Community License): imported, never copied
        from mlstm_kernels.torch.chunkwise.native import mlstm_chunkwise__native_autograd as off_chunk
        from mlstm_kernels.torch.parallel.native_stablef import mlstm_parallel__native_stablef_autograd as off_par
        from mlstm_kernels.torch.recurrent.native_sequence import mlstm_recurrent_sequence__native_fw as off_rec

        def to_bhtd(q, k, v, i, f):  # ours (B,T,H,*) -> theirs (B,H,T,*)
            return (
                q.transpose(1, 2).contiguous(),
                k.transpose(1, 2).contiguous(),
                v.transpose(1, 2).contiguous(),
                i.transpose(1, 2).contiguous(),
                f.transpose(1, 2).contiguous(),
            )

        impls["official_recurrent"] = lambda q, k, v, i, f, T: (
            off_rec(*to_bhtd(q, k, v, i, f)) if T <= loop_max_len else None
        )
        impls["official_parallel"] = lambda q, k, v, i, f, T: (
            off_par(*to_bhtd(q, k, v, i, f)) if T <= parallel_max_len else None
        )
        impls["official_chunkwise"] = lambda q, k, v, i, f, T: off_chunk(
            *to_bhtd(q, k, v, i, f), chunk_size=int(chunk_size)
        )
        official = "mlstm_kernels"
    except Exception as e:  # noqa: BLE001 - optional oracle
        official = f"not available ({type(e).__name__})"
    rows = []
    for T in as_ints(lengths):
        g = torch.Generator().manual_seed(T)
        q, k, v = (torch.randn(1, T, H, K, generator=g) for _ in range(3))
        i = torch.randn(1, T, H, generator=g)
        f = 3.0 + torch.randn(1, T, H, generator=g)
        for name, fn in impls.items():
            if (name.endswith("recurrent") and T > loop_max_len) or (
                name.endswith("parallel") and T > parallel_max_len
            ):
                continue
            with torch.no_grad():
                t = benchmark.Timer(
                    stmt="fn(q, k, v, i, f, T)", globals={"fn": fn, "q": q, "k": k, "v": v, "i": i, "f": f, "T": T}
                )
                ms = t.blocked_autorange(min_run_time=float(min_run_time)).median * 1e3
            rows.append({"impl": name, "T": T, "fwd_ms": ms, "threads": int(threads), "B": 1, "H": H, "K": K, "V": K})
        base = {r["impl"]: r["fwd_ms"] for r in rows if r["T"] == T}
        for r in rows:
            if r["T"] == T:
                r["x_vs_ours_chunkwise"] = r["fwd_ms"] / base["ours_chunkwise"]
        write_rows(out, rows, "ops")
    series = {}
    for name in impls:
        pts = [(r["T"], r["fwd_ms"]) for r in rows if r["impl"] == name]
        if pts:
            series[name] = ([p[0] for p in pts], [p[1] for p in pts])
    _plot(
        out / "ops_fwd_ms.png",
        series,
        "sequence length T",
        "forward ms (median)",
        f"mLSTM cell, B=1, H={H}, K=V={K}, {threads} thread(s)",
        logx=True,
        logy=True,
    )
    (out / "config.json").write_text(
        json.dumps(
            {
                "lengths": as_ints(lengths),
                "threads": threads,
                "heads": H,
                "head_dim": K,
                "chunk_size": chunk_size,
                "official": official,
                "torch": torch.__version__,
            },
            indent=2,
        )
        + "\n"
    )
    return {"rows": rows, "official": official}


@register_experiment(
    "xlstm-slstm-bench",
    "sLSTM loop: naive vs fused (hand BPTT) vs its loops in C vs autograd vs torch.compile, per step",
)
def xlstm_slstm_bench(
    out_dir: Path,
    batch: int = 8,
    T: int = 128,
    heads: int = 4,
    head_dim: int = 32,
    threads: int = 1,
    repeats: int = 3,
    compiled: bool = True,
) -> dict[str, Any]:
    """Forward (no grad) and forward+backward time per time step of each sLSTM loop, min over ``repeats``
    interleaved runs, all in one process (ratios against the naive loop measured in the same run)."""
    import torch

    from ..ops.slstm import native, slstm_compiled, slstm_fused, slstm_naive
    from ..ops.slstm.fused import _loop, _pointwise

    def in_c(a, r):
        return slstm_fused(a, r, native=True)

    compiled = as_bool(compiled, "compiled")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(int(threads))
    g = torch.Generator().manual_seed(0)
    B, H, d, T = int(batch), int(heads), int(head_dim), int(T)
    wx = torch.randn(B, T, H, 4, d, generator=g)
    R = 0.1 * torch.randn(H, d, 4, d, generator=g)
    fwd = {"naive": slstm_naive, "fused": slstm_fused}
    has_c = native.library() is not None  # no C compiler: no rows (config.json says why)
    if has_c:
        fwd["fused, loops in C"] = in_c
    if compiled:
        fwd["compiled"] = slstm_compiled
        t0 = time.perf_counter()
        with torch.no_grad():
            slstm_compiled(wx, R)  # compilation
        compile_s = time.perf_counter() - t0
    else:
        compile_s = None
    train = {
        "naive (autograd)": slstm_naive,
        "fused, autograd loop": lambda a, r: _loop(a, r, None, _pointwise),
        "fused (hand-written BPTT)": slstm_fused,
    }
    if has_c:
        train["fused, loops in C"] = in_c
    times: dict[str, list[float]] = {}
    for _ in range(int(repeats)):
        for name, fn in fwd.items():
            t0 = time.perf_counter()
            with torch.no_grad():
                fn(wx, R)
            times.setdefault(f"fwd: {name}", []).append(time.perf_counter() - t0)
        for name, fn in train.items():
            a, r = wx.clone().requires_grad_(True), R.clone().requires_grad_(True)
            t0 = time.perf_counter()
            h, _ = fn(a, r)
            h.square().sum().backward()
            times.setdefault(f"fwd+bwd: {name}", []).append(time.perf_counter() - t0)
    rows = [
        {"what": k, "us_per_step": 1e6 * min(v) / T, "B": B, "T": T, "H": H, "d": d, "threads": int(threads)}
        for k, v in times.items()
    ]
    for r in rows:
        base = "fwd: naive" if r["what"].startswith("fwd:") else "fwd+bwd: naive (autograd)"
        r["speedup_vs_naive"] = (1e6 * min(times[base]) / T) / r["us_per_step"]
    write_rows(out, rows, "slstm")
    (out / "config.json").write_text(
        json.dumps(
            {
                "batch": B,
                "T": T,
                "heads": H,
                "head_dim": d,
                "threads": threads,
                "repeats": repeats,
                "compile_s": compile_s,
                "native_unavailable": native.unavailable(),
                "torch": torch.__version__,
            },
            indent=2,
        )
        + "\n"
    )
    return {"rows": rows, "compile_s": compile_s}
