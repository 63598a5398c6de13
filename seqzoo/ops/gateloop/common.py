"""Shared argument checks and dtype rules of the GateLoop ops (shapes in ``__init__.py``'s docstring).

Every op takes the same inputs:

* ``q, k``: ``(B, T, H, K)`` real; ``v``: ``(B, T, H, V)`` real
* ``log_mag``: ``(B, T, H, K)`` real, ``log|a| <= 0``; ``phase``: ``(B, T, H, K)`` real or None (real transitions)
* ``state``: None or ``(B, H, K, V)`` complex, the state S carried from an earlier call
* ``segment_pos``: None or ``(B, T)`` integer, the position inside the current document (packed documents): where
  it is 0 a document starts, the transition into that token is 0 (``a_t = 0``), so nothing before it reaches it or
  anything after it; a carried state reaches only the tokens before the row's first start

and returns ``y (B, T, H, V)`` real and the final state ``(B, H, K, V)`` complex. The complex op always runs in
fp32 (complex64) or fp64 (complex128): fp64 if any input is fp64, else fp32 (so bf16/fp16 inputs are upcast).
"""

from __future__ import annotations

import torch

from ...errors import InputError
from . import rotation_native


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """fp64 if any given tensor is fp64 / complex128, else fp32."""
    for t in tensors:
        if t is not None and t.dtype in (torch.float64, torch.complex128):
            return torch.float64
    return torch.float32


def complex_dtype(real: torch.dtype) -> torch.dtype:
    return torch.complex128 if real == torch.float64 else torch.complex64


def check_inputs(
    q, k, v, log_mag, phase, state, check_magnitude: bool = True, segment_pos=None
) -> tuple[int, int, int, int, int]:
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
    check_segment_pos(segment_pos, B, T)
    if check_magnitude:
        mx = float(log_mag.detach().max())
        if not mx <= 1e-6:  # also catches NaN
            raise InputError(
                f"gateloop op: log_mag = log|a| must be <= 0 (|a| <= 1, a stable recurrence), got max {mx:.3g}"
            )
    return B, T, H, K, V


def check_segment_pos(segment_pos, B: int, T: int) -> None:
    """``segment_pos``: None or an integer (not bool) tensor of shape ``(B, T)``."""
    if segment_pos is None:
        return
    ok = isinstance(segment_pos, torch.Tensor) and not (
        segment_pos.is_floating_point() or segment_pos.is_complex() or segment_pos.dtype == torch.bool
    )
    if not ok or tuple(segment_pos.shape) != (B, T):
        got = (
            f"{segment_pos.dtype} {tuple(segment_pos.shape)}"
            if isinstance(segment_pos, torch.Tensor)
            else type(segment_pos).__name__
        )
        raise InputError(f"gateloop: segment_pos must be an integer tensor of shape (B, T) = {(B, T)}, got {got}")


def prepare(q, k, v, log_mag, phase, state):
    """Cast to the compute dtype (fp32 / fp64); a missing phase becomes zeros; state to the matching complex dtype."""
    rd = compute_dtype(q, k, v, log_mag, phase, state)
    q, k, v, log_mag = (t.to(rd) for t in (q, k, v, log_mag))
    phase = torch.zeros_like(log_mag) if phase is None else phase.to(rd)
    if state is not None:
        state = state.to(complex_dtype(rd))
    return q, k, v, log_mag, phase, state


def document_starts(segment_pos: torch.Tensor | None, device) -> torch.Tensor | None:
    """``segment_pos (B, T)`` -> ``starts (B, T)`` bool, True where a document starts (position 0); None stays None."""
    return None if segment_pos is None else (segment_pos == 0).to(device)


def zero_at_starts(x: torch.Tensor | None, starts: torch.Tensor | None) -> torch.Tensor | None:
    """``x (B, T, ...)`` with 0 at document starts (``starts (B, T)``). For log|a| and θ this leaves the transition
    into a start to the masks of each form (its decay enters no kept term) and gives them an exact zero gradient
    there; every sum of log|a| stays finite (no -inf written into a sum)."""
    if x is None or starts is None:
        return x
    return x.masked_fill(starts.view(*starts.shape, *(1,) * (x.dim() - 2)), 0.0)


def document_cumsum(x: torch.Tensor, starts: torch.Tensor | None) -> torch.Tensor:
    """``x (B, T, ...)`` -> its float64 cumulative sum over time, restarted at every document start (``starts (B,
    T)``, where x is 0): each token's sum covers its own document only."""
    total = x.double().cumsum(1)
    if starts is None:
        return total
    T = x.shape[1]
    last = torch.where(starts, torch.arange(T, device=x.device), -1).cummax(1).values  # the latest start, or -1
    before = total.gather(1, last.clamp_min(0).view(*last.shape, *(1,) * (x.dim() - 2)).expand(total.shape))
    return total - before * (last >= 0).view(*last.shape, *(1,) * (x.dim() - 2))


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


_ANGLE_CHUNK = 64


def _angles(phase: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``phase θ (..., T, K)`` -> ``rot (..., T, 2, K)`` = [cos Θ_t, sin Θ_t] with Θ_t = Σ_{j<=t} θ_j, and the final
    angle Θ_T wrapped into [-π, π), both in θ's dtype and exact to its rounding at any T: Θ is summed in float64
    inside chunks of ``_ANGLE_CHUNK`` tokens, each starting from the float64 sum of all chunks before it wrapped into
    [-π, π), and cos / sin are taken in float64 (only e^{iΘ} matters)."""
    x = phase.double()
    *lead, T, K = x.shape
    C = _ANGLE_CHUNK
    N = -(-T // C)
    if N * C != T:  # zeros add nothing to a cumulative sum
        x = torch.nn.functional.pad(x, (0, 0, 0, N * C - T))
    local = x.reshape(*lead, N, C, K).cumsum(-2)
    before = torch.nn.functional.pad(local[..., -1, :].cumsum(-2)[..., :-1, :], (0, 0, 1, 0))  # (..., N, K)
    theta = (local + wrap_phase(before)[..., None, :]).reshape(*lead, N * C, K)[..., :T, :]
    rot = torch.stack([torch.cos(theta), torch.sin(theta)], dim=-2).to(phase.dtype)  # (..., T, 2, K)
    return rot, wrap_phase(theta[..., -1, :]).to(phase.dtype)


class _RotatingFrame(torch.autograd.Function):
    """``q, k, phase (..., T, K)`` -> ``q̂, k̂ (..., T, 2, K)`` and Θ_T (``rotating_frame``) with a written-out
    backward: dq = dq̂_0 cos Θ + dq̂_1 sin Θ (k alike), dΘ = cos Θ·(q dq̂_1 + k dk̂_1) - sin Θ·(q dq̂_0 + k dk̂_0), and
    dθ its sum from each step to the end (plus dΘ_T). Autograd over a float64 cumulative sum of the whole sequence
    and a wrap of every element took about a tenth of the chunkwise forward+backward at T = 2048; on CPU both
    directions are one C pass (``rotation_native.py``), else the same formulas in PyTorch."""

    @staticmethod
    def forward(ctx, q, k, phase):
        rot, theta_T = _angles(phase)
        ctx.native = rotation_native.fits(q, k, rot)
        if ctx.native:
            qh, kh = rotation_native.rotate(q, k, rot)
        else:  # [q, q] contiguous first: a product with q broadcast over the two parts runs in K-element pieces
            qh, kh = (torch.cat([x, x], -1).view(rot.shape) * rot for x in (q, k))
        ctx.save_for_backward(q, k, rot)
        return qh, kh, theta_T

    @staticmethod
    def backward(ctx, dqh, dkh, dlast):
        q, k, rot = ctx.saved_tensors
        if ctx.native:
            return rotation_native.rotate_backward(q, k, rot, dqh, dkh, dlast)
        cos, sin = rot.unbind(-2)
        dq = dqh[..., 0, :] * cos + dqh[..., 1, :] * sin
        dk = dkh[..., 0, :] * cos + dkh[..., 1, :] * sin
        r0 = q * dqh[..., 0, :] + k * dkh[..., 0, :]
        r1 = q * dqh[..., 1, :] + k * dkh[..., 1, :]
        dtheta = cos * r1 - sin * r0
        if dlast is not None:  # Θ_T = Σ_t θ_t: its gradient joins the last step's before the reverse sum
            dtheta[..., -1, :] += dlast
        return dq, dk, dtheta.flip(-2).cumsum(-2).flip(-2)


def rotating_frame(q: torch.Tensor, k: torch.Tensor, phase: torch.Tensor | None):
    """Real 2K-dimensional form of the complex decay: ``q̂ = [q cos Θ, q sin Θ]``, ``k̂`` alike, ``(..., T, R, K)``
    from ``q, k, phase (..., T, K)``.

    With Θ_t = Σ_{j<=t} θ_j (over time) and the state in the rotating frame
    Z_t = [Re; -Im](e^{-iΘ_t} S_t) (2K × V, real), the recurrence becomes a real one with decay |a_t| on both
    halves:  Z_t = |a_t| Z_{t-1} + k̂_t v_tᵀ,  y_t = q̂_tᵀ Z_t,  and  q̂_τ·k̂_σ = Σ_d q_τd k_σd cos(Θ_τd - Θ_σd).
    cos Θ and sin Θ come from float64 angles (``_angles``), so the rotation is exact at any T. Returns
    ``(q̂, k̂, Θ_T)`` with Θ_T (..., K) the final angle; real transitions (``phase`` None) give R = 1, ``q̂ = q``,
    ``k̂ = k`` and Θ_T None.
    """
    if phase is None:
        return q[..., None, :], k[..., None, :], None
    return _RotatingFrame.apply(q, k, phase)


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
