"""Triton kernels (seqzoo/kernels) against the naive references: outputs, final states and gradients.

Without CUDA the kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1, set below before triton is
imported) at tiny shapes with one autotune config; the "real" shape cases run only on a CUDA machine.
Run: ``pytest tests/test_triton_kernels.py``.
"""

from __future__ import annotations

import os

import pytest
import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

from seqzoo.ops.gateloop import gateloop_naive

DEV = "cuda" if CUDA else "cpu"
needs_cuda = pytest.mark.skipif(not CUDA, reason="real shapes need a CUDA GPU (interpreter too slow)")
LOWP = (torch.bfloat16, torch.float16)
# dtype -> allowed max abs error relative to max(1, max |reference|), against an fp64 reference computed from the
# same (already rounded) inputs: fp32 arithmetic, or the 16-bit rounding of outputs / gradients / dot operands
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}


def _close(name, got, ref, dtype, scale=1.0):
    got, ref = got.detach().cpu(), ref.detach().cpu()
    if got.is_complex():
        got, ref = torch.view_as_real(got), torch.view_as_real(ref)
    got, ref = got.double(), ref.double()
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(got).all(), f"{name}: non-finite values"
    err = (got - ref).abs().max().item()
    bound = TOL[dtype] * scale * max(1.0, ref.abs().max().item())
    assert err <= bound, f"{name}: max abs error {err:.3g} > {bound:.3g} (ref max {ref.abs().max().item():.3g})"


def _grads(out, inputs, weights):
    loss = sum((o.double() * w).sum() for o, w in zip(out, weights))
    return torch.autograd.grad(loss, [x for x in inputs if x is not None])


# ------------------------------------------------------------------------------------------------ GLA / GateLoop
GLA_SHAPES = [
    pytest.param((1, 37, 2, 20, 24), id="tiny-T37"),
    pytest.param((2, 5, 1, 16, 16), id="tiny-T5"),
    pytest.param((4, 2048, 16, 128, 256), id="real", marks=needs_cuda),
]


def _gla_inputs(shape, dtype, decay=2.0, seed=0):
    B, T, H, K, V = shape
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, K, generator=g).to(DEV, dtype) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=g).to(DEV, dtype)
    log_a = (-torch.rand(B, T, H, K, generator=g) * decay).to(DEV, dtype)
    S0 = torch.randn(B, H, K, V, generator=g).to(DEV)
    return q, k, v, log_a, S0


@pytest.mark.parametrize("shape", GLA_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, *LOWP])
def test_gateloop_real_forward_matches_naive(shape, dtype):
    from seqzoo.ops.gateloop.triton import gateloop_triton

    q, k, v, log_a, S0 = _gla_inputs(shape, dtype)
    state = torch.complex(S0, torch.zeros_like(S0))
    y, S = gateloop_triton(q, k, v, log_a, None, state)
    yr, Sr = gateloop_naive(*(t.double() for t in (q, k, v, log_a)), None, state.to(torch.complex128))
    assert y.dtype == torch.float32 and S.dtype == torch.complex64
    _close("y", y, yr, dtype)
    _close("S.real", S.real, Sr.real, dtype)
    assert S.imag.abs().max() == 0 and Sr.imag.abs().max() == 0


def test_gla_strong_decay_no_overflow():
    """log|a| down to −60 per step: a e^{+b}·e^{−b} factorisation would overflow; every exponent here is <= 0."""
    from seqzoo.ops.gateloop.triton import gla_triton

    q, k, v, log_a, S0 = _gla_inputs((1, 33, 1, 16, 16), torch.float32, decay=60.0, seed=2)
    y, S = gla_triton(q, k, v, log_a, S0)
    yr, Sr = gateloop_naive(
        *(t.double() for t in (q, k, v, log_a)), None, torch.complex(S0, 0 * S0).to(torch.complex128)
    )
    _close("y", y, yr, torch.float32)
    _close("S", S, Sr.real, torch.float32)


GLA_GRAD_CASES = [
    pytest.param((1, 19, 2, 20, 24), torch.float32, "triton", id="tiny-T19-fp32-triton"),
    pytest.param((1, 19, 2, 16, 16), torch.float32, "torch", id="tiny-T19-fp32-torch-recompute"),
    pytest.param((1, 11, 1, 16, 16), torch.bfloat16, "triton", id="tiny-T11-bf16-triton"),
    pytest.param((2, 512, 8, 128, 256), torch.bfloat16, "triton", id="real-bf16", marks=needs_cuda),
]


@pytest.mark.parametrize("shape, dtype, backward", GLA_GRAD_CASES)
def test_gla_gradients_match_naive(shape, dtype, backward):
    from seqzoo.ops.gateloop.triton import gla_triton

    flat = list(_gla_inputs(shape, dtype, seed=4))
    ins = [t.clone().requires_grad_() for t in flat]
    refs = [t.detach().double().requires_grad_() for t in flat]
    y, S = gla_triton(*ins, backward=backward)
    yr, Sr = gateloop_naive(*refs[:4], None, torch.complex(refs[4], torch.zeros_like(refs[4])))
    g = torch.Generator().manual_seed(7)
    w = [
        torch.randn(y.shape, generator=g, dtype=torch.float64).to(DEV),
        torch.randn(S.shape, generator=g, dtype=torch.float64).to(DEV),
    ]
    for name, x1, x2 in zip(
        ("dq", "dk", "dv", "dlog_a", "dS0"), _grads((y, S), ins, w), _grads((yr, Sr.real), refs, w)
    ):
        _close(name, x1, x2, dtype, scale=3.0)


COMPLEX_SHAPES = [
    pytest.param((1, 29, 2, 8, 16), torch.float32, id="tiny-T29-fp32"),
    pytest.param((1, 21, 1, 8, 16), torch.bfloat16, id="tiny-T21-bf16"),
    pytest.param((4, 2048, 16, 64, 256), torch.bfloat16, id="real-bf16", marks=needs_cuda),
]


@pytest.mark.parametrize("shape, dtype", COMPLEX_SHAPES)
def test_gateloop_complex_matches_naive(shape, dtype):
    """Complex transitions via phase rotation (real GLA of width 2K), complex incoming state, large phases."""
    from seqzoo.ops.gateloop.triton import gateloop_triton

    B, T, H, K, V = shape
    q, k, v, log_a, S0 = _gla_inputs(shape, dtype, decay=0.5, seed=6)
    g = torch.Generator().manual_seed(8)
    phase = (torch.randn(B, T, H, K, generator=g) * 4).to(DEV, dtype)
    state = torch.complex(S0, torch.randn(S0.shape, generator=g).to(DEV))
    y, S = gateloop_triton(q, k, v, log_a, phase, state)
    yr, Sr = gateloop_naive(*(t.double() for t in (q, k, v, log_a, phase)), state.to(torch.complex128))
    _close("y", y, yr, dtype)
    _close("S", S, Sr, dtype)


def test_gateloop_complex_gradients_match_naive():
    from seqzoo.ops.gateloop.triton import gateloop_triton

    q, k, v, log_a, S0 = _gla_inputs((1, 13, 1, 8, 16), torch.float32, decay=0.5, seed=10)
    phase = torch.randn(q.shape, generator=torch.Generator().manual_seed(11)).to(DEV) * 2
    st = torch.complex(S0, -S0.flip(-1))
    ins = [t.clone().requires_grad_() for t in (q, k, v, log_a, phase, st)]
    refs = [
        t.detach().clone().to(torch.complex128 if t.is_complex() else torch.float64).requires_grad_()
        for t in (q, k, v, log_a, phase, st)
    ]
    y, S = gateloop_triton(*ins)
    yr, Sr = gateloop_naive(*refs)
    g = torch.Generator().manual_seed(12)
    w = [
        torch.randn(y.shape, generator=g, dtype=torch.float64).to(DEV),
        torch.randn(S.shape, generator=g, dtype=torch.float64).to(DEV),
    ]
    loss = (y.double() * w[0]).sum() + (S.real.double() * w[1]).sum() - (S.imag.double() * w[1]).sum()
    loss_r = (yr * w[0]).sum() + (Sr.real * w[1]).sum() - (Sr.imag * w[1]).sum()
    for name, x1, x2 in zip(
        ("dq", "dk", "dv", "dlog_mag", "dphase", "dstate"),
        torch.autograd.grad(loss, ins),
        torch.autograd.grad(loss_r, refs),
    ):
        _close(name, x1, x2, torch.float32, scale=3.0)


# ------------------------------------------------------------------------------------------------ contract
def test_wrong_input_raises():
    from seqzoo.ops.gateloop.triton import gateloop_triton, gla_triton

    q = torch.zeros(1, 4, 1, 16, device=DEV)
    with pytest.raises(ValueError, match="log_a must be <= 0"):
        gla_triton(q, q, q, q + 1)
    with pytest.raises(ValueError, match="phase must have shape"):
        gateloop_triton(q, q, q, -q.abs(), phase=q[:, :2])
