"""ops/fftconv: FFT paths against the direct O(T^2) sums and explicit DFT matrices (Orchid, arXiv:2402.18508, §2-§3).

Every implementation in ``MODES`` (``fft``, and ``direct``: the reference) on outputs and gradients; the op has no
state. Closeness: ``tests/helpers.py``."""

import pytest
import torch
from helpers import assert_close, check_against_reference

from seqzoo.ops.fftconv import MODES, direct_conv, fftconv, irfft_naive, rfft_naive, spectral_conv, spectral_conv_naive

LENGTHS = (1, 2, 7, 16, 33, 128)


def loop_conv(x, h, padding):
    """The definitions of §2 written as Python loops (tiny T only)."""
    B, C, T = x.shape
    y = torch.zeros_like(x)
    for t in range(T):
        for l in range(T):
            lag = t - l
            if padding == "circular":
                y[..., t] += h[..., lag % T] * x[..., l]
            elif lag >= 0:
                y[..., t] += h[..., lag] * x[..., l]
    return y


@pytest.mark.parametrize("padding", ["circular", "linear"])
def test_direct_conv_is_the_definition(padding):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 6, generator=g, dtype=torch.float64)
    h = torch.randn(3, 6, generator=g, dtype=torch.float64)
    assert_close(direct_conv(x, h, padding), loop_conv(x, h, padding), 1e-13, floor=0)


@pytest.mark.parametrize("T", LENGTHS)
@pytest.mark.parametrize("padding", ["circular", "linear"])
@pytest.mark.parametrize("per_sample", [False, True])
def test_fft_equals_direct_fp64(T, padding, per_sample):
    g = torch.Generator().manual_seed(T)
    x = torch.randn(2, 3, T, generator=g, dtype=torch.float64)
    h = torch.randn(*((2,) if per_sample else ()), 3, T, generator=g, dtype=torch.float64)
    assert_close(fftconv(x, h, padding, mode="fft"), fftconv(x, h, padding, mode="direct"), 1e-10, floor=0)


@pytest.mark.parametrize("T", LENGTHS)
def test_dft_matrices_match_torch_fft(T):
    x = torch.randn(2, 3, T, dtype=torch.float64)
    for n in (T, 2 * T):
        X = torch.fft.rfft(x, n=n)
        assert_close(rfft_naive(x, n), X, 1e-12, floor=0)
        assert_close(irfft_naive(X, n), torch.fft.irfft(X, n=n), 1e-12, floor=0)


@pytest.mark.parametrize("T", (1, 7, 16))
@pytest.mark.parametrize("linear", [False, True])
def test_spectral_conv_fft_equals_direct(T, linear):
    n = 2 * T if linear else T
    x = torch.randn(2, 3, T, dtype=torch.float64)
    H = torch.randn(2, 3, n // 2 + 1, dtype=torch.complex128)
    assert_close(spectral_conv(x, H, n, mode="fft"), spectral_conv(x, H, n, mode="direct"), 1e-10, floor=0)


def test_circular_conv_is_shift_equivariant():
    x, h = torch.randn(1, 2, 11, dtype=torch.float64), torch.randn(2, 11, dtype=torch.float64)
    for m in (1, 4, 10):
        y_shift = fftconv(torch.roll(x, -m, -1), h)
        assert_close(y_shift, torch.roll(fftconv(x, h), -m, -1), 1e-12, floor=0)


def test_linear_conv_has_no_wraparound():
    T = 9
    x = torch.zeros(1, 1, T, dtype=torch.float64)
    x[..., -1] = 1.0  # an impulse at the last step
    h = torch.randn(1, T, dtype=torch.float64)
    y = fftconv(x, h, "linear")
    assert float(y[..., :-1].abs().max()) <= 1e-12  # nothing reaches earlier outputs
    assert abs(float(y[0, 0, -1] - h[0, 0])) <= 1e-12


@pytest.mark.parametrize("impl", [i for i in MODES if i != "direct"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("padding", ["circular", "linear"])
def test_every_impl_matches_naive(impl, dtype, padding):
    """fftconv and spectral_conv: each implementation against the direct sums in fp64 (outputs and gradients of
    x and of the kernel / spectrum), from the same rounded inputs."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 11, generator=g).to(dtype)
    h = torch.randn(2, 3, 11, generator=g).to(dtype)
    check_against_reference(
        lambda x, h: (fftconv(x, h, padding, mode=impl),),
        lambda x, h: (direct_conv(x, h, padding),),
        [x, h],
        dtype=dtype,
        out_names=["y"],
        in_names=["x", "h"],
    )
    n = 11 if padding == "circular" else 22
    H = torch.randn(3, n // 2 + 1, generator=g, dtype=torch.complex128).to(
        torch.complex128 if dtype == torch.float64 else torch.complex64
    )
    check_against_reference(
        lambda x, H: (spectral_conv(x, H, n, mode=impl),),
        lambda x, H: (spectral_conv_naive(x, H, n),),
        [x, H],
        dtype=dtype,
        out_names=["y"],
        in_names=["x", "H"],
    )


@pytest.mark.parametrize("padding", ["circular", "linear"])
def test_gradients_fft_equal_direct_fp64(padding):
    x = torch.randn(2, 3, 10, dtype=torch.float64, requires_grad=True)
    h = torch.randn(2, 3, 10, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 3, 10, dtype=torch.float64)
    grads = []
    for impl in ("fft", "direct"):
        gx, gh = torch.autograd.grad((fftconv(x, h, padding, impl) * w).sum(), (x, h))
        grads.append((gx, gh))
    for a, b in zip(*grads):
        assert_close(a, b, 1e-10, floor=0)
    assert torch.autograd.gradcheck(lambda a, b: fftconv(a, b, padding), (x, h))


def test_half_precision_is_upcast_and_cast_back():
    x, h = torch.randn(2, 4, 100), torch.randn(4, 100)
    y = fftconv(x.bfloat16(), h.bfloat16())
    assert y.dtype == torch.bfloat16
    ref = fftconv(x.bfloat16().float(), h.bfloat16().float())
    assert_close(y.float(), ref, 3e-2, floor=0)


def test_bad_input_is_refused_clearly():
    x, h = torch.randn(2, 3, 8), torch.randn(3, 8)
    with pytest.raises(ValueError, match="kernel length mismatch"):
        fftconv(x, torch.randn(3, 7))
    with pytest.raises(ValueError, match="padding"):
        fftconv(x, h, padding="reflect")
    with pytest.raises(ValueError, match="mode"):
        fftconv(x, h, mode="cuda")
    with pytest.raises(ValueError, match=r"\(B, C, T\)"):
        fftconv(x[0], h)
    with pytest.raises(ValueError, match="C=3"):
        fftconv(x, torch.randn(4, 8))
    with pytest.raises(ValueError, match="B=2"):
        fftconv(x, torch.randn(5, 3, 8))
    with pytest.raises(TypeError, match="floating"):
        fftconv(x.long(), h)
    with pytest.raises(TypeError, match="floating"):
        fftconv(x.to(torch.complex64), h)
    with pytest.raises(ValueError, match="at least one"):
        fftconv(torch.randn(2, 3, 0), torch.randn(3, 0))
    with pytest.raises(ValueError, match="FFT size"):
        spectral_conv(x, torch.randn(3, 7, dtype=torch.complex64), 12)
    with pytest.raises(ValueError, match="F=5"):
        spectral_conv(x, torch.randn(3, 6, dtype=torch.complex64), 8)
    with pytest.raises(TypeError, match="complex"):
        spectral_conv(x, torch.randn(3, 5), 8)
