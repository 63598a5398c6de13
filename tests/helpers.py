"""Shared test helpers: one closeness check with the tolerance per dtype in one place, the comparison of an
op implementation against its naive reference on outputs, final states and gradients, and ``run_tool`` (a script
of ``tools/`` in a subprocess, for the tests that check a tool still runs).

Used by ``tests/ops/test_<op>.py`` (every implementation of an op against its reference), the mixer contract
and the parity tests. ``tests/`` is on ``sys.path`` while pytest runs (``tests/conftest.py`` lives there), so
``from helpers import ...`` works from ``tests/`` and ``tests/ops/``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

from seqzoo.kernels import usable_on

REPO = Path(__file__).resolve().parents[1]
CUDA = torch.cuda.is_available()
if not CUDA:  # Triton's CPU interpreter; must be set before triton is imported (conftest.py sets it too)
    os.environ.setdefault("TRITON_INTERPRET", "1")
DEV = "cuda" if CUDA else "cpu"
LOWP = (torch.bfloat16, torch.float16)
needs_cuda = pytest.mark.skipif(not CUDA, reason="real shapes need a CUDA GPU (the interpreter is too slow)")
needs_triton = pytest.mark.skipif(
    not usable_on(DEV), reason="triton kernels cannot run here (triton missing, or no CUDA and no TRITON_INTERPRET)"
)
# models on CPU tensors forced through the Triton kernels (``use_kernels("triton")``): the interpreter only
needs_interpreter = pytest.mark.skipif(not usable_on("cpu"), reason="needs triton under TRITON_INTERPRET=1")

# dtype -> allowed max |error| relative to max(1, max |reference|), the reference computed in float64 from the
# same (already rounded) inputs: float64 arithmetic (rounding of different summation orders), float32
# arithmetic, or the 16-bit rounding of outputs / gradients / dot operands. Gradients get ``scale=GRAD_SCALE``.
TOL = {torch.float64: 1e-10, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}
GRAD_SCALE = 3.0


def _real(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    return (torch.view_as_real(t.resolve_conj()) if t.is_complex() else t).double()


def max_error(got: torch.Tensor, ref: torch.Tensor, floor: float = 1.0) -> float:
    """max |got − ref| / max(floor, max |ref|) (complex tensors as (real, imag) pairs)."""
    got, ref = _real(got), _real(ref)
    if ref.numel() == 0:
        return 0.0
    return float((got - ref).abs().max()) / max(floor, float(ref.abs().max()), 1e-300)


def assert_close(
    got: torch.Tensor,
    ref: torch.Tensor,
    tol: float | None = None,
    *,
    dtype: torch.dtype | None = None,
    scale: float = 1.0,
    floor: float = 1.0,
    atol: float | None = None,
    rtol: float = 0.0,
    name: str = "value",
) -> None:
    """Assert ``got`` is finite, has ``ref``'s shape, and every ``|got − ref| <= bound + rtol·|ref|``.

    ``bound`` is ``atol`` when given (an elementwise ``torch.testing.assert_close`` check, as the parity tests use
    against fixtures); otherwise ``tol · scale · max(floor, max |ref|)`` with ``tol`` defaulting to ``TOL[dtype]``
    (``dtype`` defaults to ``got``'s real dtype): a max-abs error relative to the reference's scale.
    """
    if atol is None and tol is None:
        dtype = dtype or (got.real.dtype if got.is_complex() else got.dtype)
        tol = TOL[dtype]
    g, r = _real(got), _real(ref)
    assert g.shape == r.shape, f"{name}: shape {tuple(g.shape)} != {tuple(r.shape)}"
    assert torch.isfinite(g).all(), f"{name}: non-finite values"
    if r.numel() == 0:
        return
    ref_max = float(r.abs().max())
    bound = atol if atol is not None else tol * scale * max(floor, ref_max)
    excess = ((g - r).abs() - rtol * r.abs()).max().item()
    err = float((g - r).abs().max())
    assert excess <= bound, (
        f"{name}: max |error| {err:.3g} > {bound:.3g}"
        + (f" + {rtol:.2g}·|ref|" if rtol else "")
        + f" (ref max {ref_max:.3g})"
    )


def assert_close_fp32(got: torch.Tensor, ref: torch.Tensor, atol: float = 1e-5, rtol: float = 1.3e-6, **kw) -> None:
    """``assert_close`` elementwise at ``torch.testing``'s float32 tolerances (``|got − ref| <= atol + rtol·|ref|``):
    float32 outputs against stored float32 fixtures of an official implementation."""
    assert_close(got, ref, atol=atol, rtol=rtol, **kw)


def grads(outs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor | None], weights: Sequence[torch.Tensor]):
    """Gradients of ``Σ <out, w>`` (complex outputs as (real, imag) pairs) w.r.t. the inputs that are not None."""
    loss = sum((_as_real(o).double() * w).sum() for o, w in zip(outs, weights))
    return torch.autograd.grad(loss, [x for x in inputs if x is not None])


def _as_real(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t) if t.is_complex() else t


def _to_ref(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.complex128 if t.is_complex() else torch.float64)


def check_against_reference(
    run: Callable[..., Sequence[torch.Tensor]],
    reference: Callable[..., Sequence[torch.Tensor]],
    inputs: Sequence[torch.Tensor | None],
    *,
    dtype: torch.dtype,
    out_names: Sequence[str],
    in_names: Sequence[str],
    state_dtype: torch.dtype | None = None,
    grad_outputs: Sequence[bool] | None = None,
    seed: int = 0,
) -> None:
    """Run ``run(*inputs)`` and ``reference`` on float64 (complex128) copies of the same inputs; check every
    output (``TOL[dtype]``; outputs after the first, the final states, with ``TOL[state_dtype]``) and the
    gradient of a random weighted sum of the outputs (those with ``grad_outputs[i]`` true) w.r.t. every input
    that is not None (``GRAD_SCALE × TOL[dtype]``). Inputs are used as given (dtype, device)."""
    ins = [
        None if t is None else t.detach().clone().requires_grad_(t.is_floating_point() or t.is_complex())
        for t in inputs
    ]
    refs = [
        None if t is None else (_to_ref(t).requires_grad_() if t.is_floating_point() or t.is_complex() else t)
        for t in inputs
    ]
    outs = run(*ins)
    outs_r = reference(*refs)
    assert len(outs) == len(outs_r) == len(out_names)
    for j, (name, o, r) in enumerate(zip(out_names, outs, outs_r)):
        assert_close(o, r, dtype=dtype if j == 0 else (state_dtype or dtype), name=name)
    keep = grad_outputs or [True] * len(outs)
    g = torch.Generator().manual_seed(seed)
    w = [
        (torch.randn(_as_real(o).shape, generator=g, dtype=torch.float64) * float(k)).to(o.device)
        for o, k in zip(outs, keep)
    ]
    differentiable = [t for t in ins if t is not None and t.requires_grad]
    differentiable_r = [t for t in refs if t is not None and t.requires_grad]
    names = [n for n, t in zip(in_names, ins) if t is not None and t.requires_grad]
    got = grads(outs, differentiable, w)
    want = grads(outs_r, differentiable_r, w)
    for name, a, b in zip(names, got, want):
        assert_close(a, b, dtype=dtype, scale=GRAD_SCALE, name=f"d{name}")


def spy(monkeypatch, module, name: str) -> list:
    """Replace ``module.name`` by a wrapper that records each call's ``(args, kwargs)``; return the record."""
    calls, real = [], getattr(module, name)

    def wrapper(*a, **kw):
        calls.append((a, kw))
        return real(*a, **kw)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def outputs_and_grads(fn, args):
    """``fn(*args) -> (y, S)`` (a GateLoop op: output and complex final state) run on fresh leaves: y, S and the
    gradients of every non-None argument under a fixed weighting of y and of S's real and imaginary parts."""
    leaves = [None if t is None else t.detach().clone().requires_grad_(True) for t in args]
    y, S = fn(*leaves)
    gy = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    loss = (y * gy).sum() + (S.real * 0.3 - S.imag * 0.7).sum()
    wrt = [t for t in leaves if t is not None]
    return y, S, torch.autograd.grad(loss, wrt)


def assert_same_distribution(a: torch.Tensor, b: torch.Tensor, bins: int, what: str, sigmas: float = 5.0):
    """Integer samples ``a`` and ``b`` (values in ``[0, bins)``) from one distribution: per-bin frequencies of the
    two samples agree within ``sigmas`` standard errors of their difference."""
    pa = torch.bincount(a.flatten(), minlength=bins).double() / a.numel()
    pb = torch.bincount(b.flatten(), minlength=bins).double() / b.numel()
    p = (pa * a.numel() + pb * b.numel()) / (a.numel() + b.numel())
    se = (p * (1 - p) * (1 / a.numel() + 1 / b.numel())).sqrt()
    z = (pa - pb).abs() / se.clamp_min(1e-12)
    worst = int(z.argmax())
    assert float(z.max()) < sigmas, f"{what}: bin {worst}: {float(pa[worst]):.4f} vs {float(pb[worst]):.4f}"


def run_tool(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``tools/<script>`` with ``args`` in a fresh interpreter that imports this checkout's seqzoo, on one thread
    (the machine's other cores stay free for other tests); stdout and stderr captured as text."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, str(REPO / "tools" / script), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
