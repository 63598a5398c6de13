"""Orchid mixer: modes, shift invariance / equivariance, Remark 3.1, cross variant, gradients, errors (arXiv:2402.18508 §3; docs/orchid.md)."""

import pytest
import torch

from seqzoo.mixers import build_mixer
from seqzoo.mixers.orchid import CorrelationConditioning, MagnitudeConditioning, Orchid
from seqzoo.ops.fftconv import rfft

CONDS = [  # (conditioning, p, sigma)
    ("type1", 2, "identity"),
    ("type1", 1, "identity"),
    ("type2", 2, "identity"),
    ("type2", 2, "sigmoid"),
]


def make(D=4, l_max=64, seed=0, dtype=torch.float64, **kw):
    torch.manual_seed(seed)
    kw.setdefault("filter_width", 8)
    return Orchid(D, l_max=l_max, **kw).to(dtype).eval()


def randx(B, T, D, seed=1, dtype=torch.float64):
    return torch.randn(B, T, D, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def rel(a, b):
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-300))


def roll(x, m):  # shift_m(x)[t] = x[t + m] (circular), on the time axis of (B, T, D)
    return torch.roll(x, -m, dims=1)


@pytest.mark.parametrize("cond,p,sigma", CONDS)
@pytest.mark.parametrize("conv", ["circular", "linear"])
def test_fft_equals_direct(cond, p, sigma, conv):
    m = make(D=4, conditioning=cond, p=p, sigma=sigma, conv=conv)
    x = randx(2, 11, 4)
    y_fft, s = m(x, mode="fft")
    y_dir, _ = m(x, mode="direct")
    assert s is None
    assert rel(y_fft, y_dir) <= 1e-10
    m32, x32 = m.float(), x.float()
    assert rel(m32(x32, mode="fft")[0].double(), m32(x32, mode="direct")[0].double()) <= 1e-4


@pytest.mark.parametrize("cond,p,sigma", CONDS)
def test_gradients_fft_equal_direct(cond, p, sigma):
    m = make(D=4, conditioning=cond, p=p, sigma=sigma)
    x = randx(2, 9, 4).requires_grad_(True)
    params = [x] + list(m.parameters())
    grads = [torch.autograd.grad(m(x, mode=mode)[0].square().sum(), params) for mode in ("fft", "direct")]
    for a, b in zip(*grads):
        assert rel(a, b) <= 1e-9


@pytest.mark.parametrize("cond,p,sigma", CONDS)
@pytest.mark.parametrize("condition_on", ["v", "input"])
@pytest.mark.parametrize("D", [4, 8])
@pytest.mark.parametrize("T", [1, 2, 7, 16, 33, 64])
def test_kernel_invariant_and_block_equivariant(cond, p, sigma, condition_on, D, T):
    m = make(
        D=D,
        conditioning=cond,
        p=p,
        sigma=sigma,
        condition_on=condition_on,
        short_padding="circular",
        cond_padding="circular",
        conv="circular",
        residual_long_conv=True,
        seed=T,
    )
    x = randx(2, T, D, seed=T + D)
    H = m.adaptive_spectrum(x)
    y, _ = m(x)
    for shift in sorted({1, 5, T - 1}):
        xs = roll(x, shift)
        assert rel(m.adaptive_spectrum(xs), H) <= 1e-10, f"kernel not invariant at m={shift}"
        assert rel(m(xs)[0], roll(y, shift)) <= 1e-10, f"block not equivariant at m={shift}"


@pytest.mark.parametrize(
    "kw",
    [
        dict(conditioning="type2", sigma="sigmoid_reim"),
        dict(conditioning="type1", short_padding="zeros", cond_padding="zeros"),
    ],
)
def test_invariance_boundary(kw):
    """Documented failures: a sigmoid on Re/Im separately, and zero padding of the time convs."""
    m = make(D=4, **kw)
    x = randx(2, 64, 4)
    y, _ = m(x)
    errs = [rel(m(roll(x, s))[0], roll(y, s)) for s in (1, 5, 63)]
    assert max(errs) > 1e-3


def test_remark_3_1_correlation_generalises_magnitude():
    """Type II with k = q and sigma = identity gives Type I's power spectrum before the frequency conv."""
    torch.manual_seed(0)
    D, T = 6, 21
    t1 = MagnitudeConditioning(D, p=2).double()
    t2 = CorrelationConditioning(D, sigma="identity").double()
    for conv, norm in ((t2.k_conv, t2.k_norm), (t2.q_conv, t2.q_norm)):
        conv.load_state_dict(t1.time_conv.state_dict())
        norm.load_state_dict(t1.time_norm.state_dict())
    c = torch.randn(2, D, T, dtype=torch.float64)
    for n in (T, 2 * T):
        C = t2.correlation(c, n, rfft, 1.0)
        assert float(C.imag.abs().max()) <= 1e-12 * float(C.abs().max())
        assert rel(C.real, t1.features(c, n, rfft, 1.0)) <= 1e-12


def test_correlation_is_circular_cross_correlation():
    """conj(K) . Q with sigma = identity is the DFT of sum_l k[l] q[(t + l) mod T]."""
    T = 13
    k, q = torch.randn(1, 1, T, dtype=torch.float64), torch.randn(1, 1, T, dtype=torch.float64)
    C = torch.fft.rfft(k, n=T).conj() * torch.fft.rfft(q, n=T)
    t = torch.arange(T)
    corr = torch.stack([(k[0, 0] * q[0, 0, (tt + t) % T]).sum() for tt in range(T)])
    assert rel(torch.fft.irfft(C, n=T)[0, 0], corr) <= 1e-12


class TestCross:
    def make(self, **kw):
        return make(D=4, cross=True, d_context=4, conditioning="type2", sigma="sigmoid", **kw)

    def test_kernel_ignores_shifts_of_the_context(self):
        m = self.make()
        x, u = randx(2, 12, 4), randx(2, 12, 4, seed=7)
        y, _ = m(x, context=u)
        for s in (1, 5, 11):
            assert rel(m(x, context=roll(u, s))[0], y) <= 1e-10
            assert rel(m(roll(x, s), context=u)[0], roll(y, s)) <= 1e-10

    def test_short_context_is_zero_padded(self):
        m = self.make()
        x, u = randx(2, 12, 4), randx(2, 5, 4, seed=7)
        y, _ = m(x, context=u)
        # explicit padding: a context whose projection is zero beyond S. Build it by inverting the bias.
        ref_H = m.cond(torch.nn.functional.pad(m.ctx_proj(u), (0, 0, 0, 7)).transpose(1, 2), 12, rfft)
        z = m.in_proj(x)
        assert rel(m.adaptive_spectrum(x, z, u), ref_H) <= 1e-12
        assert y.shape == x.shape

    def test_full_context_equals_self_conditioning(self):
        m = self.make()
        ref = make(D=4, conditioning="type2", sigma="sigmoid")
        ref.load_state_dict({k: v for k, v in m.state_dict().items() if not k.startswith("ctx_proj")})
        with torch.no_grad():  # the context projection = the v stream of in_proj
            m.ctx_proj.weight.copy_(m.in_proj.weight[8:12])
            m.ctx_proj.bias.copy_(m.in_proj.bias[8:12])
        x = randx(2, 12, 4)
        assert rel(m(x, context=x)[0], ref(x)[0]) <= 1e-10

    def test_context_errors(self):
        m = self.make()
        x = randx(2, 12, 4)
        with pytest.raises(ValueError, match="S = 13"):
            m(x, context=randx(2, 13, 4))
        with pytest.raises(ValueError, match="d_context=4"):
            m(x, context=randx(2, 5, 3))
        with pytest.raises(ValueError, match="B=2"):
            m(x, context=randx(3, 5, 4))
        with pytest.raises(ValueError, match="cross=True"):
            make(D=4)(x, context=x)
        with pytest.raises(ValueError, match="state"):
            m(x, state=torch.zeros(1), context=x)


@pytest.mark.parametrize(
    "cond,sigma",
    [
        ("type1", "identity"),
        pytest.param("type2", "identity", marks=pytest.mark.slow),
        pytest.param("type2", "sigmoid", marks=pytest.mark.slow),
    ],
)
def test_gradcheck_input_and_all_parameters(cond, sigma):
    """Type II's gradients also match the direct mode in test_gradients_fft_equal_direct (fast)."""
    m = make(D=4, l_max=9, conditioning=cond, sigma=sigma, filter_width=4, filter_inner=1)
    names = [n for n, _ in m.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_(True) for p in m.parameters())
    x = randx(2, 9, 4).requires_grad_(True)

    def f(x, *ps):
        return torch.func.functional_call(m, dict(zip(names, ps)), (x,))[0]

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-6, fast_mode=True)


def test_non_causal():
    m = make(D=4, dtype=torch.float32)
    x = randx(1, 16, 4, dtype=torch.float32)
    x2 = x.clone()
    x2[:, -1] += 1.0
    assert float((m(x2)[0][:, 0] - m(x)[0][:, 0]).detach().abs().max()) > 1e-3
    assert Orchid.causal is False


def test_static_kernel_h0():
    m = make(D=4, l_max=32)
    h = m.filter.kernel(20)
    assert h.shape == (4, 20)
    assert torch.equal(h, m.filter.kernel(32)[:, :20])
    window = torch.exp(-m.filter.pos_t[0, :, 0, None] * m.filter.deltas[0].abs())  # (l_max, D)
    assert torch.equal(window[0], torch.ones(4, dtype=window.dtype))
    assert rel(m.filter.kernel(32).T, m.filter.ffn(32)[0] * window) <= 1e-15


@pytest.mark.parametrize("T", [1, 2, 3])
@pytest.mark.parametrize("padding", ["circular", "causal", "zeros"])
def test_tiny_lengths_below_kernel_size(T, padding):
    m = make(D=4, conv_size=5, cond_kernel=5, short_padding=padding, cond_padding="circular")
    x = randx(2, T, 4)
    y, _ = m(x)
    assert y.shape == (2, T, 4)
    assert rel(y, m(x, mode="direct")[0]) <= 1e-10


def test_half_precision_runs_in_fp32_inside():
    """bf16 autocast (how seqzoo.train runs bf16): the spectra stay fp32, the output is close to fp32's."""
    m = make(D=8, l_max=4096, dtype=torch.float32)
    x = randx(1, 4096, 8, dtype=torch.float32)
    y32, _ = m(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ya, _ = m(x)
    assert ya.dtype == torch.bfloat16 and torch.isfinite(ya).all()
    assert rel(ya.float(), y32) <= 3e-2
    yb, _ = m.to(torch.bfloat16)(x.bfloat16())  # a bf16 module with bf16 input also runs (fp32 inside)
    assert yb.dtype == torch.bfloat16 and torch.isfinite(yb).all()


def test_long_conv_is_orchid_without_the_adaptive_kernel():
    torch.manual_seed(0)
    lc = build_mixer("long_conv", d_model=4, l_max=16, filter_width=8).double()
    orc = make(D=4, l_max=16)
    orc.load_state_dict(lc.state_dict(), strict=False)
    orc.cond = None  # no H_theta
    x = randx(2, 16, 4)
    assert rel(lc(x)[0], orc(x)[0]) <= 1e-15
    assert lc.adaptive_spectrum(x) is None
    with pytest.raises(ValueError, match="conditioning"):
        build_mixer("long_conv", d_model=4, conditioning="type1")


def test_parameter_groups():
    m = make(D=4)
    ov = m.optim_overrides()
    names = dict(m.named_parameters())
    assert set(ov) <= set(names)
    assert ov["filter.pos_z"] == {"weight_decay": 0.0, "lr": 1e-5}
    assert ov["filter_res.linears.0.weight"] == ov["filter.freq"] == {"weight_decay": 0.0, "lr": 1e-3}
    assert not any(n.startswith("cond.") or n.endswith("skip") for n in ov)  # Hyena / the authors: default rule
    assert make(D=4, param_groups=False).optim_overrides() == {}


def test_conditioning_is_alive_at_init():
    """Exact DFT scaling: H_theta differs between inputs at init (arXiv:2402.18508 §3.1)."""
    m = make(D=16, l_max=128, filter_width=64)
    H = m.adaptive_spectrum(randx(2, 128, 16))
    assert rel(H[0], H[1]) > 0.1


def test_bad_input_and_options():
    m = make(D=4, l_max=16)
    with pytest.raises(ValueError, match="l_max"):
        m(randx(1, 17, 4))
    with pytest.raises(ValueError, match="non-causal|carries no state"):
        m(randx(1, 8, 4), state=torch.zeros(1))
    with pytest.raises(TypeError, match="floating"):
        m(torch.ones(1, 8, 4, dtype=torch.complex128))
    with pytest.raises(ValueError, match="mode"):
        m(randx(1, 8, 4), mode="scan")
    for kw, msg in [
        ({"conditioning": "type3"}, "conditioning"),
        ({"sigma": "tanh"}, "sigma"),
        ({"short_padding": "reflect"}, "short_padding"),
        ({"cond_padding": "same"}, "cond_padding"),
        ({"conv": "valid"}, "conv"),
        ({"condition_on": "s"}, "condition_on"),
        ({"conv_size": 4}, "conv_size must be odd"),
        ({"cond_kernel": 2}, "cond_kernel"),
        ({"filter_emb_dim": 4}, "filter_emb_dim"),
        ({"filter_emb_dim": 1}, "filter_emb_dim"),
        ({"fft_scaling": "ortho"}, "fft_scaling"),
        ({"p": 3}, "p "),
        ({"d_context": 3}, "cross=True"),
    ]:
        with pytest.raises(ValueError, match=msg):
            Orchid(4, **kw)
    Orchid(4, conv_size=4, short_padding="causal")  # even kernels are fine with causal padding
