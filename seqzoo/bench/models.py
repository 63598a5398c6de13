"""``seqzoo bench --suite models``: model-level training throughput, peak memory and decode cost per family.

For every family (SDPA transformer baseline, GateLoop, xLSTM[1:0], xLSTM[7:1], Hawk, Griffin) at one size and
every context length T, one point is a few **training steps** of the trainer (``forward_logits`` +
``scored_loss_sum`` + backward + gradient clipping + the trainer's AdamW from ``train/optim.py``) on a batch of
``tokens // T`` random sequences (a fixed token budget per step), giving

* ``tokens_per_s`` = tokens per step / median step time, and ``step_ms``;
* ``peak_mem_mb`` = peak memory during the steps above what the model and batch held before the first step
  (gradients, AdamW moments, activations), and ``total_peak_mb`` (the absolute peak: CUDA
  ``max_memory_allocated``, CPU the process's peak resident set);
* the distance to the matmul bound: ``model_flops_per_token`` (matmul FLOPs of a training step per token,
  analytic from the config: ``bench/flops.py: model_flops``, causal attention counted at T/2 keys per query),
  ``gemm_gflops`` (best-of-5 ``(4096 × d) · (d × 4d)`` matmul in the same process after the steps, same
  threads: ``flops.py: gemm_gflops``), ``model_gflops_per_s`` = model_flops_per_token × tokens_per_s and
  ``matmul_fraction`` = model_gflops_per_s ÷ gemm_gflops (1 = the step runs at the machine's own GEMM rate).

A second set of points measures **decoding** after a context of L tokens with ``bench/decode.py``
(``decode_point``): median ms per decoded token (batch 1) and the bytes of the carried state; per family the
flatness of ms/token over L (max ÷ min: ``decode_flatness``). With ``decode_rounds`` > 1 every decode point is
measured that many times, the rounds interleaved (every family at every L, then again), and the point reports the
minimum of its rounds' medians with the rounds beside it (``ms_per_token_rounds``): a recurrent model's step does
the same work at every L, so drift of the machine over the sweep would otherwise read as a slope in L.

Every figure is also given as ``<field>_ratio`` to the transformer at the same T, measured in the same run.
On CPU each point runs in a fresh process (``python -m seqzoo.bench.models --point '<json>'``, 1 torch thread) so
the peak resident set is that point's own, and a point that runs past ``timeout`` is recorded as an error. On
CUDA the points run in this process under bf16 autocast, timed with CUDA events.

Sizes: ``small`` (CPU: d_model 64, 4 layers / 8 xLSTM blocks, byte vocab), ``10m`` (CPU: d_model 256, byte
vocab, the depth of each family chosen so that its total parameter count, tied embedding included, is within
~5 % of 10M: ``DEPTHS``) and ``125m`` (GPU: d_model 768, 12 layers / 24 xLSTM blocks, GPT-2 vocab padded to
50304, tied embeddings). Parameter counts (total and non-embedding) are written to config.json.

    python -m seqzoo.bench.models --out results/bench-models                          # CPU, small, T 128..1024
    python -m seqzoo.bench.models --size 10m --out results/bench-models-10m          # CPU, ~10M, T 1024, 4096
    python -m seqzoo.bench.models --device cuda --out results/bench-models-125m       # GPU, 125M, T 2k..16k
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..cli_options import add_device_option, concrete_device
from ..errors import InputError
from ..host_memory import apply_malloc_setting
from .flops import model_flops
from .mixers import add_packed_ratios
from .table import markdown_table

FAMILIES: dict[str, str] = {
    "transformer": "Transformer (SDPA)",
    "gateloop": "GateLoop",
    "xlstm10": "xLSTM[1:0]",
    "xlstm71": "xLSTM[7:1]",
    "hawk": "Hawk",
    "griffin": "Griffin",
}
BASELINE = "transformer"
SIZES = ("small", "10m", "125m")
# d_model, layers (xLSTM stacks have twice as many blocks: its blocks have no separate MLP), vocab, local window
SHAPES: dict[str, dict[str, int]] = {
    "small": {"d_model": 64, "n_layers": 4, "vocab_size": 256, "window": 128},
    "10m": {"d_model": 256, "n_layers": 12, "vocab_size": 256, "window": 1024},
    "125m": {"d_model": 768, "n_layers": 12, "vocab_size": 50304, "window": 1024},
}
# per-family depth where the families' layers differ in size too much for one depth: total parameters at d_model
# 256 (tests/test_bench_models.py checks 10M ± 5 %): transformer 10.30M, GateLoop 10.33M, xLSTM 24 blocks
# (sLSTM at the paper's blocks 3 and 20 for [7:1]) 10.04M / 10.06M, Hawk 9.76M, Griffin 10.14M (4 × rglru, rglru,
# local attention); the byte embedding is 65,536 of them
DEPTHS: dict[str, dict[str, int]] = {
    "10m": {"transformer": 13, "gateloop": 12, "xlstm10": 12, "xlstm71": 12, "hawk": 11, "griffin": 12},
}
DEFAULTS: dict[str, dict[str, Any]] = {  # per size: lengths, token budget per step, steps
    "small": {"lengths": [128, 256, 512, 1024], "tokens": 2048, "steps": 3, "warmup": 1, "decode_steps": 20},
    "10m": {
        "lengths": [1024, 4096],
        "decode_lengths": [1024, 2048, 4096, 8192],
        "tokens": 8192,
        "steps": 3,
        "warmup": 1,
        "decode_steps": 20,
    },
    "125m": {"lengths": [2048, 4096, 8192, 16384], "tokens": 32768, "steps": 10, "warmup": 3, "decode_steps": 50},
}
TRAIN_FIELDS = (
    "tokens_per_s",
    "step_ms",
    "peak_mem_mb",
    "total_peak_mb",
    "model_flops_per_token",
    "model_gflops_per_s",
    "matmul_fraction",
)
DECODE_FIELDS = ("ms_per_token", "state_mb")
DOC_LENGTH_HELP = (
    "also time every (training) point on packed rows, documents of this many tokens (segment_pos), with the ratio "
    "to the same point unpacked"
)
COLUMNS = (
    "bench",
    "family",
    "T",
    "batch",
    "tokens_per_step",
    "params",
    *TRAIN_FIELDS,
    "gemm_gflops",
    *DECODE_FIELDS,
    *(f"{f}_ratio" for f in TRAIN_FIELDS + DECODE_FIELDS),
    "packed",
    *(f"{f}_vs_unpacked" for f in TRAIN_FIELDS),
    "error",
)


# ----------------------------------------------------------------------------------------- configurations
def _round_up(x: float, multiple: int) -> int:
    return int(math.ceil(x / multiple) * multiple)


def family_config(family: str, size: str = "small", **shape: int):
    """The ``ModelConfig`` of ``family`` at ``size``; ``shape`` overrides d_model / n_layers / vocab_size / window.

    Every family uses tied embeddings and the same vocabulary. Transformer: RoPE MHA (head dim 64, 16 below
    d_model 256) + GELU MLP ×4, as ``transformer-125m``. GateLoop: max heads (d_h = 1, the paper's setting),
    GELU MLP ×4 with biases, transition projections with their own lr / no weight decay (Table 4). xLSTM: the
    NeurIPS stacks of ``xlstm10-125m`` / ``xlstm71-125m`` (2 × n_layers blocks, 4 heads; [7:1] puts sLSTM at the
    paper's blocks 3 and 20 for 24 blocks, else at every 8th block from 3). Hawk / Griffin: the Griffin paper's
    100M shape (D_RNN = 4/3 D, MQA heads of 128, 16 gate blocks, window 1024; at d_model 256..511 heads of 64,
    16 gate blocks; below, heads of 16, 4 gate blocks). ``n_layers`` defaults to the family's ``DEPTHS`` entry
    where the size has one, else to the size's.
    """
    from ..models.config import ModelConfig
    from ..models.presets.gateloop import gateloop_config
    from ..models.presets.griffin import griffin_config
    from ..models.presets.xlstm import SLSTM_AT_24, xlstm_config

    check_family(family)
    if size not in SHAPES:
        raise InputError(f"size: unknown size {size!r}; choose one of {list(SHAPES)}")
    unknown = set(shape) - set(SHAPES[size])
    if unknown:
        raise InputError(f"unknown shape override(s) {sorted(unknown)}; known: {sorted(SHAPES[size])}")
    depth = DEPTHS.get(size, {}).get(family)
    s = {**SHAPES[size], **({"n_layers": depth} if depth else {}), **{k: int(v) for k, v in shape.items()}}
    for k, v in s.items():
        if v <= 0:
            raise InputError(f"{k} must be a positive int, got {v}")
    D, L, V, W = s["d_model"], s["n_layers"], s["vocab_size"], s["window"]
    if family == "transformer":
        hd = 64 if D >= 256 else 16
        return ModelConfig(
            vocab_size=V,
            d_model=D,
            n_layers=L,
            pattern=["attention"],
            mixer_kwargs={"attention": {"n_heads": max(1, D // hd)}},
            mlp="gelu",
            mlp_ratio=4.0,
            norm="layernorm",
            tie_embeddings=True,
        )
    if family == "gateloop":
        return gateloop_config(V, D, L, 4 * D, transition_lr=1e-4, transition_weight_decay=0.0).replace(
            tie_embeddings=True
        )
    if family in ("xlstm10", "xlstm71"):
        n = 2 * L
        at: list[int] = []
        if family == "xlstm71":
            at = list(SLSTM_AT_24) if n == 24 else [i for i in range(n) if i % 8 == 3] or [n - 1]
        return xlstm_config(D, n, at, vocab_size=V, mlstm_n_heads=4, slstm_n_heads=4).replace(tie_embeddings=True)
    hd = 128 if D >= 512 else 64 if D >= 256 else 16
    nb = 16 if D >= 256 else 4
    return griffin_config(
        family, V, D, _round_up(4 * D / 3, nb), L, max(1, D // hd), head_dim=hd, n_blocks=nb, window=W
    )


def count_params(config) -> int:
    """Parameters of a ``LanguageModel(config)`` built on the meta device (no memory, any size)."""
    import torch

    from ..models.lm import LanguageModel

    with torch.device("meta"):
        return LanguageModel(config).num_parameters()


def check_family(family: str) -> None:
    if family not in FAMILIES:
        raise InputError(f"families: unknown family {family!r}; known families: {list(FAMILIES)}")


def _check_lengths(values: Iterable[Any], name: str) -> list[int]:
    out = []
    for v in values:
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise InputError(f"{name}: expected positive integers, got {v!r}") from None
        if n <= 0 or n != float(v):
            raise InputError(f"{name}: must be positive integers, got {v!r}")
        out.append(n)
    if not out:
        raise InputError(f"{name}: give at least one length")
    return out


def parse_list(text: str | Iterable[Any] | None, name: str) -> list[str]:
    if text is None:
        return []
    items = text.split(",") if isinstance(text, str) else list(text)
    return [str(i).strip() for i in items if str(i).strip()]


# ------------------------------------------------------------------------------------------- one point
def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def train_point(
    config: dict[str, Any],
    T: int,
    batch: int,
    steps: int = 3,
    warmup: int = 1,
    device: str = "cpu",
    threads: int | None = None,
    seed: int = 0,
    lr: float = 1e-3,
    timeout: float | None = None,
    measure_memory: bool = True,
    compile: bool = False,
    doc_length: int | None = None,
) -> dict[str, Any]:
    """``warmup`` + ``steps`` training steps of the trainer on ``batch`` random sequences of length ``T``.
    ``compile``: the forward runs through ``torch.compile(model, dynamic=False)`` (the trainer's ``compile``
    option); its compilation happens in the first warm-up step, reported as ``first_step_s``. ``doc_length``: the
    rows pack documents of that many tokens (``segment_pos`` to the model, as the trainer passes it)."""
    import torch

    from ..eval.evaluate import forward_logits, scored_loss_sum
    from ..models.config import ModelConfig
    from ..models.lm import LanguageModel
    from ..train.config import TrainConfig
    from ..train.optim import build_optimizer
    from .flops import gemm_gflops

    if threads:
        torch.set_num_threads(int(threads))
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    torch.manual_seed(seed)
    cfg = ModelConfig.from_dict(config)
    model = LanguageModel(cfg).to(dev).train()
    tcfg = TrainConfig(lr=lr, warmup_steps=0, steps=max(1, steps + warmup), device=device)
    optimizer = build_optimizer(model, tcfg)
    forward_model = torch.compile(model, dynamic=False) if compile else model
    amp = torch.bfloat16 if cuda else None
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (batch, T + 1), generator=g)
    x, y = ids[:, :-1].contiguous().to(dev), ids[:, 1:].contiguous().to(dev)
    sp = None if not doc_length else (torch.arange(T, device=dev) % doc_length).expand(batch, T)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=amp, enabled=amp is not None):
            logits = forward_logits(forward_model, x, "lm", sp)
        loss_sum, n = scored_loss_sum(logits, y)
        loss = loss_sum / max(1, n)
        loss.backward()
        if tcfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), tcfg.grad_clip)
        optimizer.step()
        return loss.detach()

    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
    else:
        base = _rss_mb()
    times: list[float] = []
    first_step_s = None
    loss = None
    for i in range(warmup + steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step()
            end.record()
            torch.cuda.synchronize(dev)
            dt = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            loss = step()
            dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
        if i == 0:
            first_step_s = dt
        if (
            timeout and i == 0 and not compile and dt * (warmup + steps) > timeout
        ):  # in-process: no child to kill, so estimate
            raise TimeoutError(f"timeout > {timeout:.0f}s (estimated: first step took {dt:.1f}s)")
    sec = statistics.median(times)
    out: dict[str, Any] = {
        "step_ms": sec * 1e3,
        "tokens_per_s": batch * T / sec,
        "loss": float(loss),
        "params": model.num_parameters(),
        "first_step_s": first_step_s,
    }
    if cuda:
        peak = torch.cuda.max_memory_allocated(dev)
        out["peak_mem_mb"] = (peak - base) / 2**20
        out["total_peak_mb"] = peak / 2**20
    elif measure_memory:
        out["peak_mem_mb"] = max(0.0, _rss_mb() - base)
        out["total_peak_mb"] = _rss_mb()
    # after the memory readings: the calibration's own buffers must not count as the step's peak
    out.update(
        matmul_bound(model_flops(cfg, T)["train_per_token"], out["tokens_per_s"], gemm_gflops(cfg.d_model, device))
    )
    return out


def matmul_bound(flops_per_token: float, tokens_per_s: float, gemm: float) -> dict[str, float]:
    """The step's model FLOP/s and its fraction of the GEMM rate ``gemm`` (GFLOP/s) measured in the same process."""
    gflops = flops_per_token * tokens_per_s / 1e9
    return {
        "model_flops_per_token": flops_per_token,
        "gemm_gflops": gemm,
        "model_gflops_per_s": gflops,
        "matmul_fraction": gflops / gemm,
    }


def decode_bench_point(
    config: dict[str, Any], T: int, steps: int = 20, device: str = "cpu", threads: int | None = None, seed: int = 0
) -> dict[str, Any]:
    """Decode latency and carried-state size after ``T`` tokens, via ``bench/decode.py: decode_point``."""
    import torch

    from ..models.config import ModelConfig
    from ..models.lm import LanguageModel
    from .decode import decode_point

    if threads:
        torch.set_num_threads(int(threads))
    dev = torch.device(device)
    torch.manual_seed(seed)
    model = LanguageModel(ModelConfig.from_dict(config)).to(dev).eval()
    amp = torch.bfloat16 if dev.type == "cuda" else None
    with torch.autocast(dev.type, dtype=amp, enabled=amp is not None):
        res = decode_point(model, T, batch=1, steps=steps, seed=seed)
    return {**res, "params": model.num_parameters()}


def run_point(spec: dict[str, Any]) -> dict[str, Any]:
    spec = dict(spec)
    kind = spec.pop("bench")
    return train_point(**spec) if kind == "train" else decode_bench_point(**spec)


def _measure(spec: dict[str, Any], isolate: bool, timeout: float) -> dict[str, Any]:
    """One point, in a fresh process (CPU: per-point peak RSS, a hard timeout) or in this process (CUDA)."""
    if not isolate:
        try:
            if spec["bench"] == "train":
                spec = {**spec, "timeout": timeout, "measure_memory": spec["device"].startswith("cuda")}
            return run_point(spec)
        except Exception as e:  # noqa: BLE001 - e.g. CUDA out of memory: recorded, the sweep goes on
            return {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        finally:
            _free(spec["device"])
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "seqzoo.bench.models", "--point", json.dumps(spec)],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timeout > {timeout:g}s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------- the sweep
def run_model_bench(
    families: Iterable[str] | str | None = None,
    lengths: Iterable[int] | str | None = None,
    size: str | None = None,
    device: str = "cpu",
    tokens: int | None = None,
    steps: int | None = None,
    warmup: int | None = None,
    decode_lengths: Iterable[int] | str | None = None,
    decode_steps: int | None = None,
    decode_rounds: int = 1,
    train: bool = True,
    decode: bool = True,
    threads: int | None = 1,
    timeout: float = 300.0,
    isolate: bool | None = None,
    shape: dict[str, int] | None = None,
    seed: int = 0,
    out_dir: str | Path | None = None,
    progress: bool = True,
    compile: bool = False,
    doc_length: int | None = None,
) -> list[dict[str, Any]]:
    """Training throughput / peak memory and decode latency / state size of each family vs context length.

    ``doc_length``: every training point is also measured on rows packing documents of that many tokens
    (``packed`` = N, ``<field>_vs_unpacked`` = the ratio to the same point unpacked, same run).

    ``size`` defaults to "small" on CPU and "125m" on CUDA; ``lengths``, ``tokens`` (per step), ``steps``,
    ``warmup``, ``decode_steps`` default per size (``DEFAULTS``); ``decode_lengths`` default to the size's
    (10m: 1024..8192) when ``lengths`` is not given, else to ``lengths``.
    ``isolate`` (default: on CPU) runs each point in a fresh process; in-process CPU points report no memory.
    ``shape`` overrides d_model / n_layers / vocab_size / window of the size (tests use tiny shapes).
    ``compile``: every family's training step (the baseline's too) runs its forward through ``torch.compile``;
    the compilation falls in the warm-up, which must then be at least one step. Decode points stay eager.
    """
    fams = parse_list(families, "families") or list(FAMILIES)
    for f in fams:
        check_family(f)
    if BASELINE not in fams:
        fams = [BASELINE, *fams]
    fams = list(dict.fromkeys(fams))
    if not isinstance(device, str) or not (device == "cpu" or device.startswith("cuda")):
        raise InputError(f"device: expected 'cpu' or 'cuda[:N]', got {device!r}")
    cuda = device.startswith("cuda")
    size = size or ("125m" if cuda else "small")
    if size not in SIZES:
        raise InputError(f"size: unknown size {size!r}; choose one of {list(SIZES)}")
    d = DEFAULTS[size]
    Ts = _check_lengths(parse_list(lengths, "lengths") or d["lengths"], "lengths")
    Ls = _check_lengths(
        parse_list(decode_lengths, "decode_lengths") or (d.get("decode_lengths") if lengths is None else None) or Ts,
        "decode_lengths",
    )
    tokens = d["tokens"] if tokens is None else tokens
    steps = d["steps"] if steps is None else steps
    warmup = d["warmup"] if warmup is None else warmup
    decode_steps = d["decode_steps"] if decode_steps is None else decode_steps
    for name, v, lo in (
        ("tokens", tokens, 1),
        ("steps", steps, 1),
        ("warmup", warmup, 0),
        ("decode_steps", decode_steps, 1),
        ("decode_rounds", decode_rounds, 1),
    ):
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise InputError(f"{name}: must be an int >= {lo}, got {v!r}")
    if timeout is None or timeout <= 0:
        raise InputError(f"timeout: must be > 0 seconds, got {timeout!r}")
    if not isinstance(compile, bool):
        raise InputError(f"compile: must be True or False, got {compile!r}")
    if compile and train and warmup < 1:
        raise InputError("warmup: --compile needs at least 1 warm-up step (the compilation is not timed), got 0")
    if not (train or decode):
        raise InputError("nothing to measure: train and decode are both off")
    isolate = (not cuda) if isolate is None else bool(isolate)
    configs = {f: family_config(f, size, **(shape or {})) for f in fams}
    if doc_length is not None:
        if not isinstance(doc_length, int) or isinstance(doc_length, bool) or doc_length < 1:
            raise InputError(f"doc_length must be a positive int (tokens per packed document), got {doc_length!r}")
        if not train:
            raise InputError("doc_length: packed rows are timed in training points; training is off")
        from ..mixers import MIXERS

        unpackable = {
            f: sorted({m for m in configs[f].pattern if not MIXERS[m].supports_segment_pos})
            for f in fams
            if any(not MIXERS[m].supports_segment_pos for m in configs[f].pattern)
        }
        if unpackable:
            raise InputError(f"doc_length: families {unpackable} have mixers without segment_pos (packed documents)")
    params = {f: count_params(c) for f, c in configs.items()}

    config_dicts = {f: c.to_dict() for f, c in configs.items()}

    def point(bench: str, f: str, T: int, **extra) -> dict[str, Any]:
        base = {"bench": bench, "family": f, "config": config_dicts[f], "T": T}
        return {**base, "device": device, "threads": threads, "seed": seed, **extra}

    todo: list[dict[str, Any]] = []
    if train:
        for T in Ts:
            B = max(1, tokens // T)
            for f in fams:
                for packed in [None] if doc_length is None else [None, doc_length]:
                    extra = {"doc_length": packed} if packed else {}
                    todo.append(point("train", f, T, batch=B, steps=steps, warmup=warmup, compile=compile, **extra))
    if decode:
        for rnd in range(decode_rounds):  # interleaved: every (L, family) once per round
            for T in Ls:
                for f in fams:
                    todo.append(point("decode", f, T, steps=decode_steps, round=rnd))
    rows: list[dict[str, Any]] = []
    bar = tqdm(todo, desc=f"models ({size}, {device})", disable=not progress)
    for spec in bar:
        bar.set_postfix_str(f"{spec['bench']} {spec['family']} T={spec['T']}")
        point = {k: v for k, v in spec.items() if k not in ("family", "round")}
        res = _measure(point, isolate, timeout)
        row = {"bench": spec["bench"], "family": spec["family"], "T": spec["T"], "params": params[spec["family"]]}
        if spec["bench"] == "train":
            row.update(batch=spec["batch"], tokens_per_step=spec["batch"] * spec["T"])
            if doc_length is not None:
                row["packed"] = spec.get("doc_length", 0)
        else:
            row.update(batch=1)
        res.pop("params", None)
        row.update(res)
        rows.append(row)
    rows = merge_decode_rounds(rows)
    add_ratios(rows)
    add_packed_ratios(rows, point=("bench", "family", "T"), fields=TRAIN_FIELDS)
    flatness = decode_flatness(rows)
    if out_dir is not None:
        meta = {
            "suite": "models",
            "size": size,
            "device": device,
            "amp": "bf16 autocast" if cuda else "fp32",
            "baseline": BASELINE,
            "lengths": Ts if train else [],
            "decode_lengths": Ls if decode else [],
            "tokens_per_step": tokens,
            "steps": steps,
            "warmup": warmup,
            "decode_steps": decode_steps,
            "decode_rounds": decode_rounds,
            "decode_batch": 1,
            "threads": threads,
            "isolated_points": isolate,
            "timeout_s": timeout,
            "compiled_training": compile,
            "packed_doc_length": doc_length,
            "seed": seed,
            "shape_overrides": shape or {},
            "memory": (
                "CUDA max_memory_allocated"
                if cuda
                else "peak RSS of a fresh process per point"
                if isolate
                else "not measured (in-process CPU)"
            ),
            "optimizer": "trainer's AdamW (train/optim.py: build_optimizer, TrainConfig defaults, "
            "grad_clip 1.0), forward_logits + scored_loss_sum",
            "families": {
                f: {
                    "label": FAMILIES[f],
                    "params": params[f],
                    "non_embedding_params": params[f] - configs[f].vocab_size * configs[f].d_model,
                    "n_layers": configs[f].n_layers,
                    "model_flops_per_token": {T: model_flops(configs[f], T)["train_per_token"] for T in Ts},
                    "config": configs[f].to_dict(),
                }
                for f in fams
            },
            "model_flops": "matmul FLOPs of a training step per token (forward x 3), analytic: bench/flops.py",
            "gemm": "best of 5 (4096 x d_model) @ (d_model x 4 d_model) matmuls in each point's process, "
            "same threads, after its steps (fp32 CPU, bf16 CUDA): bench/flops.py: gemm_gflops",
            "decode_flatness": flatness,
            "configs_125m": configs_125m(),
            "environment": environment(threads),
        }
        write_results(rows, Path(out_dir), meta)
    return rows


def configs_125m() -> dict[str, dict[str, Any]]:
    """The ~125M configuration of every family with its parameter count (meta device: no memory used)."""
    out = {}
    for f, label in FAMILIES.items():
        cfg = family_config(f, "125m")
        n = count_params(cfg)
        out[f] = {
            "label": label,
            "params": n,
            "params_m": round(n / 1e6, 2),
            "non_embedding_params": n - cfg.vocab_size * cfg.d_model,
            "config": cfg.to_dict(),
        }
    return out


def environment(threads: int | None) -> dict[str, Any]:
    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "torch_threads_per_point": threads,
        "load_avg_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
    return env


def merge_decode_rounds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One decode row per (family, T): the minimum over its rounds of ``ms_per_token`` (each a median over the
    decoded tokens) and the rounds in order (``ms_per_token_rounds``); an errored round is left out, a point whose
    every round errored keeps the first error. Training rows pass through; a single round is unchanged."""
    out: list[dict[str, Any]] = []
    decode: dict[tuple, tuple[int, list[dict[str, Any]]]] = {}  # (family, T) -> (place in out, its rounds)
    for r in rows:
        key = (r["family"], r["T"])
        if r["bench"] != "decode":
            out.append(r)
        elif key not in decode:
            decode[key] = (len(out), [r])
            out.append(r)  # holds the point's place in the table
        else:
            decode[key][1].append(r)
    for place, rounds in decode.values():
        if len(rounds) > 1:
            ok = [r for r in rounds if r.get("ms_per_token") is not None]
            merged = dict(min(ok, key=lambda r: r["ms_per_token"]) if ok else rounds[0])
            merged["ms_per_token_rounds"] = [r.get("ms_per_token") for r in rounds]
            out[place] = merged
    return out


def add_ratios(rows: list[dict[str, Any]], baseline: str = BASELINE) -> None:
    """``<field>_ratio`` = value / the baseline family's value at the same (bench, T) of the same run (packed rows:
    the baseline's packed row)."""
    base = {(r["bench"], r["T"], r.get("packed")): r for r in rows if r["family"] == baseline and "error" not in r}
    for r in rows:
        b = base.get((r["bench"], r["T"], r.get("packed")))
        for f in TRAIN_FIELDS + DECODE_FIELDS:
            if b is not None and r.get(f) is not None and b.get(f):
                r[f"{f}_ratio"] = r[f] / b[f]


def decode_flatness(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per family: decode ms/token at its shortest and longest context, min / max over L and ``max_over_min``."""
    out: dict[str, dict[str, Any]] = {}
    for fam in dict.fromkeys(r["family"] for r in rows):
        pts = sorted(
            (r["T"], r["ms_per_token"])
            for r in rows
            if r["family"] == fam and r["bench"] == "decode" and r.get("ms_per_token") is not None
        )
        if len(pts) < 2:
            continue
        ms = [v for _, v in pts]
        out[fam] = {
            "lengths": [t for t, _ in pts],
            "ms_first": ms[0],
            "ms_last": ms[-1],
            "min_ms": min(ms),
            "max_ms": max(ms),
            "max_over_min": max(ms) / min(ms) if min(ms) > 0 else math.inf,
        }
    return out


def write_results(rows: list[dict[str, Any]], out: Path, meta: dict[str, Any]) -> None:
    from ..plots import plot_models

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(meta, indent=2) + "\n")
    (out / "models.json").write_text(
        json.dumps(
            {
                "meta": {k: v for k, v in meta.items() if k not in ("families", "configs_125m")},
                "decode_flatness": meta.get("decode_flatness", {}),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    with open(out / "models.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    title = f"{meta['size']} models, {meta['device']}, {meta['tokens_per_step']} tokens/step; decode batch 1"
    # the figure shows unpacked rows (packed ones are in the tables and files, with their ratios)
    plot_models([r for r in rows if not r.get("packed")], out / "models.png", title=title, labels=FAMILIES)


def format_model_table(rows: list[dict[str, Any]]) -> str:
    """Markdown tables: training (tokens/s, peak memory, ratios) and decode (ms/token, state, ratios)."""

    def name(r):
        return FAMILIES.get(r["family"], r["family"])

    out = []
    train = [r for r in rows if r["bench"] == "train"]
    packed = any("packed" in r for r in train)
    if train:
        lead = [
            ("family", name),
            ("T", lambda r: r["T"]),
            ("batch", lambda r: r["batch"]),
            ("params", lambda r: f"{r['params'] / 1e6:.3g}M"),
        ]
        out += markdown_table(
            train,
            lead + ([("packed docs", lambda r: r["packed"] or "-")] if packed else []),
            [
                ("step ms", "step_ms", "{:.1f}"),
                ("tokens/s", "tokens_per_s", "{:.0f}"),
                ("peak MB", "peak_mem_mb", "{:.1f}"),
                ("FLOP/token", "model_flops_per_token", "{:.3g}"),
                ("model GFLOP/s", "model_gflops_per_s", "{:.3g}"),
                ("GEMM GFLOP/s", "gemm_gflops", "{:.3g}"),
                ("matmul fraction", "matmul_fraction", "{:.3f}"),
                ("tokens/s ÷ transformer", "tokens_per_s_ratio", "{:.2f}"),
                ("peak MB ÷ transformer", "peak_mem_mb_ratio", "{:.2f}"),
                ("FLOP/token ÷ transformer", "model_flops_per_token_ratio", "{:.2f}"),
                ("matmul fraction ÷ transformer", "matmul_fraction_ratio", "{:.2f}"),
                *([("tokens/s ÷ unpacked", "tokens_per_s_vs_unpacked", "{:.2f}")] if packed else []),
            ],
        )
    dec = [r for r in rows if r["bench"] == "decode"]
    if dec:
        if out:
            out.append("")
        out += markdown_table(
            dec,
            [("family", name), ("context", lambda r: r["T"])],
            [
                ("ms/token", "ms_per_token", "{:.3f}"),
                ("state MB", "state_mb", "{:.4f}"),
                ("ms/token ÷ transformer", "ms_per_token_ratio", "{:.2f}"),
                ("state ÷ transformer", "state_mb_ratio", "{:.3g}"),
            ],
        )
    flat = decode_flatness(rows)
    if flat:
        out += ["", "| family | contexts | ms/token (first → last) | max ÷ min over contexts |", "|---|---|---|---|"]
        for fam, f in flat.items():
            out.append(
                f"| {FAMILIES.get(fam, fam)} | {f['lengths'][0]}..{f['lengths'][-1]} | "
                f"{f['ms_first']:.3f} → {f['ms_last']:.3f} | {f['max_over_min']:.2f} |"
            )
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------- command line
def add_arguments(p: argparse.ArgumentParser, lengths_help: str = "") -> None:
    """The model-suite options (shared by ``python -m seqzoo.bench.models`` and ``seqzoo bench --suite models``)."""
    p.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help=f"comma-separated families (default: all); the baseline '{BASELINE}' is always added. "
        f"Known: {', '.join(FAMILIES)}",
    )
    p.add_argument(
        "--size",
        choices=SIZES,
        help="model size: 'small' (default on CPU: d_model 64, 4 layers), '10m' (CPU: d_model 256, each family's "
        "depth for ~10M parameters; T 1024,4096, decode 1024..8192) or "
        "'125m' (default on CUDA: d_model 768, 12 layers / 24 xLSTM blocks, ~125M parameters)",
    )
    p.add_argument(
        "--tokens",
        type=int,
        help="token budget per training step: batch = tokens // T "
        f"(default {DEFAULTS['small']['tokens']} small, {DEFAULTS['10m']['tokens']} 10m, "
        f"{DEFAULTS['125m']['tokens']} 125m)",
    )
    p.add_argument(
        "--steps",
        type=int,
        help="timed training steps per point, median reported "
        f"(default {DEFAULTS['small']['steps']} small, {DEFAULTS['125m']['steps']} 125m)",
    )
    p.add_argument(
        "--warmup",
        type=int,
        help="untimed training steps first "
        f"(default {DEFAULTS['small']['warmup']} small, {DEFAULTS['125m']['warmup']} 125m)",
    )
    p.add_argument(
        "--decode-lengths",
        help="comma-separated context lengths for the decode points (default: 1024,2048,4096,8192 for 10m "
        "without --lengths, else the training lengths)",
    )
    p.add_argument(
        "--decode-steps",
        type=int,
        help="decoded tokens per decode point, median reported "
        f"(default {DEFAULTS['small']['decode_steps']} small, {DEFAULTS['125m']['decode_steps']} 125m)",
    )
    p.add_argument(
        "--decode-rounds",
        type=int,
        default=1,
        help="measure every decode point this many times, interleaved over lengths and families; each point "
        "reports the minimum of its rounds' medians (default 1)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="training points run their forward through torch.compile (every family, the baseline too; "
        "compiled in the warm-up, reported as first_step_s; decode stays eager)",
    )
    p.add_argument(
        "--in-process",
        action="store_true",
        help="CPU: measure in this process instead of one fresh process per point (faster; then no CPU memory figures)",
    )


def run_from_args(a: argparse.Namespace, train: bool = True, decode: bool = True) -> list[dict[str, Any]]:
    rows = run_model_bench(
        families=a.families,
        lengths=a.lengths,
        size=a.size,
        device=a.device,
        tokens=a.tokens,
        steps=a.steps,
        warmup=a.warmup,
        decode_lengths=a.decode_lengths,
        decode_steps=a.decode_steps,
        decode_rounds=a.decode_rounds,
        train=train,
        decode=decode,
        threads=a.threads,
        timeout=a.timeout,
        isolate=False if a.in_process else None,
        out_dir=a.out,
        progress=not a.no_progress,
        compile=a.compile,
        doc_length=getattr(a, "doc_length", None),
    )
    print(format_model_table(rows))
    print(f"\nresults: {a.out}/models.csv, models.json, config.json, models.png")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m seqzoo.bench.models",
        description="Model-level benchmark (also `seqzoo bench --suite models`). "
        "Training tokens/s and peak memory per family vs context length, and decode ms/token "
        "and carried-state size; every figure also as a ratio to the SDPA transformer "
        "measured in the same run. Writes models.csv, models.json, config.json, models.png.",
    )
    p.add_argument("--point", help=argparse.SUPPRESS)  # internal: one measurement in this fresh process
    p.add_argument(
        "--lengths",
        help="comma-separated training context lengths T "
        "(default: 128,256,512,1024 small; 1024,4096 10m; 2048,4096,8192,16384 125m)",
    )
    add_arguments(p)
    p.add_argument("--no-train", action="store_true", help="decode points only")
    p.add_argument("--no-decode", action="store_true", help="training points only")
    p.add_argument("--doc-length", type=int, help=DOC_LENGTH_HELP)
    add_device_option(p, "cpu")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads per measurement (default 1)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per point before it is recorded as a timeout")
    p.add_argument("--out", default="results/bench-models", help="output folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    a = p.parse_args(argv)
    apply_malloc_setting()  # the fresh point process too: mallopt does not pass to a child process
    if a.point:
        print(json.dumps(run_point(json.loads(a.point))))
        return 0
    a.device = concrete_device(a.device)
    try:
        run_from_args(a, train=not a.no_train, decode=not a.no_decode)
    except (ValueError, TypeError) as e:
        p.error(str(e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
