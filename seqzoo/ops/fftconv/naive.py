"""Reference FFT-convolution maths: explicit DFT matrices and the O(T^2) direct sums (the truth).

Conventions (Orchid, Karami & Ghodsi, arXiv:2402.18508, §2-§3; docs/orchid.md): channels-first ``x (B, C, T)``, per-channel (depthwise) convolution,

    linear:    y[t] = sum_{l=0}^{T-1} h[t-l] x[l]          (taps outside 0..T-1 are zero)
    circular:  y[t] = sum_{l=0}^{T-1} h[(t-l) mod T] x[l]

and the unscaled forward DFT ``X[w] = sum_t x[t] exp(-2 pi i w t / N)`` with a 1/N inverse
(``torch.fft``'s default ``norm="backward"``). Everything here is a plain loop or a matrix product so
that the fast paths in ``fft.py`` can be checked against it in float64.
"""

from __future__ import annotations

import math

import torch

from ...errors import InputError


def dft_matrix(n: int, bins: int, dtype=torch.complex128, device=None) -> torch.Tensor:
    """``M (n, bins)`` with ``M[t, w] = exp(-2 pi i w t / n)``, so ``X = x @ M`` is ``rfft(x, n)``."""
    t = torch.arange(n, dtype=torch.float64, device=device)
    w = torch.arange(bins, dtype=torch.float64, device=device)
    ang = -2 * math.pi * torch.outer(t, w) / n  # (n, bins)
    return torch.polar(torch.ones_like(ang), ang).to(dtype)


def rfft_naive(x: torch.Tensor, n: int) -> torch.Tensor:
    """``rfft(x, n)`` by a DFT matrix: ``x (..., T)`` real, zero-padded (or cropped) to n -> ``(..., n//2+1)``."""
    T = x.shape[-1]
    if T < n:
        x = torch.cat([x, x.new_zeros(*x.shape[:-1], n - T)], dim=-1)  # (..., n)
    x = x[..., :n]
    cdtype = torch.complex128 if x.dtype == torch.float64 else torch.complex64
    return x.to(cdtype) @ dft_matrix(n, n // 2 + 1, cdtype, x.device)


def irfft_naive(X: torch.Tensor, n: int) -> torch.Tensor:
    """Inverse of ``rfft_naive`` for a Hermitian spectrum: ``X (..., n//2+1)`` -> real ``(..., n)``.

    Rebuilds the full spectrum (bins n//2+1..n-1 are conjugates), drops the imaginary part of the DC
    bin and (even n) of the Nyquist bin as ``torch.fft.irfft`` does, then applies the inverse DFT matrix.
    """
    F = n // 2 + 1
    if X.shape[-1] != F:
        raise InputError(f"X must have n//2+1 = {F} bins for n = {n}, got {X.shape[-1]}")
    X = X.clone()
    X[..., 0] = X[..., 0].real.to(X.dtype)
    if n % 2 == 0:
        X[..., -1] = X[..., -1].real.to(X.dtype)
    rest = X[..., 1 : n - F + 1].flip(-1).conj()  # bins n-1 .. F  <- conj of 1 .. n-F
    full = torch.cat([X, rest], dim=-1)  # (..., n)
    M = dft_matrix(n, n, X.dtype, X.device).conj()  # (n, n), exp(+2 pi i w t / n)
    return (full @ M.transpose(0, 1)).real / n


def direct_conv(x: torch.Tensor, h: torch.Tensor, padding: str = "circular") -> torch.Tensor:
    """O(T^2) per-channel convolution. ``x (B, C, T)``, ``h (C, T)`` or ``(B, C, T)`` -> ``(B, C, T)``."""
    T = x.shape[-1]
    t = torch.arange(T, device=x.device)
    lag = t[:, None] - t[None, :]  # (T_out, T_in): t - l
    if padding == "circular":
        taps = h[..., lag % T]  # (..., C, T, T): h[(t-l) mod T]
    elif padding == "linear":
        taps = h[..., lag.clamp(min=0)] * (lag >= 0).to(h.dtype)  # taps at negative lags are zero
    else:
        raise InputError(f"padding must be 'circular' or 'linear', got {padding!r}")
    return torch.einsum("...ctl,bcl->bct", taps, x) if h.dim() == 2 else torch.einsum("bctl,bcl->bct", taps, x)


def spectral_conv_naive(x: torch.Tensor, H: torch.Tensor, n: int) -> torch.Tensor:
    """``irfft(rfft(x, n) * H, n)[..., :T]`` without an FFT: the kernel ``h = irfft(H, n)`` (inverse DFT
    matrix) applied by the n-periodic direct sum ``y[t] = sum_l h[(t-l) mod n] x[l]``, for t < T."""
    T = x.shape[-1]
    h = irfft_naive(H, n)  # (..., C, n), real
    t = torch.arange(T, device=x.device)
    taps = h[..., (t[:, None] - t[None, :]) % n]  # (..., C, T, T)
    if taps.dim() == 3:
        return torch.einsum("ctl,bcl->bct", taps, x.to(taps.dtype))
    return torch.einsum("bctl,bcl->bct", taps, x.to(taps.dtype))
