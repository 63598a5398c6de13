"""Shared argument checks and dtype rules of the GateLoop ops (shapes in ``__init__.py``'s docstring).

Every op takes the same inputs:

* ``q, k``: ``(B, T, H, K)`` real; ``v``: ``(B, T, H, V)`` real
* ``log_mag``: ``(B, T, H, K)`` real, ``log|a| <= 0``; ``phase``: ``(B, T, H, K)`` real or None (real transitions)
* ``state``: None or ``(B, H, K, V)`` complex, the state S carried from an earlier call

and returns ``y (B, T, H, V)`` real and the final state ``(B, H, K, V)`` complex. The complex op always runs in
fp32 (complex64) or fp64 (complex128): fp64 if any input is fp64, else fp32 (so bf16/fp16 inputs are upcast).
"""

from __future__ import annotations

import torch

from ...errors import InputError


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """fp64 if any given tensor is fp64 / complex128, else fp32."""
    for t in tensors:
        if t is not None and t.dtype in (torch.float64, torch.complex128):
            return torch.float64
    return torch.float32


def complex_dtype(real: torch.dtype) -> torch.dtype:
    return torch.complex128 if real == torch.float64 else torch.complex64


def check_inputs(q, k, v, log_mag, phase, state, check_magnitude: bool = True) -> tuple[int, int, int, int, int]:
    """Validate shapes and dtypes (before any heavy work); returns ``(B, T, H, K, V)``."""
    for name, t in (("q", q), ("k", k), ("v", v), ("log_mag", log_mag)):
        if not isinstance(t, torch.Tensor):
            raise InputError(f"gateloop op: {name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise InputError(f"gateloop op: {name} must be a real floating-point tensor, got dtype {t.dtype}")
    if q.dim() != 4:
        raise InputError(f"gateloop op: q must have shape (B, T, H, K), got {tuple(q.shape)}")
    B, T, H, K = q.shape
    if T == 0:
        raise InputError(f"gateloop op: q must have at least one time step, got shape {tuple(q.shape)}")
    if k.shape != q.shape:
        raise InputError(
            f"gateloop op: k must have the shape of q (B, T, H, K) = {tuple(q.shape)}, got {tuple(k.shape)}"
        )
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise InputError(f"gateloop op: v must have shape (B={B}, T={T}, H={H}, V), got {tuple(v.shape)}")
    V = v.shape[3]
    if log_mag.shape != q.shape:
        raise InputError(
            f"gateloop op: log_mag must have shape (B, T, H, K) = {tuple(q.shape)}, got {tuple(log_mag.shape)}"
        )
    if phase is not None:
        if not isinstance(phase, torch.Tensor) or not phase.is_floating_point():
            raise InputError(
                f"gateloop op: phase must be a real floating-point tensor or None, got {getattr(phase, 'dtype', type(phase))}"
            )
        if phase.shape != q.shape:
            raise InputError(
                f"gateloop op: phase must have shape (B, T, H, K) = {tuple(q.shape)}, got {tuple(phase.shape)}"
            )
    if state is not None:
        if not isinstance(state, torch.Tensor) or not state.is_complex():
            raise InputError(
                f"gateloop op: state must be a complex tensor of shape (B, H, K, V) = {(B, H, K, V)}, "
                f"got {getattr(state, 'dtype', type(state).__name__)}"
            )
        if state.shape != (B, H, K, V):
            raise InputError(
                f"gateloop op: state must have shape (B, H, K, V) = {(B, H, K, V)}, got {tuple(state.shape)}"
            )
    if check_magnitude:
        mx = float(log_mag.detach().max())
        if not mx <= 1e-6:  # also catches NaN
            raise InputError(
                f"gateloop op: log_mag = log|a| must be <= 0 (|a| <= 1, a stable recurrence), got max {mx:.3g}"
            )
    return B, T, H, K, V


def prepare(q, k, v, log_mag, phase, state):
    """Cast to the compute dtype (fp32 / fp64); a missing phase becomes zeros; state to the matching complex dtype."""
    rd = compute_dtype(q, k, v, log_mag, phase, state)
    q, k, v, log_mag = (t.to(rd) for t in (q, k, v, log_mag))
    phase = torch.zeros_like(log_mag) if phase is None else phase.to(rd)
    if state is not None:
        state = state.to(complex_dtype(rd))
    return q, k, v, log_mag, phase, state


def cexp(re: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
    """``exp(re + i·im)`` built from real exp / cos / sin (PyTorch's complex exp on CPU is ~50x slower)."""
    mag = torch.exp(re)
    return torch.complex(mag * torch.cos(im), mag * torch.sin(im))


def transition(log_mag: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
    """``a = exp(log|a| + i·θ)``, complex, same shape."""
    return cexp(log_mag, phase)


def wrap_phase(phase: torch.Tensor) -> torch.Tensor:
    """Map θ into [-π, π); only e^{iθ} matters, and the gradient is unchanged (d/dθ = 1)."""
    return torch.remainder(phase + torch.pi, 2 * torch.pi) - torch.pi


def rotating_frame(q: torch.Tensor, k: torch.Tensor, phase: torch.Tensor | None, dim: int = 1):
    """Real 2K-dimensional form of the complex decay: ``q̂ = [q cos Θ, q sin Θ]``, ``k̂`` alike, ``(..., R, K)``.

    With Θ_t = Σ_{j<=t} θ_j (over time, axis ``dim``) and the state in the rotating frame
    Z_t = [Re; -Im](e^{-iΘ_t} S_t) (2K × V, real), the recurrence becomes a real one with decay |a_t| on both
    halves:  Z_t = |a_t| Z_{t-1} + k̂_t v_tᵀ,  y_t = q̂_tᵀ Z_t,  and  q̂_τ·k̂_σ = Σ_d q_τd k_σd cos(Θ_τd - Θ_σd).
    Θ is summed in fp64 and wrapped into [-π, π) before cos / sin, so the rotation is exact at any T. Returns
    ``(q̂, k̂, Θ)``; real transitions (``phase`` None) give R = 1, ``q̂ = q``, ``k̂ = k`` and Θ None.
    """
    if phase is None:
        return q[..., None, :], k[..., None, :], None
    theta = wrap_phase(phase.double().cumsum(dim)).to(q.dtype)
    rot = torch.stack([torch.cos(theta), torch.sin(theta)], dim=-2)  # (..., 2, K), shared by q and k
    return q[..., None, :] * rot, k[..., None, :] * rot, theta


def frame_state(state: torch.Tensor | None, R: int) -> torch.Tensor | None:
    """Complex ``S_0 (B, H, K, V)`` -> the real frame state ``Z_0 (B, H, R·K, V)`` (Θ_0 = 0): ``[Re S_0; -Im S_0]``,
    or ``Re S_0`` for R = 1 (real transitions never mix Re and Im; ``unframe_state`` decays Im S_0 apart)."""
    if state is None:
        return None
    return torch.cat([state.real, -state.imag], dim=-2) if R == 2 else state.real


def unframe_state(Z: torch.Tensor, theta_T, state, total_log_mag: torch.Tensor) -> torch.Tensor:
    """The frame state ``Z (B, H, R·K, V)`` after the last token -> complex ``S_T = e^{iΘ_T} (Z_top - i Z_bottom)``;
    for R = 1 (``theta_T`` None) ``S_T = Z + i e^{Σ log|a|} Im S_0``. ``total_log_mag (B, H, K)`` = Σ_t log|a_t|."""
    if theta_T is not None:
        K = Z.shape[-2] // 2
        return cexp(torch.zeros_like(theta_T), theta_T)[..., None] * torch.complex(Z[..., :K, :], -Z[..., K:, :])
    imag = torch.zeros_like(Z) if state is None else torch.exp(total_log_mag)[..., None] * state.imag
    return torch.complex(Z, imag)
