"""GateLoop op: every implementation against the fp64 loop (outputs, final states, gradients), gradcheck, stress.

The PyTorch modes in float64 and float32; the Triton kernel (seqzoo/ops/gateloop/triton.py: chunked GLA, complex
transitions by phase rotation) under Triton's CPU interpreter at tiny shapes and at real shapes on CUDA; the
``chunk_size`` reaching the kernel from the op and the mixer. Closeness: ``tests/helpers.py``."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import (
    DEV,
    GRAD_SCALE,
    LOWP,
    assert_close,
    assert_close_fp32,
    grads,
    needs_cuda,
    needs_interpreter,
    needs_triton,
    spy,
)

from seqzoo.errors import InputError
from seqzoo.kernels import use_kernels
from seqzoo.ops.gateloop import MODES, gateloop, gateloop_naive

# "triton" takes fp32/bf16/fp16 only; the Triton section below checks it against the same loop
FAST = [i for i in MODES if i not in ("auto", "naive", "naive_unsafe", "triton")]


def make(B, T, H, K, V, dtype=torch.float64, seed=0, state=True, real=False, gamma=None):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    q, k, v = r(B, T, H, K), r(B, T, H, K), r(B, T, H, V)
    pre = 1 + 2 * r(B, T, H, K) if gamma is None else gamma(r(B, T, H, K))
    log_mag = F.logsigmoid(pre)  # γ̃ ~ 1 + 2·N(0, 1)
    phase = None if real else r(B, T, H, K)
    S0 = torch.complex(r(B, H, K, V), r(B, H, K, V)) if state else None
    cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    return [None if t is None else t.to(cdtype if t.is_complex() else dtype) for t in (q, k, v, log_mag, phase, S0)]


SHAPES = [(3, 4, 5), (8, 1, 1)]  # general heads (H, K, V) and max heads (D channels, K = V = 1)


@pytest.mark.parametrize("hkv", SHAPES, ids=["general", "maxhead"])
@pytest.mark.parametrize("T", [1, 7, 64, 100, 257])
@pytest.mark.parametrize("real", [False, True], ids=["complex", "real"])
def test_fp64_modes_equal_loop(hkv, T, real):
    args = make(2, T, *hkv, real=real)
    y_ref, S_ref = gateloop(*args, mode="naive")
    for impl in FAST:
        for C in (5, 16, 64) if impl == "chunkwise" else (64,):
            y, S = gateloop(*args, mode=impl, chunk_size=C)
            assert y.dtype == torch.float64 and S.dtype == torch.complex128
            assert_close(y, y_ref, 1e-10, floor=0, name=str((impl, C)))
            assert_close(S, S_ref, 1e-10, floor=0, name=str((impl, C)))


@pytest.mark.parametrize("hkv", SHAPES, ids=["general", "maxhead"])
@pytest.mark.parametrize("real", [False, True], ids=["complex", "real"])
def test_fp32_modes_match_fp64_loop(hkv, real):
    T = 257
    args64 = make(2, T, *hkv, real=real)
    y_ref, S_ref = gateloop(*args64, mode="naive")
    args32 = make(2, T, *hkv, dtype=torch.float32, real=real)
    for impl in ["naive"] + FAST:
        y, S = gateloop(*args32, mode=impl, chunk_size=16)
        assert y.dtype == torch.float32 and S.dtype == torch.complex64
        assert_close(y.double(), y_ref, 1e-4, floor=0, name=str(impl))
        assert_close(S.to(torch.complex128), S_ref, 1e-4, floor=0, name=str(impl))


@pytest.mark.parametrize("hkv", SHAPES, ids=["general", "maxhead"])
def test_fp64_gradients_equal_loop(hkv):
    T = 37
    base = make(2, T, *hkv)

    def grads(impl):
        args = [t.clone().requires_grad_(True) for t in base]
        y, S = gateloop(*args, mode=impl, chunk_size=8)
        gy = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
        loss = (y * gy).sum() + (S.real * 0.3 - S.imag * 0.7).sum()
        return torch.autograd.grad(loss, args)

    ref = grads("naive")
    for impl in FAST:
        for g, r in zip(grads(impl), ref):
            assert_close(g, r, 1e-8, floor=0, name=str(impl))


GRADCHECK_MODES = [pytest.param(True, id="fast"), pytest.param(False, id="full", marks=pytest.mark.slow)]


@pytest.mark.parametrize("fast_mode", GRADCHECK_MODES)
@pytest.mark.parametrize("impl", ["naive"] + FAST + ["naive_unsafe"])
def test_gradcheck(impl, fast_mode):
    # B = 1, H = 2, T = 9, K = 2, V = 3, C = 4; complex S_0 as an input
    q, k, v, lm, ph, S0 = make(1, 9, 2, 2, 3, seed=3)
    pre = torch.logit(lm.exp())  # gradcheck through the pre-activation, so log|a| stays <= 0

    def fn(q, k, v, pre, ph, S0):
        return gateloop(q, k, v, F.logsigmoid(pre), ph, S0, mode=impl, chunk_size=4)

    inputs = [t.clone().requires_grad_(True) for t in (q, k, v, pre, ph, S0)]
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=fast_mode)


@pytest.mark.parametrize("fast_mode", GRADCHECK_MODES)
def test_gradcheck_max_head(fast_mode):
    q, k, v, lm, ph, S0 = make(1, 9, 3, 1, 1, seed=4)
    pre = torch.logit(lm.exp())
    for impl in ("two_level", "chunkwise", "attention"):
        fn = lambda q, k, v, pre, ph, S0: gateloop(q, k, v, F.logsigmoid(pre), ph, S0, mode=impl, chunk_size=4)  # noqa
        inputs = [t.clone().requires_grad_(True) for t in (q, k, v, pre, ph, S0)]
        assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=fast_mode)


@pytest.mark.parametrize("impl", ["naive"] + FAST)
def test_split_with_state_equals_whole(impl):
    T, C = 23, 5
    for hkv in SHAPES:
        q, k, v, lm, ph, _ = make(2, T, *hkv, state=False)
        y_whole, S_whole = gateloop(q, k, v, lm, ph, None, mode=impl, chunk_size=C)
        for t in (1, C - 1, C, C + 1, T - 1):
            y1, S1 = gateloop(q[:, :t], k[:, :t], v[:, :t], lm[:, :t], ph[:, :t], None, mode=impl, chunk_size=C)
            y2, S2 = gateloop(q[:, t:], k[:, t:], v[:, t:], lm[:, t:], ph[:, t:], S1, mode=impl, chunk_size=C)
            assert_close(torch.cat([y1, y2], 1), y_whole, 1e-12, floor=0)
            assert_close(S2, S_whole, 1e-12, floor=0)


def test_reductions_linear_attention_retnet_and_convolution():
    B, T, H, K, V = 2, 30, 2, 3, 4
    q, k, v, _, _, _ = make(B, T, H, K, V, state=False)
    n = torch.arange(T)
    causal = (n[:, None] >= n[None, :]).double()
    # a ≡ 1: causal linear attention
    zeros = torch.zeros(B, T, H, K, dtype=torch.float64)
    lin = torch.einsum("bnhk,bmhk,nm,bmhv->bnhv", q, k, causal, v)
    for impl in ["naive"] + FAST:
        assert_close(gateloop(q, k, v, zeros, zeros, mode=impl)[0], lin, 1e-12, floor=0)
    # a fixed: RetNet form Σ_m Σ_d q_nd k_md |a_d|^{n-m} cos((n-m) θ_d) v_m
    mag = torch.tensor([0.9, 0.5, 0.99], dtype=torch.float64)
    th = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    dist = (n[:, None] - n[None, :]).double().clamp_min(0)  # (T, T)
    dec = mag[None, None] ** dist[..., None] * torch.cos(dist[..., None] * th) * causal[..., None]  # (T, T, K)
    retnet = torch.einsum("bnhk,bmhk,nmk,bmhv->bnhv", q, k, dec, v)
    lm_fixed = mag.log().expand(B, T, H, K)
    ph_fixed = th.expand(B, T, H, K)
    for impl in ["naive"] + FAST:
        assert_close(gateloop(q, k, v, lm_fixed, ph_fixed, mode=impl)[0], retnet, 1e-12, floor=0)
    # q = k = 1, K = V = 1, fixed a: y = Re((v ∗ (1, a, a², …))_n), the FFT convolution of eq. 10
    a = torch.polar(torch.tensor(0.95, dtype=torch.float64), torch.tensor(0.4, dtype=torch.float64))
    v1 = torch.randn(1, T, 1, 1, dtype=torch.float64)
    filt = a ** torch.arange(T, dtype=torch.float64)
    nfft = 2 * T
    conv = torch.fft.ifft(torch.fft.fft(v1[0, :, 0, 0].to(torch.complex128), nfft) * torch.fft.fft(filt, nfft))[:T].real
    ones = torch.ones(1, T, 1, 1, dtype=torch.float64)
    y, _ = gateloop(ones, ones, v1, a.abs().log().expand(1, T, 1, 1), a.angle().expand(1, T, 1, 1), mode="two_level")
    assert_close(y[0, :, 0, 0], conv, 1e-12, floor=0)


def test_reset_forgets_the_past():
    # γ̃ = -1e4 at position r: outputs from r on do not depend on inputs before r
    B, T, H, K, V, r = 1, 40, 2, 2, 3, 17
    q, k, v, lm, ph, _ = make(B, T, H, K, V, state=False)
    lm = lm.clone()
    lm[:, r] = F.logsigmoid(torch.tensor(-1e4, dtype=torch.float64))
    k2, v2 = k.clone(), v.clone()
    k2[:, :r] = torch.randn_like(k2[:, :r])
    v2[:, :r] = torch.randn_like(v2[:, :r])
    for impl in ["naive"] + FAST:
        y1, _ = gateloop(q, k, v, lm, ph, mode=impl, chunk_size=8)
        y2, _ = gateloop(q, k2, v2, lm, ph, mode=impl, chunk_size=8)
        assert float((y1[:, r:] - y2[:, r:]).abs().max()) <= 1e-12
        assert float((y1[:, :r] - y2[:, :r]).abs().max()) > 1e-3  # the perturbation was real


def test_bad_inputs_raise_clear_errors():
    q, k, v, lm, ph, S0 = make(2, 5, 2, 3, 4)
    with pytest.raises(ValueError, match="mode"):
        gateloop(q, k, v, lm, ph, S0, mode="fft")
    with pytest.raises(ValueError, match=r"q must have shape \(B, T, H, K\)"):
        gateloop(q[0], k, v, lm, ph)
    with pytest.raises(ValueError, match="k must have the shape of q"):
        gateloop(q, k[:, :, :, :2], v, lm, ph)
    with pytest.raises(ValueError, match="v must have shape"):
        gateloop(q, k, v[:, :4], lm, ph)
    with pytest.raises(ValueError, match="log_mag"):
        gateloop(q, k, v, lm[..., :1], ph)
    with pytest.raises(ValueError, match=r"log_mag = log\|a\| must be <= 0"):
        gateloop(q, k, v, lm.abs() + 0.1, ph)
    with pytest.raises(ValueError, match="state must have shape"):
        gateloop(q, k, v, lm, ph, S0[:, :, :2])
    with pytest.raises(ValueError, match="complex"):
        gateloop(q, k, v, lm, ph, S0.real)
    with pytest.raises(TypeError, match="floating"):
        gateloop(q.long(), k, v, lm, ph)
    with pytest.raises(ValueError, match="chunk_size"):
        gateloop(q, k, v, lm, ph, mode="chunkwise", chunk_size=0)
    assert math.isfinite(float(gateloop(q, k, v, lm, ph, S0)[0].sum()))


# ------------------------------------------------------------------------------------------------ stress
def test_unsafe_surrogate_form_overflows_and_safe_form_does_not():
    g = torch.Generator().manual_seed(0)
    B, T, H = 1, 200, 8
    q, k, v = (torch.randn(B, T, H, 1, generator=g) for _ in range(3))
    lm = F.logsigmoid(torch.randn(B, T, H, 1, generator=g))  # γ̃ ~ N(0, 1)
    ph = torch.randn(B, T, H, 1, generator=g)
    y_bad, _ = gateloop(q, k, v, lm, ph, mode="naive_unsafe")
    assert not torch.isfinite(y_bad).all()
    y_ok, _ = gateloop(q, k, v, lm, ph, mode="attention")
    y_ref, _ = gateloop(q.double(), k.double(), v.double(), lm.double(), ph.double(), mode="naive")
    assert torch.isfinite(y_ok).all()
    assert_close(y_ok.double(), y_ref, 1e-4, floor=0)


def test_attention_fp32_at_4096_uses_fp64_sums():
    g = torch.Generator().manual_seed(1)
    B, T, H = 1, 4096, 1
    q, k, v, pre, ph = (torch.randn(B, T, H, 1, generator=g, dtype=torch.float64) for _ in range(5))
    lm = F.logsigmoid(1 + 2 * pre)
    y_ref, S_ref = gateloop(q, k, v, lm, ph, mode="two_level")
    y, S = gateloop(q.float(), k.float(), v.float(), lm.float(), ph.float(), mode="attention")
    assert_close(y.double(), y_ref, 1e-4, floor=0)
    assert_close(S.to(S_ref.dtype), S_ref, 1e-4, floor=0)


def test_stress_65536_near_one_and_near_zero():
    # one channel per regime: γ̃ ≈ +10, +20 (|a| near 1), -30, -1e4 (|a| near 0); θ ~ N(0, 1)
    T = 65536
    g = torch.Generator().manual_seed(2)
    centre = torch.tensor([10.0, 20.0, -30.0, -1e4], dtype=torch.float64)
    pre = centre[:, None] + 0.5 * torch.randn(1, T, 4, 1, generator=g, dtype=torch.float64)  # (1, T, 4, 1)
    lm = F.logsigmoid(pre)
    q, k, v, ph = (torch.randn(1, T, 4, 1, generator=g, dtype=torch.float64) for _ in range(4))
    y_ref, S_ref = gateloop(q, k, v, lm, ph, mode="two_level")  # fp64
    args32 = [t.float() for t in (q, k, v, lm, ph)]
    for impl in ("naive", "chunkwise"):
        y, S = gateloop(*args32, mode=impl)
        assert torch.isfinite(y).all() and torch.isfinite(torch.view_as_real(S)).all(), impl
        for c in range(4):  # per regime, relative to that channel's max |y|
            assert_close(y[..., c, :].double(), y_ref[..., c, :], 1e-3, floor=0, name=str((impl, c)))


def test_resets_every_100_tokens_fp32_chunkwise():
    # a = 0 every 100 tokens, γ̃ ≈ 8 and θ ≈ 3 elsewhere: segment sums keep fp32 at ~1e-6 (cumsum differences ~3e-4)
    T, H = 16384, 2
    g = torch.Generator().manual_seed(5)
    pre = 8 + 0.1 * torch.randn(1, T, H, 1, generator=g, dtype=torch.float64)
    pre[:, ::100] = -1e4
    lm = F.logsigmoid(pre)
    ph = 3 + 0.1 * torch.randn(1, T, H, 1, generator=g, dtype=torch.float64)
    q, k, v = (torch.randn(1, T, H, 1, generator=g, dtype=torch.float64) for _ in range(3))
    y_ref, _ = gateloop(q, k, v, lm, ph, mode="two_level")
    y, _ = gateloop(*(t.float() for t in (q, k, v, lm, ph)), mode="chunkwise")
    assert_close(y.double(), y_ref, 1e-4, floor=0)


def test_bf16_inputs_give_finite_fp32_output_and_complex64_state():
    q, k, v, lm, ph, _ = make(2, 50, 2, 3, 4, state=False)
    y, S = gateloop(*(t.bfloat16() for t in (q, k, v, lm, ph)), mode="chunkwise")
    assert y.dtype == torch.float32 and S.dtype == torch.complex64 and torch.isfinite(y).all()


# ------------------------------------------------------------------------------------------------ Triton kernel (GLA; complex GateLoop by phase rotation)
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


@needs_triton
@pytest.mark.parametrize("shape", GLA_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, *LOWP])
def test_gateloop_real_forward_matches_naive(shape, dtype):
    from seqzoo.ops.gateloop.triton import gateloop_triton

    q, k, v, log_a, S0 = _gla_inputs(shape, dtype)
    state = torch.complex(S0, torch.zeros_like(S0))
    y, S = gateloop_triton(q, k, v, log_a, None, state)
    yr, Sr = gateloop_naive(*(t.double() for t in (q, k, v, log_a)), None, state.to(torch.complex128))
    assert y.dtype == torch.float32 and S.dtype == torch.complex64
    assert_close(y, yr, dtype=dtype, name="y")
    assert_close(S.real, Sr.real, dtype=dtype, name="S.real")
    assert S.imag.abs().max() == 0 and Sr.imag.abs().max() == 0


@needs_triton
def test_gla_strong_decay_no_overflow():
    """log|a| down to −60 per step: a e^{+b}·e^{−b} factorisation would overflow; every exponent here is <= 0."""
    from seqzoo.ops.gateloop.triton import gla_triton

    q, k, v, log_a, S0 = _gla_inputs((1, 33, 1, 16, 16), torch.float32, decay=60.0, seed=2)
    y, S = gla_triton(q, k, v, log_a, S0)
    yr, Sr = gateloop_naive(
        *(t.double() for t in (q, k, v, log_a)), None, torch.complex(S0, 0 * S0).to(torch.complex128)
    )
    assert_close(y, yr, dtype=torch.float32, name="y")
    assert_close(S, Sr.real, dtype=torch.float32, name="S")


GLA_GRAD_CASES = [
    pytest.param((1, 19, 2, 20, 24), torch.float32, "triton", id="tiny-T19-fp32-triton"),
    pytest.param((1, 19, 2, 16, 16), torch.float32, "torch", id="tiny-T19-fp32-torch-recompute"),
    pytest.param((1, 11, 1, 16, 16), torch.bfloat16, "triton", id="tiny-T11-bf16-triton"),
    pytest.param((2, 512, 8, 128, 256), torch.bfloat16, "triton", id="real-bf16", marks=needs_cuda),
]


@needs_triton
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
    for name, x1, x2 in zip(("dq", "dk", "dv", "dlog_a", "dS0"), grads((y, S), ins, w), grads((yr, Sr.real), refs, w)):
        assert_close(x1, x2, dtype=dtype, scale=GRAD_SCALE, name=name)


COMPLEX_SHAPES = [
    pytest.param((1, 29, 2, 8, 16), torch.float32, id="tiny-T29-fp32"),
    pytest.param((1, 21, 1, 8, 16), torch.bfloat16, id="tiny-T21-bf16"),
    pytest.param((4, 2048, 16, 64, 256), torch.bfloat16, id="real-bf16", marks=needs_cuda),
]


@needs_triton
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
    assert_close(y, yr, dtype=dtype, name="y")
    assert_close(S, Sr, dtype=dtype, name="S")


@needs_triton
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
        assert_close(x1, x2, dtype=torch.float32, scale=GRAD_SCALE, name=name)


@needs_triton
def test_wrong_input_raises():
    from seqzoo.ops.gateloop.triton import gateloop_triton, gla_triton

    q = torch.zeros(1, 4, 1, 16, device=DEV)
    with pytest.raises(ValueError, match="log_a must be <= 0"):
        gla_triton(q, q, q, q + 1)
    with pytest.raises(ValueError, match="phase must have shape"):
        gateloop_triton(q, q, q, -q.abs(), phase=q[:, :2])


# ------------------------------------------------------------------------------------------------ GateLoop chunks
def _gateloop_inputs(T=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    B, H, K = 1, 2, 4
    q, k, v = (torch.randn(B, T, H, K, generator=g) for _ in range(3))
    log_mag = -torch.rand(B, T, H, K, generator=g) * 0.5
    phase = torch.randn(B, T, H, K, generator=g) * 0.3
    return q, k, v, log_mag, phase


@needs_interpreter
@pytest.mark.parametrize("chunk", [16, 32])
def test_gateloop_op_passes_chunk_size_to_the_kernel(chunk, monkeypatch, kernels_reset):
    from seqzoo.ops.gateloop import gateloop, gateloop_naive
    from seqzoo.ops.gateloop import triton as gl_triton

    calls = spy(monkeypatch, gl_triton, "gla_triton")
    q, k, v, log_mag, phase = _gateloop_inputs()
    y, S = gateloop(q, k, v, log_mag, phase, mode="triton", chunk_size=chunk)
    assert [c[0][5] for c in calls] == [chunk]  # gla_triton(q, k, v, log_a, state, chunk_size, ...)
    y_ref, S_ref = gateloop_naive(q, k, v, log_mag, phase)
    assert_close_fp32(y, y_ref.float(), rtol=1e-4, atol=1e-4)
    assert_close_fp32(S, S_ref.to(S.dtype), rtol=1e-4, atol=1e-4)


@needs_interpreter
def test_gateloop_mixer_chunk_size_reaches_the_kernel(monkeypatch, kernels_reset):
    from seqzoo.mixers import build_mixer
    from seqzoo.ops.gateloop import triton as gl_triton

    calls = spy(monkeypatch, gl_triton, "gla_triton")
    torch.manual_seed(0)
    m = build_mixer("gateloop", d_model=8, n_heads=2, chunk_size=32)
    x = torch.randn(1, 40, 8)
    y_ref, s_ref = m(x, mode="chunkwise")  # auto on CPU: the torch chunkwise form
    assert calls == []
    with use_kernels("triton"):
        y, s = m(x, mode="chunkwise")
    assert [c[0][5] for c in calls] == [32]
    assert_close_fp32(y, y_ref, rtol=1e-4, atol=1e-5)
    assert_close_fp32(s, s_ref, rtol=1e-4, atol=1e-5)


@needs_interpreter
@pytest.mark.parametrize("chunk", [8, 24, 48])
def test_gateloop_chunk_the_kernel_cannot_take_is_an_input_error(chunk, kernels_reset):
    from seqzoo.mixers import build_mixer
    from seqzoo.ops.gateloop import gateloop

    q, k, v, log_mag, phase = _gateloop_inputs(T=8)
    with pytest.raises(InputError, match=rf"gateloop: chunk_size must be a power of two >= 16 .*got {chunk}"):
        gateloop(q, k, v, log_mag, phase, mode="triton", chunk_size=chunk)
    m = build_mixer("gateloop", d_model=8, n_heads=2, chunk_size=chunk)
    x = torch.randn(1, 8, 8)
    m(x, mode="chunkwise")  # any chunk size on the torch path
    with use_kernels("triton"), pytest.raises(InputError, match=r"gateloop Triton kernel cannot run: chunk_size"):
        m(x, mode="chunkwise")
