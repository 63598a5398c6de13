"""ops/causal_conv: every implementation (``torch``: F.conv1d, ``triton``: seqzoo/ops/causal_conv/triton.py)
against ``causal_conv1d_naive`` in fp64: outputs, the returned state and gradients of x, weight, bias and state.

On CPU the Triton kernels run under TRITON_INTERPRET=1 (set by conftest.py) at tiny shapes; the real-shape tests
need CUDA. Every comparison starts from the same rounded inputs: the reference runs in fp64 on the values the
implementation sees. Tolerances: ``tests/helpers.py: TOL``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from helpers import CUDA, DEV, GRAD_SCALE, TOL, assert_close

from seqzoo.errors import InputError
from seqzoo.kernels import usable_on
from seqzoo.ops.causal_conv import MODES, causal_conv1d, causal_conv1d_naive
from seqzoo.ops.causal_conv.native import unavailable as native_unavailable

needs_triton = pytest.mark.skipif(
    not usable_on(DEV), reason="triton kernels cannot run here (triton missing, or no CUDA and no TRITON_INTERPRET)"
)
# every implementation other than the dispatcher and the reference itself
# the C path takes CPU tensors only: on a CUDA machine (DEV = "cuda") these cases skip, and the CPU runs test it
cpu_tensors_only = pytest.mark.skipif(DEV != "cpu", reason="the C path takes CPU tensors; this run tests on CUDA")
_MARKS = {"triton": needs_triton, "native": cpu_tensors_only}
FAST = [pytest.param(i, marks=_MARKS[i]) if i in _MARKS else i for i in MODES if i not in ("auto", "naive")]


def _inputs(B, T, C, k, dtype, state=True, bias=True, seg=None, seed=0, device=DEV):
    """x, state in ``dtype``; weight, bias in fp32 (the mixers' parameters; fp64 for fp64); segment_pos with starts."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    pdt = torch.float64 if dtype == torch.float64 else torch.float32
    x = torch.randn(B, T, C, generator=g).to(device, dtype)
    w = (torch.randn(C, k, generator=g) / k**0.5).to(device, pdt)
    b = torch.randn(C, generator=g).to(device, pdt) if bias else None
    s = torch.randn(B, k - 1, C, generator=g).to(device, dtype) if state else None
    sp = None
    if seg:
        starts = torch.rand(B, T, generator=g) < seg  # a start where True: segment_pos 0
        starts[0, 0] = True  # a start at t = 0 (the state is cut off)
        if T > 2:
            starts[-1, T - 2 :] = True  # two adjacent starts at the end (the returned buffer is zeroed)
        sp = torch.where(starts, 0, 1 + torch.arange(T).expand(B, T)).to(device)
    return x, w, b, s, sp


def _run(fn, x, w, b, s, sp, gy, gs, dtype_ref=None, **kw):
    """Output, new state and gradients of (x, w, b, s) for the loss <y, gy> + <state, gs>."""
    cast = (lambda t: t.detach().to(dtype_ref)) if dtype_ref else (lambda t: t.detach())
    leaves = [None if t is None else cast(t).requires_grad_(True) for t in (x, w, b, s)]
    y, ns = fn(*leaves, segment_pos=sp, **kw)
    loss = (y.double() * gy).sum() + (ns.double() * gs).sum()
    req = [t for t in leaves if t is not None]
    grads = iter(torch.autograd.grad(loss, req))
    return y, ns, [None if t is None else next(grads) for t in leaves]


def _compare(B, T, C, k, dtype, state=True, bias=True, seg=None, activation=None, seed=0, mode="triton"):
    x, w, b, s, sp = _inputs(B, T, C, k, dtype, state, bias, seg, seed)
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    gy = torch.randn(B, T, C, generator=g, dtype=torch.float64).to(DEV)
    gs = torch.randn(B, k - 1, C, generator=g, dtype=torch.float64).to(DEV)
    y, ns, grads = _run(causal_conv1d, x, w, b, s, sp, gy, gs, mode=mode, activation=activation)
    y_r, ns_r, grads_r = _run(
        causal_conv1d_naive, x, w, b, s, sp, gy, gs, dtype_ref=torch.float64, activation=activation
    )
    assert y.dtype == dtype and ns.dtype == dtype
    assert_close(y, y_r, dtype=dtype, name="y")
    assert_close(ns, ns_r, atol=0.0, name="new state")  # a copy of (rounded) inputs, zeroed before starts: exact
    for name, got, ref, leaf in zip(("dx", "dweight", "dbias", "dstate"), grads, grads_r, (x, w, b, s)):
        if leaf is None:
            assert got is None
            continue
        assert got.dtype == leaf.dtype, name
        assert_close(got, ref, dtype=dtype, scale=GRAD_SCALE, name=name)
    # the returned state is exactly what the torch path returns
    _, ns_t = causal_conv1d(x, w, b, s, segment_pos=sp, mode="torch")
    assert torch.equal(ns, ns_t)


@pytest.mark.parametrize("impl", FAST)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("seg", [None, 0.3])
def test_every_impl_matches_naive(impl, dtype, seg):
    """Each implementation in ``MODES`` against the reference, with state, bias and document starts."""
    if impl == "triton" and dtype == torch.float64:
        pytest.skip("the Triton kernel takes float32/float16/bfloat16 only (float64 is refused: test_bad_inputs)")
    _compare(2, 9, 12, 4, dtype, seg=seg, seed=21, mode=impl)


@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("state,bias", [(True, True), (True, False), (False, True)])
def test_torch_one_token_branch_matches_naive(k, state, bias):
    """The torch path's decoded-token branch (T = 1: k multiply-adds, no conv1d call), values and gradients."""
    _compare(3, 1, 8, k, torch.float64, state=state, bias=bias, seed=40 + k, mode="torch")


@needs_triton
@pytest.mark.parametrize("T", [1, 3, 7, 16, 33])
@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("with_state_bias", [True, False])
def test_fp32_matches_naive(T, k, with_state_bias):
    C = 4 if T % 2 else 12
    _compare(2, T, C, k, torch.float32, state=with_state_bias, bias=with_state_bias, seed=T * 10 + k)


@needs_triton
@pytest.mark.parametrize("state,bias", [(True, False), (False, True)])
def test_fp32_state_xor_bias(state, bias):
    _compare(2, 7, 12, 4, torch.float32, state=state, bias=bias)


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("T,C,k", [(7, 12, 4), (33, 4, 2)])
def test_half_matches_naive(dtype, T, C, k):
    _compare(2, T, C, k, dtype, seed=T)


@pytest.mark.parametrize("impl", FAST)
@pytest.mark.parametrize("T,k", [(7, 2), (7, 4), (16, 4), (33, 3)])
def test_document_masking(T, k, impl):
    _compare(3, T, 12, k, torch.float32, seg=0.25, seed=T + k, mode=impl)


@needs_triton
def test_document_masking_bf16_no_state():
    _compare(2, 16, 4, 4, torch.bfloat16, state=False, seg=0.3)


@pytest.mark.parametrize("impl", FAST)
@pytest.mark.parametrize("seg", [None, 0.3])
def test_fused_silu(seg, impl):
    _compare(2, 9, 12, 4, torch.float32, seg=seg, activation="silu", seed=5, mode=impl)


@pytest.mark.parametrize("impl", FAST)
def test_kernel_size_one_and_eight(impl):
    _compare(2, 5, 4, 1, torch.float32, mode=impl)
    _compare(2, 11, 4, 8, torch.float32, seg=0.2, mode=impl)


@needs_triton
def test_several_backward_programs_along_t(monkeypatch):
    """T = 33 split over three backward programs (16 steps each): per-program dweight / dbias partials summed,
    dstate from the first program only."""
    from seqzoo.ops.causal_conv import triton as conv

    monkeypatch.setattr(conv, "_TP_MAX", conv._TP_UNIT)
    _compare(2, 3 * conv._TP_UNIT - 15, 12, 4, torch.float32, seg=0.2, seed=9)


@pytest.mark.parametrize("impl", [*FAST, "naive"])
@pytest.mark.parametrize("seg", [None, 0.25])
def test_split_equals_whole(seg, impl):
    """Carrying the returned state across calls equals one call on the whole sequence (also with documents)."""
    x, w, b, s, sp = _inputs(2, 19, 12, 4, torch.float32, seg=seg, seed=3)
    y, ns = causal_conv1d(x, w, b, s, segment_pos=sp, mode=impl)
    ys, st = [], s
    for lo, hi in ((0, 1), (1, 3), (3, 10), (10, 19)):  # pieces shorter than k-1 included
        yi, st = causal_conv1d(x[:, lo:hi], w, b, st, segment_pos=None if sp is None else sp[:, lo:hi], mode=impl)
        ys.append(yi)
    assert_close(torch.cat(ys, 1), y, atol=1e-6, name="y split")
    assert torch.equal(st, ns)


@needs_triton
def test_strided_inputs_and_parameter_layout():
    """Callers pass views (Griffin: ``conv.weight.t()``); non-contiguous x / weight give the same result."""
    x, w, b, s, _ = _inputs(2, 7, 12, 4, torch.float32)
    x_nc = x.transpose(1, 2).contiguous().transpose(1, 2)
    w_nc = w.t().contiguous().t()
    assert not x_nc.is_contiguous() and not w_nc.is_contiguous()
    y, ns = causal_conv1d(x_nc, w_nc, b, s, mode="triton")
    y_r, ns_r = causal_conv1d(x, w, b, s, mode="torch")
    assert_close(y, y_r, atol=1e-5, rtol=1e-5, name="y strided")
    assert torch.equal(ns, ns_r)


@needs_triton
def test_bad_inputs():
    x, w, b, s, _ = _inputs(2, 5, 4, 4, torch.float32)
    with pytest.raises(TypeError):
        causal_conv1d(x.double(), w.double(), mode="triton")
    with pytest.raises(ValueError, match="conv state"):
        causal_conv1d(x, w, b, s[:, :2], mode="triton")
    with pytest.raises(ValueError, match="weight"):
        causal_conv1d(x, w[:3], b, mode="triton")
    with pytest.raises(ValueError, match="bias"):
        causal_conv1d(x, w, b[:3], mode="triton")
    with pytest.raises(ValueError, match="segment_pos"):
        causal_conv1d(x, w, segment_pos=torch.ones(2, 4, dtype=torch.long, device=DEV), mode="triton")
    with pytest.raises(ValueError, match="T >= 1"):
        causal_conv1d(x[:, :0], w, mode="triton")
    with pytest.raises(ValueError, match="kernel sizes"):
        causal_conv1d(x, torch.ones(4, 17, device=DEV), mode="triton")
    with pytest.raises(ValueError, match="mode"):
        causal_conv1d(x, w, mode="cuda")
    with pytest.raises(ValueError, match="activation"):
        causal_conv1d(x, w, mode="triton", activation="gelu")


def test_auto_dispatch_and_lazy_import():
    """ "auto" on CPU float tensors is the C path where it builds, else torch (never the interpreter); 16-bit CPU
    tensors take torch; importing seqzoo does not import triton."""
    x, w, b, s, _ = _inputs(2, 6, 4, 4, torch.float32, device="cpu")
    cpu_path = "native" if native_unavailable() is None else "torch"
    for got, ref in zip(causal_conv1d(x, w, b, s), causal_conv1d(x, w, b, s, mode=cpu_path)):
        assert torch.equal(got, ref)
    xb = x.bfloat16()
    for got, ref in zip(causal_conv1d(xb, w, b, s), causal_conv1d(xb, w, b, s, mode="torch")):
        assert torch.equal(got, ref)
    for impl in ("naive", "torch", "native"):
        y, _ = causal_conv1d(x, w, b, s, mode=impl, activation="silu")
        assert_close(y, torch.nn.functional.silu(causal_conv1d(x, w, b, s, mode=impl)[0]), atol=1e-5, rtol=1.3e-6)
    code = (
        "import sys, torch, seqzoo, seqzoo.ops.causal_conv as c; "
        "c.causal_conv1d(torch.randn(1, 3, 2), torch.randn(2, 4)); assert 'triton' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_native_off_auto_takes_torch_and_native_mode_says_why():
    """With ``SEQZOO_NATIVE=0`` "auto" runs the torch path (logged once) and ``mode="native"`` is refused with the
    reason; 16-bit tensors are refused by name."""
    code = (
        "import logging, torch; logging.basicConfig(level=logging.INFO, format='%(message)s')\n"
        "from seqzoo.ops.causal_conv import causal_conv1d\n"
        "x, w = torch.randn(1, 5, 3), torch.randn(3, 4)\n"
        "y, _ = causal_conv1d(x, w)\n"
        "print('auto ok', tuple(y.shape))\n"
        "causal_conv1d(x, w, mode='native')\n"
    )
    env = {**os.environ, "SEQZOO_NATIVE": "0"}
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert "auto ok (1, 5, 3)" in off.stdout
    assert "causal_conv1d runs the torch implementation on cpu tensors" in off.stderr
    assert off.returncode != 0
    assert "mode='native': the C library is unavailable: turned off by SEQZOO_NATIVE=0" in off.stderr
    with pytest.raises(InputError, match="float32 / float64 tensors, got torch.float16"):
        causal_conv1d(torch.randn(1, 5, 3).half(), torch.randn(3, 4).half(), mode="native")


# ------------------------------------------------------------------------------------------------ CUDA only
@pytest.mark.skipif(not CUDA, reason="real shapes need CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("seg", [None, 0.001])
def test_real_shape_cuda(dtype, seg):
    """B = 8, T = 4096, C = 2048, k = 4 (Griffin's §2.1 shape) against the fp64 reference (vectorised: naive is
    a per-tap sum without documents; with documents the torch path in fp64, itself tested against naive)."""
    B, T, C, k = 8, 4096, 2048, 4
    x, w, b, s, sp = _inputs(B, T, C, k, dtype, seg=seg, seed=11)
    g = torch.Generator(device="cpu").manual_seed(12)
    gy = torch.randn(B, T, C, generator=g, dtype=torch.float64).to(DEV)
    gs = torch.randn(B, k - 1, C, generator=g, dtype=torch.float64).to(DEV)
    y, ns, grads = _run(causal_conv1d, x, w, b, s, sp, gy, gs, mode="triton")
    ref = causal_conv1d_naive if sp is None else (lambda *a, **kw: causal_conv1d(*a, mode="torch", **kw))
    y_r, ns_r, grads_r = _run(ref, x, w, b, s, sp, gy, gs, dtype_ref=torch.float64)
    assert_close(y, y_r, dtype=dtype, name="y")
    assert_close(ns, ns_r, atol=0.0, name="new state")
    for name, got, r in zip(("dx", "dweight", "dbias", "dstate"), grads, grads_r):
        # dweight / dbias sum B·T = 32K terms: relative to their scale
        tol = GRAD_SCALE * TOL[dtype] if name in ("dx", "dstate") else 1e-4 if dtype == torch.float32 else 1e-2
        assert_close(got, r, tol, name=name)
