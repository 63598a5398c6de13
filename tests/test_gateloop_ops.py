"""GateLoop op: every implementation against the fp64 loop (outputs, final states, gradients), gradcheck, stress."""

import math

import pytest
import torch
import torch.nn.functional as F

from seqzoo.ops.gateloop import MODES, gateloop

# "triton" takes fp32/bf16/fp16 only; tests/test_triton_kernels.py checks it against the same loop
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


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


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
            assert rel(y, y_ref) <= 1e-10, (impl, C)
            assert rel(S, S_ref) <= 1e-10, (impl, C)


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
        assert rel(y.double(), y_ref) <= 1e-4, impl
        assert rel(S.to(torch.complex128), S_ref) <= 1e-4, impl


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
            assert rel(g, r) <= 1e-8, impl


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
            assert rel(torch.cat([y1, y2], 1), y_whole) <= 1e-12
            assert rel(S2, S_whole) <= 1e-12


def test_reductions_linear_attention_retnet_and_convolution():
    B, T, H, K, V = 2, 30, 2, 3, 4
    q, k, v, _, _, _ = make(B, T, H, K, V, state=False)
    n = torch.arange(T)
    causal = (n[:, None] >= n[None, :]).double()
    # a ≡ 1: causal linear attention
    zeros = torch.zeros(B, T, H, K, dtype=torch.float64)
    lin = torch.einsum("bnhk,bmhk,nm,bmhv->bnhv", q, k, causal, v)
    for impl in ["naive"] + FAST:
        assert rel(gateloop(q, k, v, zeros, zeros, mode=impl)[0], lin) <= 1e-12
    # a fixed: RetNet form Σ_m Σ_d q_nd k_md |a_d|^{n-m} cos((n-m) θ_d) v_m
    mag = torch.tensor([0.9, 0.5, 0.99], dtype=torch.float64)
    th = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64)
    dist = (n[:, None] - n[None, :]).double().clamp_min(0)  # (T, T)
    dec = mag[None, None] ** dist[..., None] * torch.cos(dist[..., None] * th) * causal[..., None]  # (T, T, K)
    retnet = torch.einsum("bnhk,bmhk,nmk,bmhv->bnhv", q, k, dec, v)
    lm_fixed = mag.log().expand(B, T, H, K)
    ph_fixed = th.expand(B, T, H, K)
    for impl in ["naive"] + FAST:
        assert rel(gateloop(q, k, v, lm_fixed, ph_fixed, mode=impl)[0], retnet) <= 1e-12
    # q = k = 1, K = V = 1, fixed a: y = Re((v ∗ (1, a, a², …))_n), the FFT convolution of eq. 10
    a = torch.polar(torch.tensor(0.95, dtype=torch.float64), torch.tensor(0.4, dtype=torch.float64))
    v1 = torch.randn(1, T, 1, 1, dtype=torch.float64)
    filt = a ** torch.arange(T, dtype=torch.float64)
    nfft = 2 * T
    conv = torch.fft.ifft(torch.fft.fft(v1[0, :, 0, 0].to(torch.complex128), nfft) * torch.fft.fft(filt, nfft))[:T].real
    ones = torch.ones(1, T, 1, 1, dtype=torch.float64)
    y, _ = gateloop(ones, ones, v1, a.abs().log().expand(1, T, 1, 1), a.angle().expand(1, T, 1, 1), mode="two_level")
    assert rel(y[0, :, 0, 0], conv) <= 1e-12


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
