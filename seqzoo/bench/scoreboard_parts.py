"""The measurements behind the GPU scoreboard (``scoreboard.py``): each part checks, then times, some implementations.

A *part* is what one child process runs (``python -m seqzoo.bench.scoreboard_parts --part NAME --records FILE``):
a compiler abort or a CUDA fault then costs that part alone, and a part that outlasts its time budget is killed
without losing the records it already wrote. Each record (one JSON line, written as soon as it is measured) is one
implementation (``impl``) at one length ``T`` and phase (``fwd``, ``fwdbwd`` or ``copy``).

Every implementation is checked before it is timed: it runs forward and backward on the first ``check_rows``
sequences of a fresh draw of inputs, and its output and the gradient of every floating input are compared with the
op's PyTorch path in float64 on the same values (‖x − ref‖ / ‖ref‖, tolerance by dtype, ``TOL``; NaN never passes).
A failed check is a record with the gaps and no time. Peers (mlstm_kernels, fla) are held to the output only:
their gradients follow their own conventions, so the gradient gaps are recorded but do not refuse the time.
The reference paths are themselves tested against the naive loops (``tests/ops``).

Shapes: ``GPU_SHAPES`` (TFLA's: B·T = 65,536 tokens, H = 16, K = 128, V = 256, bf16; RG-LRU width 2048; sLSTM 4
heads of 64) or ``SMOKE_SHAPES`` (a few dozen tokens in float32, for the Triton interpreter on a CPU).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .device_timer import copy_closure, summary, time_calls
from .kernels import rglru_bytes, scan_bytes

# ‖x − ref‖ / ‖ref‖ bars by input dtype: bf16 operands land between 1e-3 and 1e-2, fp32 (IEEE dots) far under 1e-3
TOL = {torch.bfloat16: 2e-2, torch.float16: 1e-2, torch.float32: 1e-3}


@dataclass(frozen=True)
class Shapes:
    tokens: int  # B·T of every timed point
    lengths: tuple[int, ...]
    n_heads: int
    dk: int
    dv: int
    d_rnn: int  # RG-LRU / scan width
    slstm_heads: int
    slstm_head_dim: int
    dtype: torch.dtype
    check_rows: int  # sequences of the correctness check (rows are independent in every op here)


GPU_SHAPES = Shapes(65536, (4096, 16384), 16, 128, 256, 2048, 4, 64, torch.bfloat16, 2)
SMOKE_SHAPES = Shapes(32, (16, 32), 1, 16, 16, 32, 1, 8, torch.float32, 1)


@dataclass(frozen=True)
class Timing:
    budget_s: float  # per implementation and point: repeats continue until this is spent
    min_repeats: int
    warmup: int  # calls of each phase at the timed shape before the check (compiles, autotuning)


GPU_TIMING = Timing(budget_s=2.0, min_repeats=3, warmup=1)
SMOKE_TIMING = Timing(budget_s=0.0, min_repeats=1, warmup=0)  # the check has run the kernels: no warm-up


@dataclass
class Impl:
    """One implementation: ``build(inputs)`` -> ``(fn, args)`` with ``fn(*args)`` the output in seqzoo's layout
    (``args`` in the implementation's own layout, made outside the timed call); ``grad_to_ours`` maps the gradient
    of each arg back to seqzoo's layout."""

    key: str
    build: Callable[[list[torch.Tensor]], tuple[Callable[..., torch.Tensor], list[torch.Tensor]]]
    grad_to_ours: Callable[[torch.Tensor], torch.Tensor] = lambda t: t
    gradients_gate: bool = True  # False for peers: gradient gaps recorded, not required
    bytes_moved: Callable[[int, int, str], int] | None = None  # (B, T, phase) -> bytes, memory-bound ops only


@dataclass
class Family:
    """Inputs and reference of one op; ``make(B, T, gen)`` draws the inputs, ``reference(*fp64 inputs)`` is the
    output the implementations are checked against."""

    name: str
    make: Callable[[int, int, torch.Generator], list[torch.Tensor]]
    reference: Callable[..., torch.Tensor]
    phases: tuple[str, ...] = ("fwdbwd",)
    impls: list[Impl] = field(default_factory=list)


@dataclass
class Context:
    device: torch.device
    shapes: Shapes
    timing: Timing
    emit: Callable[[dict[str, Any]], None]


# ------------------------------------------------------------------------------------------------ checking
def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """‖x − ref‖ / ‖ref‖ in float64 (inf when not finite; the plain norm when ref is 0)."""
    d = float(torch.linalg.vector_norm(x.double() - ref.double()))
    scale = float(torch.linalg.vector_norm(ref.double()))
    gap = d / scale if scale > 0 else d
    return gap if math.isfinite(gap) else math.inf


def _forward_backward(fn, args: list[torch.Tensor], dy: torch.Tensor) -> tuple[torch.Tensor, list]:
    leaves = [a.detach().requires_grad_(a.is_floating_point()) for a in args]
    y = fn(*leaves)
    y.backward(dy.to(y.dtype))
    return y.detach(), [leaf.grad for leaf in leaves]


def reference_of(family: Family, inputs: list[torch.Tensor], gen: torch.Generator):
    """The float64 reference on these inputs: ``(y, input gradients, dy)`` for a random output gradient ``dy``
    (drawn in the inputs' dtype, so that the implementations get the same dy, not a rounding of it)."""
    leaves = [t.detach().double().requires_grad_(t.is_floating_point()) for t in inputs]
    y = family.reference(*leaves)
    dy = torch.randn(y.shape, generator=gen, device=y.device).to(inputs[0].dtype).double()
    y.backward(dy)
    return y.detach(), [leaf.grad for leaf in leaves], dy


def check(impl: Impl, inputs: list[torch.Tensor], ref) -> dict[str, Any]:
    """Output and gradient gaps of ``impl`` against ``ref`` (``reference_of``'s result); ``ok`` gates its time."""
    fn, args = impl.build([t.detach() for t in inputs])
    y, grads = _forward_backward(fn, args, ref[2])
    tol = TOL[inputs[0].dtype]
    gaps = {"y": rel_err(y, ref[0])}
    for j, (g, r) in enumerate(zip(grads, ref[1])):  # an implementation taking fewer args: only theirs compared
        if r is not None:
            gaps[f"d{j}"] = rel_err(impl.grad_to_ours(g), r) if g is not None else math.inf
    gating = gaps if impl.gradients_gate else {"y": gaps["y"]}
    worst = max(gating.values())
    return {"ok": worst <= tol, "tol": tol, "worst": worst, "gaps": gaps}


# ------------------------------------------------------------------------------------------------ timing
def closures(impl: Impl, inputs: list[torch.Tensor], gen: torch.Generator):
    """``fwd`` (no grad) and ``fwdbwd`` (a random output gradient) calls of ``impl`` on ``inputs``."""
    fn, args = impl.build([t.detach() for t in inputs])
    leaves = [a.detach().requires_grad_(a.is_floating_point()) for a in args]
    with torch.no_grad():  # the output's shape for dy; also the first call (compiles) of the forward
        y = fn(*args)
    dy = torch.randn(y.shape, generator=gen, device=y.device, dtype=torch.float32).to(y.dtype)
    del y

    def fwd():
        with torch.no_grad():
            return fn(*args)

    def fwdbwd():
        for leaf in leaves:
            leaf.grad = None
        fn(*leaves).backward(dy)

    return {"fwd": fwd, "fwdbwd": fwdbwd}


def measure(ctx: Context, family: Family, impls: list[Impl]) -> None:
    """Warm up, check, then time each of ``impls`` at every length; one record per (impl, T, phase), emitted at once.

    The warm-up calls run at the timed shape before the check, so that compiling and autotuning (its key leaves out
    B and T, so it tunes once, at the first launch) see the shape that is timed, not the check's few rows."""
    s = ctx.shapes
    for T in s.lengths:
        B = max(1, s.tokens // T)
        gen = torch.Generator(device=ctx.device)
        gen.manual_seed(1000 + T)  # the check draws its own inputs, not the timed ones
        check_in = family.make(min(B, s.check_rows), T, gen)
        ref = None
        for impl in impls:
            base = {"family": family.name, "impl": impl.key, "T": T, "B": B}
            try:
                calls = _warm_calls(ctx, family, impl, B, T)
                ref = ref or reference_of(family, check_in, gen)
                verdict = check(impl, check_in, ref)
            except ImportError as e:
                _emit_all(ctx, family, {**base, "status": "not installed", "error": _said(e)})
                continue
            except Exception as e:  # noqa: BLE001 - a failing implementation is a record with its error, not a crash
                _emit_all(ctx, family, {**base, "status": "error", "error": _said(e)})
                continue
            if not verdict["ok"]:
                why = f"differs from the float64 reference: worst gap {verdict['worst']:.3g} > {verdict['tol']}"
                _emit_all(ctx, family, {**base, "status": "check failed", "check": verdict, "error": why})
                continue
            _time(ctx, family, impl, calls, {**base, "check": verdict}, B, T)
            del calls
            if ctx.device.type == "cuda":
                torch.cuda.empty_cache()


def _emit_all(ctx: Context, family: Family, rec: dict[str, Any]) -> None:
    for phase in family.phases:
        ctx.emit({**rec, "phase": phase})


def _warm_calls(ctx: Context, family: Family, impl: Impl, B: int, T: int) -> dict[str, Callable[[], Any]]:
    """The timed calls of ``impl`` on fresh inputs of the timed shape, each run ``ctx.timing.warmup`` times."""
    gen = torch.Generator(device=ctx.device)
    gen.manual_seed(T)
    calls = closures(impl, family.make(B, T, gen), gen)
    for _ in range(ctx.timing.warmup):
        for phase in family.phases:
            calls[phase]()
    return calls


def _time(ctx: Context, family: Family, impl: Impl, calls: dict, base: dict, B: int, T: int) -> None:
    t = ctx.timing
    for phase in family.phases:
        rec = {**base, "phase": phase}
        try:  # warmed up before the check already
            times = time_calls(calls[phase], ctx.device, t.budget_s, t.min_repeats, warmup=0)
        except Exception as e:  # noqa: BLE001 - e.g. a CUDA fault: recorded, the part goes on
            ctx.emit({**rec, "status": "error", "error": _said(e)})
            continue
        rec.update(status="ok", times_ms=times, **summary(times))
        if impl.bytes_moved is not None:
            rec["bytes"] = impl.bytes_moved(B, T, phase)
        ctx.emit(rec)


def measure_copy(ctx: Context) -> None:
    """A plain copy of one (B, T, d_rnn) activation at each length: the bandwidth the RG-LRU rows are held to."""
    s = ctx.shapes
    for T in s.lengths:
        B = max(1, s.tokens // T)
        base = {"family": "copy", "impl": "copy", "T": T, "B": B, "phase": "copy"}
        try:
            fn, nbytes = copy_closure(B * T * s.d_rnn, s.dtype, ctx.device)
            t = ctx.timing
            times = time_calls(fn, ctx.device, t.budget_s, t.min_repeats, warmup=max(1, t.warmup))
        except Exception as e:  # noqa: BLE001
            ctx.emit({**base, "status": "error", "error": _said(e)})
            continue
        ctx.emit({**base, "status": "ok", "bytes": nbytes, "times_ms": times, **summary(times)})


def _said(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


# ------------------------------------------------------------------------------------------------ the ops
def _randn(gen, *shape, scale: float = 1.0, shift: float = 0.0, dtype=None):
    dev = gen.device
    return (torch.randn(*shape, generator=gen, device=dev) * scale + shift).to(dtype)


def _same(fn: Callable[..., Any]) -> Callable[[list[torch.Tensor]], tuple]:
    """An implementation that takes seqzoo's inputs as they are and returns (output, state): its output."""
    return lambda ins: ((lambda *a: fn(*a)[0]), ins)


def mlstm_family(s: Shapes) -> Family:
    """mLSTM (xLSTM arXiv:2405.04517 §2.3), sigmoid forget and exponential input gates: TFLA's mLSTMexp cell.
    Gate pre-activations as a trained cell's: input ~ N(0, 2²), forget ~ N(2, 1) (mostly remembering)."""
    from ..ops.mlstm import mlstm, mlstm_chunkwise

    def make(B, T, g):
        H, K, V = s.n_heads, s.dk, s.dv
        return [
            _randn(g, B, T, H, K, dtype=s.dtype),
            _randn(g, B, T, H, K, dtype=s.dtype),
            _randn(g, B, T, H, V, dtype=s.dtype),
            _randn(g, B, T, H, scale=2.0, dtype=s.dtype),
            _randn(g, B, T, H, shift=2.0, dtype=s.dtype),
        ]

    return Family(
        "mlstm",
        make,
        lambda *a: mlstm_chunkwise(*a, chunk_size=64)[0],
        impls=[
            Impl("mlstm", _same(lambda *a: mlstm(*a, mode="triton"))),
            Impl("mlstm_kernels", _mlstm_kernels_peer, lambda t: t.transpose(1, 2), gradients_gate=False),
        ],
    )


def _mlstm_kernels_peer(ins):
    from .kernels import _peer_mlstm_kernels

    return _peer_mlstm_kernels(*ins)  # chunk 128, TFLA's; its args are (B, H, T, D): gradients transposed back


def gla_family(s: Shapes, complex_gates: bool) -> Family:
    """GateLoop (Katsch, arXiv:2311.01927, eq. 4 / §3.2): y_t = Re(q_tᵀ S_t), S_t = a_t ⊙ S_{t-1} + k_t v_tᵀ with
    per-key-dim transitions a_t = e^{log|a_t| + iθ_t}; real gates (θ = 0) are chunked gated linear attention.
    log|a| ~ −U(0, 0.1), θ ~ N(0, 0.1²)."""
    from ..ops.gateloop import gateloop, gateloop_chunkwise

    def make(B, T, g):
        H, K, V = s.n_heads, s.dk, s.dv
        ins = [
            _randn(g, B, T, H, K, dtype=s.dtype),
            _randn(g, B, T, H, K, dtype=s.dtype),
            _randn(g, B, T, H, V, dtype=s.dtype),
            (-torch.rand(B, T, H, K, generator=g, device=g.device) * 0.1).to(s.dtype),
        ]
        return ins + [_randn(g, B, T, H, K, scale=0.1, dtype=s.dtype)] if complex_gates else ins

    if complex_gates:
        return Family(
            "gateloop_complex",
            make,
            lambda *a: gateloop_chunkwise(*a, chunk_size=64)[0].real,
            impls=[
                Impl("gateloop_complex", _same(lambda *a: gateloop(*a, mode="triton"))),
            ],
        )
    return Family(
        "gateloop_real",
        make,
        lambda *a: gateloop_chunkwise(*a, chunk_size=64)[0].real,
        impls=[
            Impl("gla_real", _gla_ours),
            Impl("fla_chunk_gla", _fla_peer, gradients_gate=False),
        ],
    )


def _gla_ours(ins):
    from ..ops.gateloop.triton import gla_triton  # the chunked GLA kernel, output in v's dtype as fla's

    return (lambda *a: gla_triton(*a)[0]), ins


def _fla_peer(ins):
    from .kernels import _peer_fla_gla

    return _peer_fla_gla(*ins)


def scan_family(s: Shapes) -> Family:
    """The real diagonal scan of the RG-LRU (Griffin, arXiv:2402.19427 eq. 4): h_t = a_t ⊙ h_{t-1} + b_t,
    a ~ U(0, 1), b ~ N(0, 1); output in the input dtype (so the bytes are 3·N·s forward)."""
    from ..ops.rglru import linear_scan_chunked

    def make(B, T, g):
        a = torch.rand(B, T, s.d_rnn, generator=g, device=g.device).to(s.dtype)
        return [a, _randn(g, B, T, s.d_rnn, dtype=s.dtype)]

    def ours(ins):
        from ..ops.rglru.triton import linear_scan_triton

        return (lambda a, b: linear_scan_triton(a, b, out_dtype=a.dtype)[0]), ins

    size = torch.finfo(s.dtype).bits // 8
    nbytes = lambda B, T, phase: scan_bytes(B, T, s.d_rnn, size, phase == "fwdbwd")  # noqa: E731
    return Family(
        "scan",
        make,
        lambda a, b: linear_scan_chunked(a, b)[0],
        ("fwd", "fwdbwd"),
        [
            Impl("scan", ours, bytes_moved=nbytes),
        ],
    )


def rglru_family(s: Shapes) -> Family:
    """The fused RG-LRU layer (Griffin, arXiv:2402.19427 §2.4): gates, a_t = σ(Λ)^{c r_t}, the √(1 − a_t²)
    normalised input and the scan in one pass. x and gate pre-activations ~ N(0, 1), Λ ~ N(0, 1)."""
    from ..ops.rglru import rglru

    def make(B, T, g):
        return [_randn(g, B, T, s.d_rnn, dtype=s.dtype) for _ in range(3)] + [_randn(g, s.d_rnn, dtype=s.dtype)]

    size = torch.finfo(s.dtype).bits // 8
    nbytes = lambda B, T, phase: rglru_bytes(B, T, s.d_rnn, size, phase == "fwdbwd")  # noqa: E731
    return Family(
        "rglru_fused",
        make,
        lambda *a: rglru(*a, mode="scan")[0],
        ("fwd", "fwdbwd"),
        [
            Impl("rglru_fused", _same(lambda *a: rglru(*a, mode="triton")), bytes_moved=nbytes),
        ],
    )


def slstm_family(s: Shapes) -> Family:
    """The sLSTM cell (xLSTM arXiv:2405.04517 §2.2, eqs. 8-17), stabilised exponential gating, recurrent R per head.
    wx ~ N(0, 1), R ~ N(0, 1/d)."""
    from ..ops.slstm import slstm

    def make(B, T, g):
        H, d = s.slstm_heads, s.slstm_head_dim
        return [_randn(g, B, T, H, 4, d, dtype=s.dtype), _randn(g, H, d, 4, d, scale=d**-0.5, dtype=s.dtype)]

    return Family(
        "slstm",
        make,
        lambda *a: slstm(*a, mode="fused")[0],
        impls=[
            Impl("slstm_triton", _same(lambda *a: slstm(*a, mode="triton"))),
            Impl("slstm_loop", _same(lambda *a: slstm(*a, mode="fused"))),
            Impl("slstm_official", lambda ins: official_slstm_cell(ins, "cuda"), gradients_gate=False),
        ],
    )


_OFFICIAL_CELLS: dict[tuple, Any] = {}


def official_slstm_cell(ins, backend: str):
    """NX-AI xlstm's ``sLSTMCell`` with ``backend="cuda"`` (its CUDA kernels, compiled at first use for each batch
    size, which they take as a compile-time constant; ``"vanilla"``, its PyTorch loop, tests the mapping on a CPU). Its recurrent kernel takes seqzoo's R as it is (the same
    (H, d, 4, d) layout, ``seqzoo/parity/xlstm.py``) and a zero bias (seqzoo's wx holds the bias); its input is
    gate-major (B, T, 4·H·d), its output (B, H, T, d), transposed back. Only its output is checked (its R is a
    parameter of the module, so its gradient is not compared)."""
    from xlstm.blocks.slstm.cell import sLSTMCell, sLSTMCellConfig

    wx, R = ins
    if backend == "cuda" and wx.device.type != "cuda":  # not even a compile is tried (it needs nvcc and a GPU)
        raise RuntimeError(f"the CUDA backend runs on CUDA tensors, got {wx.device.type} tensors")
    B, T, H, _, d = wx.shape
    key = (backend, B, H, d, wx.dtype, wx.device)
    if key not in _OFFICIAL_CELLS:
        dtype = str(wx.dtype).replace("torch.", "")
        cfg = sLSTMCellConfig(hidden_size=H * d, num_heads=H, backend=backend, batch_size=B, dtype=dtype)
        _OFFICIAL_CELLS[key] = sLSTMCell(cfg).to(wx.device).train()
    cell = _OFFICIAL_CELLS[key]
    with torch.no_grad():
        cell.recurrent_kernel[...] = R.to(cell.recurrent_kernel.dtype)
        cell.bias[...] = 0.0

    def run(wx_):  # the gate-major copy of wx is inside the timed call: 2·B·T·4·H·d bytes, next to T sequential steps
        return cell(wx_.permute(0, 1, 3, 2, 4).reshape(B, T, 4 * H * d))[0].transpose(1, 2)

    return run, [wx]


# ------------------------------------------------------------------------------------------------ the parts
def _family_part(make_family: Callable[[Shapes], Family], keys: tuple[str, ...]) -> Callable[[Context], None]:
    def run(ctx: Context) -> None:
        fam = make_family(ctx.shapes)
        measure(ctx, fam, [i for i in fam.impls if i.key in keys])

    return run


def _rglru_part(ctx: Context) -> None:
    measure_copy(ctx)
    for make_family in (scan_family, rglru_family):
        fam = make_family(ctx.shapes)
        measure(ctx, fam, fam.impls)


def _gla_part(ctx: Context) -> None:
    _family_part(lambda s: gla_family(s, False), ("gla_real",))(ctx)
    _family_part(lambda s: gla_family(s, True), ("gateloop_complex",))(ctx)


# part -> (the implementation keys it records, its runner); peers in parts of their own
PARTS: dict[str, tuple[tuple[str, ...], Callable[[Context], None]]] = {
    "rglru": (("copy", "scan", "rglru_fused"), _rglru_part),
    "mlstm": (("mlstm",), _family_part(mlstm_family, ("mlstm",))),
    "mlstm_peer": (("mlstm_kernels",), _family_part(mlstm_family, ("mlstm_kernels",))),
    "gla": (("gla_real", "gateloop_complex"), _gla_part),
    "gla_peer": (("fla_chunk_gla",), _family_part(lambda s: gla_family(s, False), ("fla_chunk_gla",))),
    "slstm": (("slstm_triton", "slstm_loop"), _family_part(slstm_family, ("slstm_triton", "slstm_loop"))),
    "slstm_official": (("slstm_official",), _family_part(slstm_family, ("slstm_official",))),
}


def run_part(name: str, device: torch.device, smoke: bool, emit: Callable[[dict[str, Any]], None]) -> None:
    """Run part ``name`` on ``device`` (``smoke``: tiny shapes, one timed call), every record to ``emit``."""
    shapes, timing = (SMOKE_SHAPES, SMOKE_TIMING) if smoke else (GPU_SHAPES, GPU_TIMING)
    PARTS[name][1](Context(device, shapes, timing, emit))


def append_record(path: Path) -> Callable[[dict[str, Any]], None]:
    """An ``emit`` that appends each record to ``path`` as one JSON line, flushed (a killed part keeps them)."""

    def emit(rec: dict[str, Any]) -> None:
        with open(path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")

    return emit


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seqzoo.bench.scoreboard_parts", description=__doc__.splitlines()[0])
    p.add_argument("--part", required=True, choices=sorted(PARTS))
    p.add_argument("--records", required=True, help="JSON-lines file the records are appended to")
    p.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (Triton interpreter)")
    a = p.parse_args(argv)
    device = torch.device("cpu" if a.smoke else "cuda")
    run_part(a.part, device, a.smoke, append_record(Path(a.records)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
