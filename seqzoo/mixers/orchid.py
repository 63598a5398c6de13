"""Orchid: data-dependent global convolution with shift-invariant conditioning networks.

Karami & Ghodsi, "Orchid: Flexible and Data-Dependent Convolution for Sequence Modeling",
arXiv:2402.18508 (NeurIPS 2024); the static filter is Hyena's implicit filter (arXiv:2302.10866).

    y = (h_theta(x) + h_0) * x        (per-channel FFT convolution, circular by default)
    H_theta = Conv1d_F(|F(Conv1d_t(v))|^p)            (type I, magnitude)
            = Conv1d_F(conj(F(k(v))) . sigma(F(q(v))))  (type II, cross-correlation)

inside Hyena's order-1.5 block ``out_proj(x0 . ((H_theta + H_0) * (x1 . v) + D . (x1 . v)) + h_res * u + D_res . u)``.
The mixer is non-causal: every frequency bin of the conditioning input depends on every token, so
``causal = False`` and the state is always None (arXiv:2402.18508 §6 leaves a causal variant to future work).

Modes: ``"fft"`` (torch.fft) and ``"direct"`` (explicit DFT matrices and O(T^2) sums from
``ops/fftconv/naive.py``, the reference). Options that exist only to reproduce the authors' block
(``fft_scaling="authors"``, ``type2_layout="authors"``) are documented in docs/orchid.md.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InputError
from ..ops import fftconv as fc
from .base import Mixer, register_mixer

CONDITIONINGS = ("type1", "type2", "none")
SIGMAS = ("identity", "sigmoid", "sigmoid_reim")
PADDINGS = ("circular", "causal", "zeros")
CONVS = ("circular", "linear")
CONDITION_ON = ("v", "input")
SCALINGS = ("exact", "authors")
LAYOUTS = ("channel", "authors")


def _choice(name: str, value: Any, choices: tuple) -> None:
    if not isinstance(value, str) or value not in choices:
        raise InputError(f"{name} must be one of {choices}, got {value!r}")


def _pos_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InputError(f"{name} must be a positive int, got {value!r}")


def check_optim_setting(name: str, value: Any, none_ok: bool = False) -> None:
    """An optimiser setting: a finite float >= 0 (0 freezes, as Hyena's recall configs do with ``lr_pos_emb``)."""
    if value is None and none_ok:
        return
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf
    if not ok:
        raise InputError(f"{name} must be a finite number >= 0{' or None' if none_ok else ''}, got {value!r}")


def _compute_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """fp32 when any input is half precision (torch.fft has no bf16), else the widest input dtype."""
    if any(t.dtype in (torch.float16, torch.bfloat16) for t in tensors):
        return torch.float32
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def _check_kernel(name: str, k: int, padding: str) -> None:
    _pos_int(name, k)
    if padding != "causal" and k % 2 == 0:
        raise InputError(f"{name} must be odd with {padding!r} ('same') padding, got {k}")


def pad_time(x: torch.Tensor, k: int, padding: str) -> torch.Tensor:
    """Pad ``x (B, C, T)`` on the time axis so a valid size-k conv returns T steps.

    ``causal``: k-1 zeros on the left; ``zeros``: (k-1)/2 zeros each side; ``circular``: modular
    indexing ``x[..., arange(-r, T+r) % T]`` (valid even when the pad exceeds T, e.g. T = 1, k = 5).
    """
    if padding == "causal":
        return F.pad(x, (k - 1, 0))
    r = (k - 1) // 2
    if padding == "zeros":
        return F.pad(x, (r, r))
    T = x.shape[-1]
    if r == 0:
        return x
    if r <= T:
        return torch.cat([x[..., T - r :], x, x[..., :r]], dim=-1)  # (B, C, T + 2r)
    idx = torch.arange(-r, T + r, device=x.device) % T
    return x[..., idx]  # (B, C, T + 2r)


def depthwise_conv(x: torch.Tensor, conv: nn.Conv1d, padding: str) -> torch.Tensor:
    """Depthwise ``conv`` (built with padding=0) over ``x (B, C, T)`` with the given padding -> ``(B, C, T)``."""
    w = conv.weight.to(x.dtype)
    b = None if conv.bias is None else conv.bias.to(x.dtype)
    return F.conv1d(pad_time(x, conv.kernel_size[0], padding), w, b, groups=conv.groups)


def channel_norm(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    """LayerNorm over the channel axis of ``x (B, C, L)`` at each position."""
    if isinstance(norm, nn.Identity):
        return x
    w, b = norm.weight.to(x.dtype), norm.bias.to(x.dtype)
    return F.layer_norm(x.transpose(1, 2), (x.shape[1],), w, b, norm.eps).transpose(1, 2)


# ------------------------------------------------------------------ static kernel h0
class ImplicitFilter(nn.Module):
    """Hyena's implicit long filter ``h0[n, c] = FFN(PosEmb(n))[c] . exp(-t_n |delta_c|)`` (Hyena, arXiv:2302.10866, §3.3),
    with the per-channel direct term ``skip`` (D_skip, N(0, 1) init)."""

    def __init__(self, d_model: int, l_max: int, emb_dim: int = 5, width: int = 64, n_inner: int = 2, w: float = 10.0):
        super().__init__()
        if not isinstance(emb_dim, int) or emb_dim < 3 or emb_dim % 2 == 0:
            raise InputError(f"filter_emb_dim must be an odd int >= 3, got {emb_dim!r}")
        _pos_int("filter_width", width)
        _pos_int("l_max", l_max)
        if not isinstance(n_inner, int) or n_inner < 0:
            raise InputError(f"filter_inner must be an int >= 0, got {n_inner!r}")
        self.l_max, self.d_model = l_max, d_model
        bands = (emb_dim - 1) // 2
        t = torch.linspace(0, 1, l_max)[None, :, None]  # (1, L, 1): t_n = n / (l_max - 1)
        ang = 2 * math.pi * torch.arange(l_max, dtype=torch.float64)[None, :, None] / l_max  # (1, L, 1)
        f = torch.linspace(1e-4, bands - 1, bands, dtype=torch.float64)[None, None]  # (1, 1, bands)
        z = torch.cat([t.double(), torch.cos(f * ang), -torch.sin(f * ang)], dim=-1)  # (1, L, E)
        self.pos_z = nn.Parameter(z.float())
        self.register_buffer("pos_t", t)
        self.freq = nn.Parameter(w * torch.ones(1, width))
        dims = [emb_dim] + [width] * (n_inner + 1)
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(dims))
        self.linears.append(nn.Linear(width, d_model, bias=False))
        deltas = torch.linspace(math.log(1e-2) / 1.5, math.log(1e-2) / 0.3, d_model)[None, None]  # (1, 1, D)
        self.register_buffer("deltas", deltas)
        self.skip = nn.Parameter(torch.randn(d_model))

    def ffn(self, T: int) -> torch.Tensor:
        """FFN output before the decay window, ``(1, T, D)``; computed in at least fp32 (sin(w . a) with
        w ~ 10 amplifies half-precision rounding)."""
        cd = torch.promote_types(self.pos_z.dtype, torch.float32)
        a = self.pos_z[:, :T].to(cd)
        for lin in self.linears[:-1]:  # Sin: one learnable frequency vector shared by all layers
            a = torch.sin(self.freq.to(cd) * F.linear(a, lin.weight.to(cd), lin.bias.to(cd)))
        return F.linear(a, self.linears[-1].weight.to(cd))

    def kernel(self, T: int) -> torch.Tensor:
        """The first T taps of the l_max kernel, ``(D, T)``."""
        if T > self.l_max:
            raise InputError(f"sequence length T = {T} exceeds the filter's l_max = {self.l_max}")
        h = self.ffn(T)
        h = h * torch.exp(-self.pos_t[:, :T].to(h.dtype) * self.deltas.abs().to(h.dtype))  # (1, T, D)
        return h[0].transpose(0, 1)  # (D, T)


# ------------------------------------------------------------ conditioning networks
class _Conditioning(nn.Module):
    def __init__(
        self, d_model: int, cond_kernel: int, freq_kernel: int, cond_padding: str, cond_norm: bool, in_per_channel: int
    ):
        super().__init__()
        _check_kernel("cond_kernel", cond_kernel, cond_padding)
        _check_kernel("freq_kernel", freq_kernel, "zeros")
        D = d_model
        self.cond_padding = cond_padding
        self.freq_conv = nn.Conv1d(in_per_channel * D, 2 * D, freq_kernel, groups=D, padding=(freq_kernel - 1) // 2)
        self.freq_norm = nn.LayerNorm(2 * D) if cond_norm else nn.Identity()

    def _time(self, c, conv, norm):
        return channel_norm(depthwise_conv(c, conv, self.cond_padding), norm)  # (B, D, T)

    def _freq(self, feats: torch.Tensor) -> torch.Tensor:
        """Frequency conv (zero 'same' padding along bins) + LayerNorm over 2D: ``(B, k.D, F) -> (B, 2D, F)``."""
        w, b = self.freq_conv.weight.to(feats.dtype), self.freq_conv.bias.to(feats.dtype)
        out = F.conv1d(feats, w, b, padding=self.freq_conv.padding, groups=self.freq_conv.groups)
        return channel_norm(out, self.freq_norm)


class MagnitudeConditioning(_Conditioning):
    """Type I, eq. (2): ``H = Conv1d_F(|F(Conv1d_t(c))|^p)``, 1 -> 2 outputs per channel = (Re, Im)."""

    def __init__(self, d_model, cond_kernel=3, freq_kernel=3, cond_padding="circular", cond_norm=True, p=2):
        super().__init__(d_model, cond_kernel, freq_kernel, cond_padding, cond_norm, 1)
        if p not in (1, 2):
            raise InputError(f"p (magnitude power of type I conditioning) must be 1 or 2, got {p!r}")
        self.p = p
        self.time_conv = nn.Conv1d(d_model, d_model, cond_kernel, groups=d_model)
        self.time_norm = nn.LayerNorm(d_model) if cond_norm else nn.Identity()

    def features(self, c, n, rfft, scale):
        A = rfft(self._time(c, self.time_conv, self.time_norm), n) * scale  # (B, D, F) complex
        power = A.real.square() + A.imag.square()
        return power if self.p == 2 else torch.sqrt(power + 1e-12)  # (B, D, F) real

    def forward(self, c, n, rfft, scale=1.0):
        out = self._freq(self.features(c, n, rfft, scale))  # (B, 2D, F): channel c -> (2c, 2c+1)
        return torch.complex(out[:, 0::2], out[:, 1::2])  # (B, D, F)


class CorrelationConditioning(_Conditioning):
    """Type II, eq. (3): ``H = Conv1d_F(conj(F(k(c))) . sigma(F(q(c))))``, 2 -> 2 per channel."""

    def __init__(
        self,
        d_model,
        cond_kernel=3,
        freq_kernel=3,
        cond_padding="circular",
        cond_norm=True,
        sigma="identity",
        sigma_eps=1e-12,
        layout="channel",
    ):
        super().__init__(d_model, cond_kernel, freq_kernel, cond_padding, cond_norm, 2)
        _choice("sigma", sigma, SIGMAS)
        _choice("type2_layout", layout, LAYOUTS)
        self.sigma, self.sigma_eps, self.layout = sigma, sigma_eps, layout
        self.k_conv = nn.Conv1d(d_model, d_model, cond_kernel, groups=d_model)
        self.q_conv = nn.Conv1d(d_model, d_model, cond_kernel, groups=d_model)
        self.k_norm = nn.LayerNorm(d_model) if cond_norm else nn.Identity()
        self.q_norm = nn.LayerNorm(d_model) if cond_norm else nn.Identity()

    def gate(self, Q: torch.Tensor) -> torch.Tensor:
        if self.sigma == "identity":
            return Q
        if self.sigma == "sigmoid":  # reading (b): sigmoid on the magnitude, phase kept (shift-invariant)
            mag = Q.abs()
            return Q * (torch.sigmoid(mag) / mag.clamp(min=self.sigma_eps))
        return torch.complex(torch.sigmoid(Q.real), torch.sigmoid(Q.imag))  # reading (a): NOT shift-invariant

    def correlation(self, c, n, rfft, scale):
        K = rfft(self._time(c, self.k_conv, self.k_norm), n) * scale  # (B, D, F)
        Q = rfft(self._time(c, self.q_conv, self.q_norm), n) * scale
        return K.conj() * self.gate(Q)

    def forward(self, c, n, rfft, scale=1.0):
        C = self.correlation(c, n, rfft, scale)  # (B, D, F)
        B, D, Fb = C.shape
        if self.layout == "channel":  # group g sees (Re C_g, Im C_g); outputs (2g, 2g+1) = (Re, Im) of H_g
            feats = torch.stack([C.real, C.imag], dim=2).reshape(B, 2 * D, Fb)  # (B, 2D, F) interleaved
            out = self._freq(feats)
            return torch.complex(out[:, 0::2], out[:, 1::2])
        feats = torch.cat([C.real, C.imag], dim=1)  # authors: (B, 2D, F) = [Re C_0..D-1, Im C_0..D-1]
        out = self._freq(feats)
        return torch.complex(out[:, :D], out[:, D:])


# --------------------------------------------------------------------------- mixer
@register_mixer("orchid")
class Orchid(Mixer):
    """The Orchid operator (order 1.5) as a seqzoo mixer: ``y, None = orchid(x, context=None, mode=None)``."""

    modes = ("fft", "direct")
    causal = False
    test_kwargs = {"l_max": 32, "filter_width": 16, "conditioning": "type2", "sigma": "sigmoid"}

    def __init__(
        self,
        d_model: int,
        conditioning: str = "type1",
        p: int = 2,
        sigma: str = "identity",
        sigma_eps: float = 1e-12,
        conv: str = "circular",
        condition_on: str = "v",
        conv_size: int = 3,
        short_padding: str = "circular",
        cond_kernel: int = 3,
        cond_padding: str = "circular",
        freq_kernel: int = 3,
        cond_norm: bool = True,
        l_max: int = 2048,
        filter_emb_dim: int = 5,
        filter_width: int = 64,
        filter_inner: int = 2,
        filter_w: float = 10.0,
        residual_long_conv: bool = True,
        cross: bool = False,
        d_context: int | None = None,
        fft_scaling: str = "exact",
        type2_layout: str = "channel",
        filter_lr: float | None = 1e-3,
        filter_wd: float = 0.0,
        pos_lr: float | None = 1e-5,
        param_groups: bool = True,
    ):
        super().__init__(d_model)
        _choice("conditioning", conditioning, CONDITIONINGS)
        _choice("conv", conv, CONVS)
        _choice("condition_on", condition_on, CONDITION_ON)
        _choice("short_padding", short_padding, PADDINGS)
        _choice("cond_padding", cond_padding, PADDINGS)
        _choice("fft_scaling", fft_scaling, SCALINGS)
        _choice("sigma", sigma, SIGMAS)
        _choice("type2_layout", type2_layout, LAYOUTS)
        if p not in (1, 2):
            raise InputError(f"p (magnitude power of type I conditioning) must be 1 or 2, got {p!r}")
        _check_kernel("conv_size", conv_size, short_padding)
        if d_context is not None and not cross:
            raise InputError("d_context is only used with cross=True")
        for name, value in (("filter_lr", filter_lr), ("filter_wd", filter_wd), ("pos_lr", pos_lr)):
            check_optim_setting(name, value, none_ok=name != "filter_wd")
        D = d_model
        self.conditioning, self.conv, self.condition_on = conditioning, conv, condition_on
        self.conv_size, self.short_padding, self.fft_scaling, self.l_max = conv_size, short_padding, fft_scaling, l_max
        self.residual_long_conv, self.cross = residual_long_conv, cross
        self.filter_lr, self.filter_wd, self.pos_lr, self.param_groups = filter_lr, filter_wd, pos_lr, param_groups

        self.in_proj = nn.Linear(D, 3 * D)
        self.short_conv = nn.Conv1d(3 * D, 3 * D, conv_size, groups=3 * D)
        self.out_proj = nn.Linear(D, D)
        self.filter = ImplicitFilter(D, l_max, filter_emb_dim, filter_width, filter_inner, filter_w)
        self.filter_res = (
            ImplicitFilter(D, l_max, filter_emb_dim, filter_width, filter_inner, filter_w)
            if residual_long_conv
            else None
        )
        common = dict(cond_kernel=cond_kernel, freq_kernel=freq_kernel, cond_padding=cond_padding, cond_norm=cond_norm)
        if conditioning == "type1":
            self.cond = MagnitudeConditioning(D, p=p, **common)
        elif conditioning == "type2":
            self.cond = CorrelationConditioning(D, sigma=sigma, sigma_eps=sigma_eps, layout=type2_layout, **common)
        else:
            self.cond = None
        self.ctx_proj = nn.Linear(d_context or D, D) if cross else None

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, conditioning={self.conditioning}, conv={self.conv}, "
            f"conv_size={self.conv_size}, short_padding={self.short_padding}, l_max={self.l_max}, cross={self.cross}"
        )

    # -------------------------------------------------------------- interface
    def forward(self, x, state=None, mode=None, segment_pos=None, context=None):
        if context is None:
            return super().forward(x, state=state, mode=mode, segment_pos=segment_pos)
        self.check_input(x)
        self._check_context(x, context)
        if state is not None:
            raise InputError("Orchid is non-causal and carries no state; pass state=None")
        if segment_pos is not None:
            raise InputError("orchid does not support segment_pos (packed documents with resets)")
        return self._forward(x, None, self.resolve_mode(x, None, mode), context=context)

    def check_input(self, x) -> None:
        super().check_input(x)
        if x.shape[1] > self.l_max:
            raise InputError(
                f"{self.name}: sequence length T = {x.shape[1]} exceeds l_max = {self.l_max} "
                f"(x has shape {tuple(x.shape)}); build the mixer with a larger l_max"
            )

    def _check_context(self, x, context) -> None:
        if not self.cross:
            raise InputError("context was given but this Orchid was built without cross=True")
        if not isinstance(context, torch.Tensor) or not context.is_floating_point():
            raise InputError(
                f"context must be a floating-point tensor (B, S, d_context), got "
                f"{getattr(context, 'dtype', type(context).__name__)}"
            )
        d_ctx = self.ctx_proj.in_features
        if context.dim() != 3 or context.shape[0] != x.shape[0] or context.shape[-1] != d_ctx:
            raise InputError(
                f"context must have shape (B={x.shape[0]}, S, d_context={d_ctx}), got {tuple(context.shape)}"
            )
        if not 1 <= context.shape[1] <= x.shape[1]:
            raise InputError(
                f"context length S = {context.shape[1]} must be in [1, T = {x.shape[1]}] (it is zero-padded to T)"
            )

    # ----------------------------------------------------------------- pieces
    def fft_size(self, T: int) -> int:
        return T if self.conv == "circular" else 2 * T

    def _rfft(self, mode: str):
        return fc.rfft if mode == "fft" else fc.rfft_naive

    def conditioning_input(self, u: torch.Tensor, z: torch.Tensor, context: torch.Tensor | None) -> torch.Tensor:
        """What the conditioning network reads, channels-first ``(B, D, T)``."""
        T = u.shape[1]
        if context is not None:
            c = self.ctx_proj(context)  # (B, S, D)
            c = F.pad(c, (0, 0, 0, T - c.shape[1]))  # (B, T, D): zero-padded on the right in time
        elif self.condition_on == "v":
            c = z[..., 2 * self.d_model :]  # the v stream before the short conv (the authors' choice)
        else:
            c = u
        return c.transpose(1, 2)

    def adaptive_spectrum(self, u, z=None, context=None, mode="fft"):
        """``H_theta (B, D, F)``, the conditioning network's output (already a spectrum), or None."""
        if self.cond is None:
            return None
        if z is None:
            z = self.in_proj(u)
        n = self.fft_size(u.shape[1])
        c = self.conditioning_input(u, z, context)
        cd = _compute_dtype(u, c)
        scale = 1.0 / n if self.fft_scaling == "authors" else 1.0
        with torch.autocast(u.device.type, enabled=False):  # spectra stay in fp32 / fp64
            return self.cond(c.to(cd), n, self._rfft(mode), scale)

    def _static_spectrum(self, filt: ImplicitFilter, T: int, n: int, mode: str, dtype) -> torch.Tensor:
        h = filt.kernel(T).to(dtype)  # (D, T)
        H = self._rfft(mode)(h, n)  # (D, F)
        return H / n if self.fft_scaling == "authors" else H

    def _forward(self, x, state, mode, context=None):
        u = x
        B, T, D = u.shape
        n = self.fft_size(T)
        impl = "fft" if mode == "fft" else "direct"
        z = self.in_proj(u)  # (B, T, 3D); bf16 under autocast
        cd = _compute_dtype(u, z)  # fp32 for half-precision input or autocast, else the input dtype
        H_theta = self.adaptive_spectrum(u, z, context, mode)  # (B, D, F) or None
        with torch.autocast(u.device.type, enabled=False):
            zc = depthwise_conv(z.transpose(1, 2).to(cd), self.short_conv, self.short_padding)  # (B, 3D, T)
            x0, x1, v = zc.split(D, dim=1)  # each (B, D, T): outer gate, inner gate, signal
            s = x1 * v  # f1: inner gate
            H = self._static_spectrum(self.filter, T, n, mode, cd)  # (D, F)
            if H_theta is not None:
                H = H + H_theta  # (B, D, F)
            c = fc.spectral_conv(s, H, n, mode=impl) + self.filter.skip.to(cd)[:, None] * s  # f_*
            y = x0 * c  # f2: outer gate
            if self.filter_res is not None:
                ut = u.transpose(1, 2).to(cd)  # (B, D, T)
                H_res = self._static_spectrum(self.filter_res, T, n, mode, cd)
                y = y + fc.spectral_conv(ut, H_res, n, mode=impl) + self.filter_res.skip.to(cd)[:, None] * ut
        return self.out_proj(y.transpose(1, 2).to(u.dtype)), None

    # -------------------------------------------------------------- optimiser
    def optim_overrides(self) -> dict[str, dict[str, float]]:
        """Hyena's optimiser rule for the implicit filters (arXiv:2302.10866; safari's ``HyenaFilter`` tags
        them with ``_optim``): the filter FFN and its Sin frequencies train at ``filter_lr`` with weight decay
        ``filter_wd``, the positional features ``pos_z`` at ``pos_lr`` without weight decay. Everything else,
        the filters' direct term ``skip`` and the conditioning network included, keeps the trainer's default
        (the authors' block: ``lr``/``wd`` None). ``filter_lr``/``pos_lr`` None: the base rate. Off (one
        group) with ``param_groups=False``."""
        if not self.param_groups:
            return {}
        filt = {"weight_decay": self.filter_wd, **({"lr": self.filter_lr} if self.filter_lr is not None else {})}
        pos = {"weight_decay": 0.0, **({"lr": self.pos_lr} if self.pos_lr is not None else {})}
        out: dict[str, dict[str, float]] = {}
        for prefix in ("filter", "filter_res"):
            filt_mod = getattr(self, prefix)
            if filt_mod is None:
                continue
            out[f"{prefix}.pos_z"] = pos
            out[f"{prefix}.freq"] = filt
            for name, _ in filt_mod.linears.named_parameters():
                out[f"{prefix}.linears.{name}"] = filt
        return out
