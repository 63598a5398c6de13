"""FFT convolution: O(T log T) per channel with ``torch.fft`` (derivation in README.md)."""

from __future__ import annotations

import torch


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    # torch.fft has no bf16 and cuFFT fp16 needs powers of two: half precision is upcast to fp32.
    return x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32


def rfft(x: torch.Tensor, n: int) -> torch.Tensor:
    """``x (..., T)`` real -> ``(..., n//2+1)`` complex, zero-padded to n (unscaled forward DFT)."""
    return torch.fft.rfft(x.to(_compute_dtype(x)), n=n)


def spectral_conv(x: torch.Tensor, H: torch.Tensor, n: int) -> torch.Tensor:
    """``irfft(rfft(x, n) * H, n)[..., :T]``; ``x (B, C, T)``, ``H (C, F)`` or ``(B, C, F)``, F = n//2+1."""
    T = x.shape[-1]
    X = rfft(x, n)  # (B, C, F)
    y = torch.fft.irfft(X * H, n=n)[..., :T]  # (B, C, T)
    return y.to(x.dtype)


def fft_conv(x: torch.Tensor, h: torch.Tensor, padding: str = "circular") -> torch.Tensor:
    """Per-channel convolution of ``x (B, C, T)`` with a length-T kernel ``h (C, T)`` or ``(B, C, T)``.

    ``padding="circular"``: FFT size T; ``"linear"``: FFT size 2T (zero padding, no wrap-around).
    """
    T = x.shape[-1]
    n = T if padding == "circular" else 2 * T
    return spectral_conv(x, rfft(h, n), n)
