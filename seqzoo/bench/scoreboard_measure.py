"""Check, then time, one implementation of an op: the measuring behind the GPU scoreboard (``scoreboard.py``).

Every implementation is checked before it is timed: it runs forward and backward on the first ``check_rows``
sequences of a fresh draw of inputs, and its output and the gradient of every floating input are compared with the
op's PyTorch path in float64 on the same values (‖x − ref‖ / ‖ref‖, tolerance by dtype, ``TOL``; NaN never passes).
A failed check is a record with the gaps and no time. Peers (mlstm_kernels, fla) are held to the output only:
their gradients follow their own conventions, so the gradient gaps are recorded but do not refuse the time.
The reference paths are themselves tested against the naive loops (``tests/ops``). Each record is one
implementation (``impl``) at one length ``T`` and phase (``fwd``, ``fwdbwd`` or ``copy``), handed to ``emit`` as
soon as it is measured.

Shapes: ``GPU_SHAPES`` (TFLA's: B·T = 65,536 tokens, H = 16, K = 128, V = 256, bf16; RG-LRU width 2048; sLSTM 4
heads of 64) or ``SMOKE_SHAPES`` (a few dozen tokens in float32, for the Triton interpreter on a CPU). The ops, their
inputs and references: ``scoreboard_ops.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .device_timer import copy_closure, summary, time_calls

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
