"""Kernel-level benchmark: forward and forward+backward time of the sequence kernels, with % of the roofline.

CUDA (``--device cuda``): the shapes of NX-AI's mlstm_kernels TFLA benchmark (arXiv:2503.14376) — B·T = 65,536 tokens, H = 16, Dk = 128, Dv = 256, T = 1K..64K for
mLSTM / gated linear attention, (B, T, D) = (8, 4096, 2048), (16, 2048, 2560), (1, 65536, 4096) for the diagonal scan and the fused RG-LRU — for the seqzoo Triton kernels, the
PyTorch chunkwise paths, the depthwise causal conv (k = 4, the xLSTM / Griffin short conv) at the scan shapes,
``F.scaled_dot_product_attention`` (causal, H = 32 × 128 as in the TFLA benchmark) and,
when installed, flash-linear-attention (``chunk_simple_gla``, ``chunk_gla``) and NX-AI ``mlstm_kernels``
(``chunkwise--triton_xl_chunk``). Times from ``triton.testing.do_bench`` (median, L2 flushed between runs);
``frac_roofline`` = roofline bound (the formulas below, docs/benchmarks.md "Roofline bounds") / measured time.
The seqzoo mLSTM row is labelled with the backward ``ops/mlstm/triton.py: mlstm_triton`` uses by default (its
``backward=`` default: ``bwd=triton``, or ``bwd=torch-recompute`` for the PyTorch recompute); the GLA, scan, RG-LRU
and conv kernels are Triton both ways.

CPU (``--device cpu``, the default without a GPU): small shapes, torch reference paths only, all contenders of
one point timed interleaved in one process (min of N), reported as ratios against the per-token loop of the same
op measured in the same run (on a shared CPU only ratios measured in one run are comparable).

On CUDA each op's seqzoo and torch contenders run in one child process and each peer in its own
(``--isolate``, ``isolated_kernel_bench``): a kernel compiler that aborts costs its part only, recorded as a row.

Results: ``kernels.csv``, ``kernels.json``, ``config.json`` and ``kernels.png`` under ``--out``.
Run: ``python -m seqzoo.bench.kernels --device cpu --out results/kernels``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from ..errors import InputError

OPS = ("mlstm", "gla", "attention", "scan", "rglru", "conv")
# attainable limits, FLOP/s and bytes/s: dense bf16 GEMM ≈ 80 % of the 989 TFLOP/s datasheet peak, HBM copy ≈ 90 %
# of the 3.35 / 4.8 TB/s datasheet bandwidth (NVIDIA H100 / H200 datasheets); not measured by seqzoo
PEAK_FLOPS = 795e12
HBM_BW = {"H100": 3.0e12, "H200": 4.3e12}


# ------------------------------------------------------------------------------------------------ rooflines
def scan_roofline_ms(B: int, T: int, D: int, s: int = 2, backward: bool = False, gpu: str = "H100") -> float:
    """Real diagonal scan ``h_t = a_t h_{t-1} + b_t``, N = B·T·D: 3·N·s bytes forward, ≈8·N·s forward+backward; always memory bound."""
    return scan_bytes(B, T, D, s, backward) / HBM_BW[gpu] * 1e3


def scan_bytes(B: int, T: int, D: int, s: int = 2, backward: bool = False) -> int:
    """Bytes the diagonal scan must move, N = B·T·D: reads a, b and writes h (3·N·s); ≈8·N·s with the backward."""
    return (8 if backward else 3) * B * T * D * s


def rglru_roofline_ms(B: int, T: int, D: int, s: int = 2, backward: bool = False, gpu: str = "H100") -> float:
    """Fused RG-LRU: forward reads x and two gate pre-activations and writes y, 4·N·s; our
    backward reads x, both gates, y, dy and writes dx and both gate gradients, 8·N·s more (12·N·s fwd+bwd)."""
    return rglru_bytes(B, T, D, s, backward) / HBM_BW[gpu] * 1e3


def rglru_bytes(B: int, T: int, D: int, s: int = 2, backward: bool = False) -> int:
    """Bytes the fused RG-LRU must move: 4·N·s forward, 12·N·s forward+backward (``rglru_roofline_ms``)."""
    return (12 if backward else 4) * B * T * D * s


def gla_roofline_ms(
    B: int,
    T: int,
    H: int,
    Dk: int,
    Dv: int,
    C: int,
    Dg: int,
    s: int = 2,
    s_state: int = 4,
    states_on_chip: bool = True,
    backward: bool = False,
    gpu: str = "H100",
) -> float:
    """max(FLOPs / P, bytes / BW) for chunked GLA / mLSTM (the chunkwise form of GLA, arXiv:2312.06635); fwd+bwd ≈ 3x the forward (both terms).

    ``states_on_chip``: the seqzoo kernels keep chunk states in registers, so the state term is dropped.
    """
    flops = B * H * T * (2 * C * (Dk + Dv) + 4 * Dk * Dv)
    nbytes = B * H * T * (2 * Dk + Dv + Dg + Dv) * s
    if not states_on_chip:
        nbytes += 2 * B * H * (T // C) * Dk * Dv * s_state
    ms = max(flops / PEAK_FLOPS, nbytes / HBM_BW[gpu]) * 1e3
    return ms * (3 if backward else 1)


def attention_roofline_ms(B: int, T: int, H: int, D: int, backward: bool = False) -> float:
    """FlashAttention's count (arXiv:2307.08691): causal 2·B·H·T²·D FLOPs forward, 3.5x for fwd+bwd."""
    return 2 * B * H * T * T * D * (3.5 if backward else 1) / PEAK_FLOPS * 1e3


def conv_roofline_ms(B: int, T: int, C: int, s: int = 2, backward: bool = False, gpu: str = "H100") -> float:
    """Depthwise causal conv (k small): forward reads x once and writes y once, 2·N·s; our fwd+bwd count adds the
    backward's reads of x and dy and write of dx, 5·N·s (weights, bias, state and the dw / dbias partials are
    O(C·k) / O(B·C·T/256·k) and left out). Always memory bound (2k FLOPs per element)."""
    return (5 if backward else 2) * B * T * C * s / HBM_BW[gpu] * 1e3


# ------------------------------------------------------------------------------------------------ timing
def _time_cuda(fn: Callable[[], Any]) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))


def _time_once(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def _time_cpu_interleaved(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Min of ``rounds`` calls each, contenders interleaved round-robin (ms)."""
    best = {k: float("inf") for k in fns}
    for fn in fns.values():  # warm-up
        fn()
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], (time.perf_counter() - t0) * 1e3)
    return best


def _fwd_bwd(f: Callable[..., Any], inputs: list[torch.Tensor]):
    """Closures for forward (no grad) and forward+backward of ``f(*inputs)`` (first output, squared-mean loss)."""
    leaves = [x.detach().requires_grad_(x.is_floating_point()) for x in inputs]

    def fwd():
        with torch.no_grad():
            return f(*inputs)

    def fwdbwd():
        for x in leaves:
            x.grad = None
        out = f(*leaves)
        out = out[0] if isinstance(out, tuple) else out
        out.float().square().mean().backward()

    return fwd, fwdbwd


# ------------------------------------------------------------------------------------------------ contenders
def _mlstm_contenders(B, T, H, K, V, dev, dtype, cuda: bool) -> dict[str, tuple]:
    from ..ops.mlstm import mlstm_chunkwise, mlstm_naive_recurrent

    g = torch.Generator(device="cpu").manual_seed(0)
    q, k = (torch.randn(B, T, H, K, generator=g).to(dev, dtype) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=g).to(dev, dtype)
    i, f = (torch.randn(B, T, H, generator=g).to(dev, dtype) for _ in range(2))
    ins = [q, k, v, i, f]
    out: dict[str, tuple] = {"torch chunkwise C=64": (lambda *a: mlstm_chunkwise(*a, chunk_size=64), ins)}
    if cuda:
        from ..ops.mlstm.triton import mlstm_triton

        out[f"seqzoo triton (bwd={_mlstm_backward_label(mlstm_triton)})"] = (
            lambda *a: mlstm_triton(*a, chunk_size=64),
            ins,
        )
        out.update(peer_contenders("mlstm", ins))
    else:
        out["torch per-token loop (baseline)"] = (mlstm_naive_recurrent, ins)
    return out


# ------------------------------------------------------------------------------------------------ peers
# Each builder takes seqzoo's inputs (layouts and parametrisation of the seqzoo op of the same row) and returns the
# peer's call computing the same function, outputs in seqzoo's layout: (fn, inputs) with fn(*inputs) -> output.
# tests/test_kernels_peers.py runs them against seqzoo's naive references.


def _peer_mlstm_kernels(q, k, v, i, f, chunk_size: int = 128):
    """NX-AI ``mlstm_kernels`` ``chunkwise--triton_xl_chunk`` (TFLA, arXiv:2503.14376): the same mLSTM as
    ``ops.mlstm.mlstm`` (q·k scaled by K^-1/2 inside, forget gate log σ(f), input gate exp(i), normaliser
    max(|n·q|, e^{-m}) + 1e-6), in (B, H, T, D) layout: inputs transposed, h transposed back to (B, T, H, V)."""
    from mlstm_kernels.torch import get_mlstm_kernel

    kern = get_mlstm_kernel("chunkwise--triton_xl_chunk")
    bhtd = [t.transpose(1, 2).contiguous() for t in (q, k, v, i, f)]
    return (lambda *a: kern(*a, chunk_size=chunk_size).transpose(1, 2), bhtd)


def _peer_fla_gla(q, k, v, log_a):
    """flash-linear-attention ``chunk_gla``: same (B, T, H, D) layout and per-key-dim log decay ``g`` = log_a;
    fla scales q by K^-1/2 by default and seqzoo's GLA (``ops/gateloop/triton.py: gla_triton``) does not:
    ``scale=1``. Returns (o, final state): o."""
    from fla.ops.gla import chunk_gla

    return (lambda *a: chunk_gla(*a, scale=1.0)[0], [q, k, v, log_a])


def _peer_fla_simple_gla(q, k, v, log_a):
    """flash-linear-attention ``chunk_simple_gla``: one log decay per head and step, ``g = log_a[..., 0]``
    (the seqzoo GLA with that decay on every key dim computes the same), ``scale=1`` as above."""
    from fla.ops.simple_gla import chunk_simple_gla

    return (
        lambda q_, k_, v_, g_: chunk_simple_gla(q_, k_, v_, g_, scale=1.0)[0],
        [q, k, v, log_a[..., 0].contiguous()],
    )


def _peer_dao_conv(x, w, b):
    """Dao-AILab ``causal-conv1d`` ``causal_conv1d_fn(x (B, C, T), weight (C, k), bias)``: seqzoo's (B, T, C) input
    transposed (channel-last strides, which it takes), output transposed back; no activation."""
    from causal_conv1d import causal_conv1d_fn

    return (lambda x_, w_, b_: causal_conv1d_fn(x_.transpose(1, 2), w_, b_).transpose(1, 2), [x, w, b])


PEERS: dict[str, dict[str, Callable]] = {
    "mlstm": {"mlstm_kernels triton_xl_chunk": _peer_mlstm_kernels},
    "gla": {"fla chunk_gla": _peer_fla_gla, "fla chunk_simple_gla": _peer_fla_simple_gla},
    "conv": {"causal-conv1d (Dao)": _peer_dao_conv},
}


def peer_contenders(op: str, ins: list, **kwargs) -> dict[str, tuple | str]:
    """The peer kernels of ``op`` built from seqzoo's inputs ``ins``: name -> (fn, inputs), or a string when a
    peer cannot be built: ``"not installed: ..."`` (ImportError) or the error (any other exception). The sweep
    records a string as a row with that error and goes on; errors while running land in the row the same way."""
    out: dict[str, tuple | str] = {}
    for name, build in PEERS[op].items():
        try:
            out[name] = build(*ins, **kwargs)
        except ImportError as e:
            out[name] = f"not installed: {e}"
        except Exception as e:  # an API the call site does not match: a row with the error
            out[name] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


def _mlstm_backward_label(fn) -> str:
    """The backward ``mlstm_triton`` runs by default, read from its ``backward=`` parameter (absent: the PyTorch
    recompute, as before that parameter existed)."""
    import inspect

    param = inspect.signature(fn).parameters.get("backward")
    default = param.default if param is not None and param.default is not inspect.Parameter.empty else "torch"
    return "torch-recompute" if default == "torch" else str(default)


def _gla_contenders(B, T, H, K, V, dev, dtype, cuda: bool) -> dict[str, tuple]:
    from ..ops.gateloop import gateloop_chunkwise, gateloop_naive

    g = torch.Generator(device="cpu").manual_seed(1)
    q, k = (torch.randn(B, T, H, K, generator=g).to(dev, dtype) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=g).to(dev, dtype)
    log_a = (-torch.rand(B, T, H, K, generator=g) * 0.1).to(dev, dtype)
    ins = [q, k, v, log_a]
    out: dict[str, tuple] = {"torch chunkwise C=64 (complex)": (lambda *a: gateloop_chunkwise(*a, chunk_size=64), ins)}
    if cuda:
        from ..ops.gateloop.triton import gla_triton

        out["seqzoo triton"] = (lambda *a: gla_triton(*a), ins)
        out.update(peer_contenders("gla", ins))
    else:
        out["torch per-token loop (baseline)"] = (gateloop_naive, ins)
    return out


def _scan_contenders(B, T, D, dev, dtype, cuda: bool) -> dict[str, tuple]:
    from ..ops.rglru import linear_scan_chunked, linear_scan_naive

    g = torch.Generator(device="cpu").manual_seed(2)
    a = torch.rand(B, T, D, generator=g).to(dev, dtype)
    b = torch.randn(B, T, D, generator=g).to(dev, dtype)
    out: dict[str, tuple] = {"torch two-level chunked": (linear_scan_chunked, [a, b])}
    if cuda:
        from ..ops.rglru.triton import linear_scan_triton

        out["seqzoo triton"] = (lambda a_, b_: linear_scan_triton(a_, b_, out_dtype=dtype), [a, b])
    else:
        out["torch per-token loop (baseline)"] = (linear_scan_naive, [a, b])
    return out


def _rglru_contenders(B, T, D, dev, dtype, cuda: bool) -> dict[str, tuple]:
    from ..ops.rglru import rglru, rglru_naive

    g = torch.Generator(device="cpu").manual_seed(4)
    x, gx, ga = (torch.randn(B, T, D, generator=g).to(dev, dtype) for _ in range(3))
    ap = torch.randn(D, generator=g).to(dev, dtype)
    ins = [x, gx, ga, ap]
    out: dict[str, tuple] = {"torch gates + chunked scan": (lambda *a: rglru(*a, mode="scan"), ins)}
    if cuda:
        from ..ops.rglru.triton import rglru_fused_triton, rglru_triton

        out["seqzoo triton fused"] = (rglru_fused_triton, ins)
        out["torch gates + triton scan"] = (rglru_triton, ins)
    else:
        out["torch per-token loop (baseline)"] = (rglru_naive, ins)
    return out


def _conv_contenders(B, T, C, dev, dtype, cuda: bool, k: int = 4) -> dict[str, tuple]:
    from ..ops.causal_conv import causal_conv1d, causal_conv1d_naive

    g = torch.Generator(device="cpu").manual_seed(5)
    x = torch.randn(B, T, C, generator=g).to(dev, dtype)
    w = (torch.randn(C, k, generator=g) / k**0.5).to(dev, dtype)
    b = torch.randn(C, generator=g).to(dev, dtype)
    ins = [x, w, b]
    out: dict[str, tuple] = {"torch shifted taps": (lambda *a: causal_conv1d(*a, mode="torch"), ins)}
    if cuda:
        out["seqzoo triton"] = (lambda *a: causal_conv1d(*a, mode="triton"), ins)
        out.update(peer_contenders("conv", ins))
    else:
        out["torch per-tap sum (baseline)"] = (causal_conv1d_naive, ins)
    return out


def _sdpa_contender(B, T, H, D, dev, dtype) -> dict[str, tuple]:
    g = torch.Generator(device="cpu").manual_seed(3)
    q, k, v = (torch.randn(B, H, T, D, generator=g).to(dev, dtype) for _ in range(3))
    return {"torch SDPA causal": (lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), [q, k, v])}


# ------------------------------------------------------------------------------------------------ driver
def run_kernel_bench(
    device: str | None = None,
    out_dir: str | Path = "results/kernels",
    lengths: list[int] | None = None,
    tokens: int | None = None,
    n_heads: int | None = None,
    dk: int | None = None,
    dv: int | None = None,
    gpu: str = "H100",
    dtype: str | None = None,
    rounds: int = 3,
    threads: int | None = 1,
    plot: bool = True,
    smoke: bool = False,
    ops: tuple[str, ...] = OPS,
    impls: tuple[str, ...] | None = None,
    peers: bool = True,
) -> list[dict[str, Any]]:
    """Run the benchmark and write results; returns the rows. See the module docstring.

    ``tokens`` (B·T per point), ``n_heads``, ``dk``, ``dv``: the shapes; unset, GPU mode takes TFLA's (65,536 tokens,
    16 heads, 128, 256) and CPU mode small ones (max(lengths) tokens, 2 heads, 32, 32). Set values are used as given.
    ``threads``: CPU threads (default 1: on a shared 2-core box two threads are often 10-20x slower).
    ``ops``: subset of ``OPS`` to run. ``impls``: only the contenders of these names (default all);
    ``peers=False``: none of the peers (``PEERS``). ``isolated_kernel_bench`` uses both to give each peer a process.
    ``smoke``: run the GPU code path (Triton contenders, roofline columns) on CPU under TRITON_INTERPRET=1 at the
    given (tiny) shapes with a single untimed-quality call per point: checks the plumbing, its times mean nothing.
    """
    for name, value in (("tokens", tokens), ("n_heads", n_heads), ("dk", dk), ("dv", dv), ("rounds", rounds)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise InputError(f"{name} must be a positive int, got {value!r}")
    bad = [op for op in ops if op not in OPS]
    if bad:
        raise InputError(f"unknown ops {bad}; choose from {OPS}")
    if smoke:
        from ..kernels import interpreting

        if not interpreting():
            raise InputError("smoke=True needs TRITON_INTERPRET=1 (it runs the GPU path on CPU)")
        device = "cpu"
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.startswith("cuda") or smoke  # "GPU mode": Triton contenders + roofline columns
    if threads and not cuda:
        torch.set_num_threads(threads)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("device='cuda' requested but CUDA is not available")
    if gpu not in HBM_BW:
        raise InputError(f"gpu must be one of {sorted(HBM_BW)}, got {gpu!r}")
    dt = getattr(torch, dtype or ("bfloat16" if cuda else "float32"))
    s = torch.finfo(dt).bits // 8
    if smoke:
        lengths = lengths or [16, 32]
    if not cuda:  # small shapes by default; ratios only
        lengths = lengths or [128, 256, 512, 1024]
        defaults = (max(lengths), 2, 32, 32)
    else:
        defaults = (65536, 16, 128, 256)
    tokens, n_heads, dk, dv = (given or default for given, default in zip((tokens, n_heads, dk, dv), defaults))
    lengths = lengths or [1024, 2048, 4096, 8192, 16384, 32768, 65536]
    if any(T < 1 for T in lengths):
        raise InputError(f"lengths must be positive, got {lengths}")
    dev = torch.device(device)
    rows: list[dict[str, Any]] = []

    def record(op, shape, build, bounds):
        if op not in ops:
            return
        contenders = build()  # tensors are allocated only for the ops that run
        skip = set() if peers else set(PEERS.get(op, {}))
        contenders = {n: c for n, c in contenders.items() if n not in skip and (impls is None or n in impls)}
        if cuda:
            for name, built in contenders.items():
                row = {"op": op, **shape, "impl": name}
                if isinstance(built, str):  # a peer that could not be built: its row says why
                    rows.append({**row, "fwd_ms": None, "fwdbwd_ms": None, "error": built})
                    continue
                fwd, fwdbwd = _fwd_bwd(*built)
                for key, clos in (("fwd_ms", fwd), ("fwdbwd_ms", fwdbwd)):
                    try:
                        row[key] = _time_once(clos) if smoke else _time_cuda(clos)
                    except Exception as e:  # OOM or unsupported shape: recorded, the sweep goes on
                        row[key] = None
                        row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
                for key, bound in bounds.items():
                    ms = row.get(key.replace("bound_", "") + "_ms")
                    row[key] = bound
                    row["frac_roofline_" + key.replace("bound_", "")] = (bound / ms) if ms else None
                rows.append(row)
                if not smoke:
                    torch.cuda.empty_cache()
        else:
            pairs = {name: _fwd_bwd(fn, ins) for name, (fn, ins) in contenders.items()}
            for phase, idx in (("fwd", 0), ("fwdbwd", 1)):
                t = _time_cpu_interleaved({n: p[idx] for n, p in pairs.items()}, rounds)
                base = next((v for n, v in t.items() if "baseline" in n), None)
                for name, ms in t.items():
                    row = next((r for r in rows if r["op"] == op and r["impl"] == name and r["T"] == shape["T"]), None)
                    if row is None:
                        row = {"op": op, **shape, "impl": name}
                        rows.append(row)
                    row[f"{phase}_ms"] = ms
                    row[f"{phase}_speedup_vs_loop"] = (base / ms) if base else None

    for T in lengths:
        B = max(1, tokens // T)
        shape = {"B": B, "T": T, "H": n_heads, "Dk": dk, "Dv": dv}
        rec_bounds = {
            "bound_fwd": gla_roofline_ms(B, T, n_heads, dk, dv, 64, 2, s, gpu=gpu),
            "bound_fwdbwd": gla_roofline_ms(B, T, n_heads, dk, dv, 64, 2, s, backward=True, gpu=gpu),
        }
        record(
            "mlstm", shape, lambda: _mlstm_contenders(B, T, n_heads, dk, dv, dev, dt, cuda), rec_bounds if cuda else {}
        )
        gla_bounds = {
            "bound_fwd": gla_roofline_ms(B, T, n_heads, dk, dv, 32, dk, s, gpu=gpu),
            "bound_fwdbwd": gla_roofline_ms(B, T, n_heads, dk, dv, 32, dk, s, backward=True, gpu=gpu),
        }
        record("gla", shape, lambda: _gla_contenders(B, T, n_heads, dk, dv, dev, dt, cuda), gla_bounds if cuda else {})
        ah, ad = (32, 128) if cuda and not smoke else (n_heads, dk)
        record(
            "attention",
            {"B": B, "T": T, "H": ah, "Dk": ad, "Dv": ad},
            lambda: _sdpa_contender(B, T, ah, ad, dev, dt),
            {
                "bound_fwd": attention_roofline_ms(B, T, ah, ad),
                "bound_fwdbwd": attention_roofline_ms(B, T, ah, ad, True),
            }
            if cuda
            else {},
        )
    if smoke:
        scan_shapes = [(1, T, 32) for T in lengths]
    elif cuda:
        scan_shapes = [(8, 4096, 2048), (16, 2048, 2560), (1, 65536, 4096)]
    else:
        scan_shapes = [(2, T, 64) for T in lengths]
    for B, T, D in scan_shapes:
        record(
            "scan",
            {"B": B, "T": T, "H": 1, "Dk": D, "Dv": 1},
            lambda: _scan_contenders(B, T, D, dev, dt, cuda),
            {
                "bound_fwd": scan_roofline_ms(B, T, D, s, gpu=gpu),
                "bound_fwdbwd": scan_roofline_ms(B, T, D, s, True, gpu),
            }
            if cuda
            else {},
        )
        record(
            "rglru",
            {"B": B, "T": T, "H": 1, "Dk": D, "Dv": 1},
            lambda: _rglru_contenders(B, T, D, dev, dt, cuda),
            {
                "bound_fwd": rglru_roofline_ms(B, T, D, s, gpu=gpu),
                "bound_fwdbwd": rglru_roofline_ms(B, T, D, s, True, gpu),
            }
            if cuda
            else {},
        )
        record(
            "conv",
            {"B": B, "T": T, "H": 1, "Dk": D, "Dv": 1},
            lambda: _conv_contenders(B, T, D, dev, dt, cuda),
            {
                "bound_fwd": conv_roofline_ms(B, T, D, s, gpu=gpu),
                "bound_fwdbwd": conv_roofline_ms(B, T, D, s, True, gpu),
            }
            if cuda
            else {},
        )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "device": device,
        "device_name": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "smoke_interpreter": smoke,
        "dtype": str(dt),
        "tokens": tokens,
        "n_heads": n_heads,
        "dk": dk,
        "dv": dv,
        "lengths": lengths,
        "gpu_limits": gpu,
        "timing": "triton.testing.do_bench median" if cuda else f"min of {rounds}, interleaved",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    write_results(rows, config, out, plot, cuda)
    return rows


def write_results(rows: list[dict[str, Any]], config: dict, out: Path, plot: bool, cuda: bool) -> None:
    """``config.json``, ``kernels.json``, ``kernels.csv`` and (``plot``) ``kernels.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "kernels.json").write_text(json.dumps(rows, indent=2))
    fields = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("op", "impl", "B", "T", "H", "Dk", "Dv"), k))
    with open(out / "kernels.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    if plot:
        plot_kernels(rows, out / "kernels.png", cuda)


def _child_command(argv: list[str]) -> list[str]:
    """The command of one isolated part (a seam for the tests, which substitute a process that aborts)."""
    return [sys.executable, "-m", "seqzoo.bench.kernels", *argv]


def isolated_kernel_bench(argv: list[str], ops: tuple[str, ...], out_dir: str | Path, plot: bool = True) -> list[dict]:
    """The benchmark with each op's seqzoo and torch contenders in one child process and each peer in its own.

    A kernel compiler can abort the whole process (on an H200 with triton 3.6: an LLVM assertion while compiling the
    mlstm_kernels peer's parallel forward kernel, docs/benchmarks.md), which no ``except`` catches; isolated, the
    abort costs only its own part, which becomes a row with the exit status and the last line the child printed.
    ``argv``: the CLI arguments of the run, without ``--ops`` / ``--out``. The merged files are rewritten under
    ``out_dir`` after every part, so a run stopped at a time limit keeps what finished."""
    import subprocess
    import tempfile

    out = Path(out_dir)
    rows: list[dict] = []
    config: dict | None = None
    with tempfile.TemporaryDirectory(prefix="seqzoo-kernels-") as tmp:
        for op in ops:
            parts = [("seqzoo and torch", ["--no-peers"])] + [(name, ["--impls", name]) for name in PEERS.get(op, {})]
            for j, (label, extra) in enumerate(parts):
                part_out = Path(tmp) / f"{op}-{j}"
                cmd = _child_command([*argv, "--ops", op, "--out", str(part_out), "--no-isolate", "--no-plot", *extra])
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode == 0 and (part_out / "kernels.json").exists():
                    rows += json.loads((part_out / "kernels.json").read_text())
                    config = config or json.loads((part_out / "config.json").read_text())
                else:
                    rows.append(
                        {"op": op, "impl": label, "fwd_ms": None, "fwdbwd_ms": None, "error": child_failure(done)}
                    )
                # the files so far after every part: a run stopped at a time limit keeps what finished
                _write_isolated(rows, config, out, plot=False)
    _write_isolated(rows, config, out, plot)
    return rows


def child_failure(done) -> str:
    """Why a child process (``subprocess.run(..., capture_output=True, text=True)``) failed: its exit status and the
    last line it printed (stderr first), e.g. a compiler's assertion."""
    said = [ln for ln in (done.stderr or done.stdout or "").splitlines() if ln.strip()]
    return f"process exited with {done.returncode}" + (f": {said[-1].strip()[:300]}" if said else "")


def _write_isolated(rows: list[dict], config: dict | None, out: Path, plot: bool) -> None:
    """``write_results`` of the merged parts; ``config``: the first finished part's (None before one finished)."""
    config = {**(config or {}), "isolated": "one process per op (seqzoo + torch) and per peer"}
    cuda = config.get("device", "cuda").startswith("cuda") or bool(config.get("smoke_interpreter"))
    write_results(rows, config, out, plot, cuda)


def plot_kernels(rows: list[dict[str, Any]], path: str | Path, cuda: bool) -> None:
    """One panel per op: fwd+bwd time (CUDA) or speed-up vs the loop (CPU) against T, one line per implementation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ops = [op for op in OPS if any(r["op"] == op for r in rows)]
    fig, axes = plt.subplots(1, len(ops), figsize=(4.2 * len(ops), 3.6), squeeze=False)
    key = "fwdbwd_ms" if cuda else "fwdbwd_speedup_vs_loop"
    for ax, op in zip(axes[0], ops):
        for impl in dict.fromkeys(r["impl"] for r in rows if r["op"] == op):
            pts = sorted((r["T"], r.get(key)) for r in rows if r["op"] == op and r["impl"] == impl and r.get(key))
            if pts:
                ax.plot(*zip(*pts), marker="o", label=impl)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(op)
        ax.set_xlabel("T")
        ax.set_ylabel("fwd+bwd ms" if cuda else "fwd+bwd speed-up vs per-token loop (same run)")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seqzoo.bench.kernels", description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="cuda | cpu (default: cuda when available)")
    p.add_argument("--out", default="results/kernels")
    p.add_argument("--lengths", default=None, help="comma-separated T values")
    p.add_argument(
        "--gpu", default="H100", choices=sorted(HBM_BW), help="whose measured HBM bandwidth the roofline uses"
    )
    p.add_argument("--dtype", default=None)
    p.add_argument("--rounds", type=int, default=3, help="CPU: interleaved rounds (min is reported)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads")
    p.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " + ",".join(OPS))
    p.add_argument("--smoke", action="store_true", help="GPU code path on CPU under TRITON_INTERPRET=1 (plumbing only)")
    shapes = "default: GPU 65536 / 16 / 128 / 256 (TFLA's shapes); CPU max(lengths) / 2 / 32 / 32"
    p.add_argument("--tokens", type=int, default=None, help="B*T per point; " + shapes)
    p.add_argument("--n-heads", type=int, default=None)
    p.add_argument("--dk", type=int, default=None)
    p.add_argument("--dv", type=int, default=None)
    p.add_argument("--impls", default=None, help="comma-separated contender names to run (default: all)")
    p.add_argument("--no-peers", action="store_true", help="leave out the peer kernels")
    p.add_argument("--no-plot", action="store_true")
    iso = p.add_mutually_exclusive_group()
    iso.add_argument(
        "--isolate",
        dest="isolate",
        action="store_true",
        default=None,
        help="one process per op and per peer, so a compiler abort costs only its part (default on CUDA)",
    )
    iso.add_argument("--no-isolate", dest="isolate", action="store_false")
    a = p.parse_args(argv)
    lengths = [int(x) for x in a.lengths.split(",")] if a.lengths else None
    ops = tuple(a.ops.split(","))
    bad = [op for op in ops if op not in OPS]
    if bad:
        raise InputError(f"--ops: unknown {bad}; choose from {', '.join(OPS)}")
    isolate = a.isolate
    if isolate is None:
        isolate = not a.smoke and (a.device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    if isolate:
        argv_in = list(sys.argv[1:] if argv is None else argv)
        keep = _without_options(argv_in, {"--ops", "--out", "--isolate", "--no-isolate", "--no-plot"})
        rows = isolated_kernel_bench(keep, ops, a.out, plot=not a.no_plot)
        _print_rows(rows, a.out)
        return 0
    rows = run_kernel_bench(
        a.device,
        a.out,
        lengths,
        tokens=a.tokens,
        n_heads=a.n_heads,
        dk=a.dk,
        dv=a.dv,
        gpu=a.gpu,
        dtype=a.dtype,
        rounds=a.rounds,
        threads=a.threads,
        smoke=a.smoke,
        ops=ops,
        impls=None if a.impls is None else tuple(a.impls.split(",")),
        peers=not a.no_peers,
        plot=not a.no_plot,
    )
    _print_rows(rows, a.out)
    return 0


def _without_options(argv: list[str], names: set[str]) -> list[str]:
    """``argv`` less the options in ``names`` and their values (``--x v`` and ``--x=v``; flags have none)."""
    flags = {"--isolate", "--no-isolate", "--no-plot", "--no-peers", "--smoke"}
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in names:
            skip = "=" not in arg and name not in flags
            continue
        out.append(arg)
    return out


def _print_rows(rows: list[dict], out: str | Path) -> None:
    for r in rows:
        cells = {
            k: (f"{v:.3g}" if isinstance(v, float) else v)
            for k, v in r.items()
            if k.endswith(("_ms", "_vs_loop")) or k.startswith("frac") or k == "error"
        }
        print(r["op"], f"T={r.get('T')}", r["impl"], cells)
    print(f"results: {out}/kernels.csv, kernels.json, config.json, kernels.png")


if __name__ == "__main__":
    raise SystemExit(main())
