"""Per-channel long convolution of real sequences, by FFT or by the direct sum (the reference).

    y = fftconv(x, h, padding="circular" | "linear", mode="auto" | "fft" | "direct")
    y = spectral_conv(x, H, n, mode=...)     # multiply by a given spectrum H (n//2+1 bins)

``x (B, C, T)`` real, channels first; ``h (C, T)`` (one kernel per channel) or ``(B, C, T)`` (a kernel per
sample, as Orchid's data-dependent kernel). ``padding="circular"`` is the length-T periodic convolution,
``"linear"`` the zero-padded (FFT size 2T) one. Input is validated here, before any FFT. ``choose_implementation``
decides what runs: the FFT for ``"auto"`` on every device and dtype (there is no kernel or C loop to prefer), the
direct sum only when asked.
See README.md for the conventions and their derivation.
"""

from __future__ import annotations

import torch

from ...errors import InputError
from ...kernels.switch import Choice
from . import fft as _fft
from . import naive as _naive
from .fft import rfft
from .naive import dft_matrix, direct_conv, irfft_naive, rfft_naive, spectral_conv_naive

PADDINGS = ("circular", "linear")
MODES = ("auto", "fft", "direct")

__all__ = [
    "MODES",
    "PADDINGS",
    "choose_implementation",
    "dft_matrix",
    "direct_conv",
    "fft_size",
    "fftconv",
    "irfft_naive",
    "rfft",
    "rfft_naive",
    "spectral_conv",
    "spectral_conv_naive",
]


def fft_size(T: int, padding: str) -> int:
    """FFT size for a length-T signal: T (circular) or 2T (linear)."""
    _check_choice("padding", padding, PADDINGS)
    return T if padding == "circular" else 2 * T


def choose_implementation(mode: str) -> Choice:
    """Which implementation ``fftconv`` / ``spectral_conv`` run: ``fft`` for ``"auto"`` (O(T log T), exact up to
    rounding), else the mode asked for (``direct``: the O(T²) reference sum)."""
    _check_choice("mode", mode, MODES)
    return Choice("fft" if mode == "auto" else mode)


def _check_choice(name: str, value, choices) -> None:
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"{name} must be one of {choices}, got {value!r}")


def _check_signal(x) -> None:
    if not isinstance(x, torch.Tensor):
        raise InputError(f"x must be a torch.Tensor of shape (B, C, T), got {type(x).__name__}")
    if not x.is_floating_point():
        raise InputError(f"x must be a real floating-point tensor of shape (B, C, T), got dtype {x.dtype}")
    if x.dim() != 3:
        raise InputError(f"x must have shape (B, C, T), got {tuple(x.shape)}")
    if x.shape[-1] == 0:
        raise InputError(f"x must have at least one time step, got shape {tuple(x.shape)}")


def fftconv(x: torch.Tensor, h: torch.Tensor, padding: str = "circular", mode: str = "auto") -> torch.Tensor:
    """Per-channel convolution of ``x (B, C, T)`` with ``h (C, T)`` or ``(B, C, T)``; returns ``(B, C, T)``."""
    _check_signal(x)
    _check_choice("padding", padding, PADDINGS)
    _check_choice("mode", mode, MODES)
    if not isinstance(h, torch.Tensor) or not h.is_floating_point():
        raise InputError(
            f"h must be a real floating-point tensor of shape (C, T) or (B, C, T), got "
            f"{getattr(h, 'dtype', type(h).__name__)}"
        )
    B, C, T = x.shape
    if h.dim() not in (2, 3):
        raise InputError(f"h must have shape (C={C}, T={T}) or (B={B}, C={C}, T={T}), got {tuple(h.shape)}")
    if h.shape[-1] != T:
        raise InputError(
            f"kernel length mismatch: h has {h.shape[-1]} taps but x has T = {T} steps (zero-pad the kernel to T)"
        )
    if h.shape[-2] != C or (h.dim() == 3 and h.shape[0] != B):
        raise InputError(f"h must have shape (C={C}, T={T}) or (B={B}, C={C}, T={T}), got {tuple(h.shape)}")
    if choose_implementation(mode).name == "direct":
        return _naive.direct_conv(x, h, padding)
    return _fft.fft_conv(x, h, padding)


def spectral_conv(x: torch.Tensor, H: torch.Tensor, n: int, mode: str = "auto") -> torch.Tensor:
    """``irfft(rfft(x, n) * H, n)[..., :T]`` with ``H (C, n//2+1)`` or ``(B, C, n//2+1)`` complex.

    ``n = T`` is the circular convolution with the n-periodic kernel ``irfft(H, n)``; ``n = 2T`` is the
    wrap-free (two-sided) linear one. Other n are refused.
    """
    _check_signal(x)
    _check_choice("mode", mode, MODES)
    B, C, T = x.shape
    if n not in (T, 2 * T):
        raise InputError(f"n (FFT size) must be T = {T} (circular) or 2T = {2 * T} (linear), got {n!r}")
    if not isinstance(H, torch.Tensor) or not H.is_complex():
        raise InputError(f"H must be a complex spectrum tensor, got {getattr(H, 'dtype', type(H).__name__)}")
    F = n // 2 + 1
    if H.dim() not in (2, 3) or H.shape[-2:] != (C, F) or (H.dim() == 3 and H.shape[0] != B):
        raise InputError(f"H must have shape (C={C}, F={F}) or (B={B}, C={C}, F={F}) for n = {n}, got {tuple(H.shape)}")
    if choose_implementation(mode).name == "direct":
        return _naive.spectral_conv_naive(x, H, n).to(x.dtype)
    return _fft.spectral_conv(x, H, n)
