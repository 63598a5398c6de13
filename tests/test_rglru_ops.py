"""RG-LRU op: chunked scan vs the loop (outputs, final states, gradients), gate math, stability (docs/griffin.md "Tests")."""

import pytest
import torch

from seqzoo.ops.rglru import (
    SqrtBoundDerivative,
    linear_scan,
    linear_scan_chunked,
    linear_scan_naive,
    rglru,
    rglru_naive,
)

f64 = torch.float64


def rand_inputs(B, T, R, dtype=f64, seed=0, reset_p=0.1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, R, generator=g, dtype=dtype)
    gx = torch.randn(B, T, R, generator=g, dtype=dtype)
    ga = torch.randn(B, T, R, generator=g, dtype=dtype)
    a_param = torch.empty(R, dtype=dtype).uniform_(-6.9, -2.2, generator=g)
    reset = torch.rand(B, T, generator=g) < reset_p
    h0 = torch.randn(B, R, generator=g, dtype=torch.promote_types(dtype, torch.float32))
    return x, gx, ga, a_param, reset, h0


def maxerr(a, b):
    return float((a.detach() - b.detach()).abs().max())


@pytest.mark.parametrize("T", [1, 5, 64, 4096])
@pytest.mark.parametrize("with_h0", [False, True])
def test_scan_equals_loop_fp64(T, with_h0):
    x, gx, ga, ap, reset, h0 = rand_inputs(2, T, 8, seed=T)
    h0 = h0 if with_h0 else None
    y_ref, h_ref = rglru_naive(x, gx, ga, ap, reset, h0)
    for impl in ("naive", "scan"):
        y, h = rglru(x, gx, ga, ap, reset, h0, impl=impl)
        assert maxerr(y, y_ref) <= 1e-12 and maxerr(h, h_ref) <= 1e-12, impl


@pytest.mark.parametrize("chunk", [1, 3, 7, 16, 100])
def test_scan_any_chunk_length(chunk):
    g = torch.Generator().manual_seed(3)
    a = torch.rand(2, 53, 5, generator=g, dtype=f64)
    a[:, ::9] = 0  # resets
    b = torch.randn(2, 53, 5, generator=g, dtype=f64)
    h0 = torch.randn(2, 5, generator=g, dtype=f64)
    h_ref, last_ref = linear_scan_naive(a, b, h0)
    h, last = linear_scan_chunked(a, b, h0, chunk=chunk)
    assert maxerr(h, h_ref) <= 1e-12 and maxerr(last, last_ref) <= 1e-12


def test_scan_equals_loop_fp32_long():
    x, gx, ga, ap, reset, h0 = rand_inputs(2, 4096, 16, dtype=torch.float32, seed=1, reset_p=0.002)
    y_ref, h_ref = rglru(x, gx, ga, ap, reset, h0, impl="naive")
    y, h = rglru(x, gx, ga, ap, reset, h0, impl="scan")
    assert y.dtype == torch.float32 and h.dtype == torch.float32
    assert maxerr(y, y_ref) <= 1e-5 * float(y_ref.abs().max())
    assert maxerr(h, h_ref) <= 1e-5 * float(h_ref.abs().max())


def test_gradients_scan_equal_loop():
    x, gx, ga, ap, reset, h0 = rand_inputs(2, 37, 6, seed=5)
    leaves = [t.clone().requires_grad_(True) for t in (x, gx, ga, ap, h0)]
    grads = {}
    for impl in ("loop", "scan"):
        ins = [t.detach().clone().requires_grad_(True) for t in leaves]
        if impl == "loop":
            y, h = rglru_naive(ins[0], ins[1], ins[2], ins[3], reset, ins[4])
        else:
            y, h = rglru(ins[0], ins[1], ins[2], ins[3], reset, ins[4], impl="scan")
        w = torch.linspace(-1, 1, y.numel(), dtype=f64).view_as(y)
        ((y * w).sum() + h.square().sum()).backward()
        grads[impl] = [t.grad for t in ins]
    for name, g_loop, g_scan in zip(("x", "gate_x", "gate_a", "a_param", "h0"), grads["loop"], grads["scan"]):
        assert maxerr(g_scan, g_loop) <= 1e-10, name


def test_gradcheck_scan_fp64():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(1, 6, 8, generator=g, dtype=f64).requires_grad_(True)
    b = torch.randn(1, 6, 8, generator=g, dtype=f64).requires_grad_(True)
    h0 = torch.randn(1, 8, generator=g, dtype=f64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b, h0: linear_scan_chunked(a, b, h0, chunk=2)[0], (a, b, h0))
    x, gx, ga, ap, reset, h0 = rand_inputs(1, 6, 8, seed=2)
    ins = tuple(t.requires_grad_(True) for t in (x, gx, ga, ap, h0))
    # 1 - a^2 > 2.5e-7 here, so the bounded sqrt derivative equals the true one
    assert torch.autograd.gradcheck(lambda x, gx, ga, ap, h0: rglru(x, gx, ga, ap, reset, h0, impl="scan")[0], ins)


def test_sqrt_bound_derivative_is_exactly_clipped():
    u = torch.tensor([0.0, 1e-9, 1e-7, 2.5e-7, 1e-3, 0.5, 1.0], dtype=f64, requires_grad=True)
    g = torch.linspace(0.5, 2.0, 7, dtype=f64)
    y = SqrtBoundDerivative.apply(u)
    assert torch.equal(y, torch.sqrt(u.detach()))
    y.backward(g)
    assert torch.equal(u.grad, g / torch.sqrt(torch.clamp(4 * u.detach(), min=1e-6)))
    assert float(u.grad.abs().max() / g.abs().max()) <= 1000.0


@pytest.mark.parametrize("impl", [pytest.param("naive", marks=pytest.mark.slow), "scan"])
def test_stress_long_extreme_gates(impl):
    T, R = 65536, 4
    x = torch.randn(1, T, R)
    h0 = torch.randn(1, R)
    # r = 0 (gate_a = -1e4): a = 1, beta = 0, so h must stay exactly h0
    y, h = rglru(x, torch.zeros_like(x), torch.full_like(x, -1e4), torch.full((R,), -3.0), None, h0, impl=impl)
    assert torch.equal(h, h0) and torch.equal(y[0, -1], h0[0])
    # r = 1 at Λ̃ = 20: a ≈ 0, beta ≈ 1, so h_t = i_t x_t
    gx = torch.randn(1, T, R)
    y, h = rglru(x, gx, torch.full_like(x, 1e4), torch.full((R,), 20.0), None, h0, impl=impl)
    assert torch.isfinite(y).all()
    assert maxerr(y, torch.sigmoid(gx) * x) <= 1e-6


def test_state_bounded_for_constant_a():
    T, R = 20000, 3
    x = torch.randn(1, T, R, dtype=f64)
    gx = torch.randn(1, T, R, dtype=f64)
    a0 = torch.tensor([0.9, 0.99, 0.999], dtype=f64)
    ap = torch.log(1 / a0 - 1)  # σ(−Λ̃) = a0; with r = σ(ga) and c = 8: a = a0^(8 r)
    ga = torch.full_like(x, 0.0)  # r = 0.5 -> a = a0^4
    y, _ = rglru(x, gx, ga, ap, None, None, impl="scan")
    a = a0**4
    bound = float((torch.sigmoid(gx) * x).abs().max()) * torch.sqrt((1 + a) / (1 - a))
    assert torch.isfinite(y).all()
    assert bool((y.abs().amax(dim=(0, 1)) <= bound).all())


def test_every_token_a_reset_gives_gated_input():
    x, gx, ga, ap, _, h0 = rand_inputs(2, 50, 8, seed=9)
    reset = torch.ones(2, 50, dtype=torch.bool)
    for impl in ("naive", "scan"):
        y, _ = rglru(x, gx, ga, ap, reset, h0, impl=impl)
        assert maxerr(y, torch.sigmoid(gx) * x) <= 1e-15


def test_bf16_inputs_finite_gradients():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 300, 8, generator=g).bfloat16().requires_grad_(True)
    gx = torch.randn(2, 300, 8, generator=g).bfloat16().requires_grad_(True)
    ga = (torch.randn(2, 300, 8, generator=g) * 20 - 30).bfloat16().requires_grad_(True)  # r -> 0, a -> 1
    ap = torch.full((8,), -6.9).bfloat16().requires_grad_(True)
    y, h = rglru(x, gx, ga, ap, None, None, impl="scan")
    assert y.dtype == torch.bfloat16 and h.dtype == torch.float32
    y.float().square().mean().backward()
    for t in (x, gx, ga, ap):
        assert torch.isfinite(t.grad.float()).all()


def test_fp32_state_and_accumulation():
    x, gx, ga, ap, reset, h0 = rand_inputs(1, 7, 4, dtype=torch.bfloat16)
    y, h = rglru(x, gx, ga, ap, reset, h0.float(), impl="scan")
    assert y.dtype == torch.bfloat16 and h.dtype == torch.float32


def test_bad_arguments_raise():
    x, gx, ga, ap, reset, h0 = rand_inputs(2, 5, 4)
    with pytest.raises(ValueError, match="impl"):
        rglru(x, gx, ga, ap, impl="fast")
    with pytest.raises(ValueError, match="gate_a"):
        rglru(x, gx, ga[:, :3], ap)
    with pytest.raises(ValueError, match="a_param"):
        rglru(x, gx, ga, ap[:3])
    with pytest.raises(ValueError, match="reset"):
        rglru(x, gx, ga, ap, reset=reset.long())
    with pytest.raises(ValueError, match="h0"):
        linear_scan(torch.rand(2, 5, 4), torch.rand(2, 5, 4), h0=torch.zeros(2, 3))
