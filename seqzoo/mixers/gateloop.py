"""GateLoop: fully data-controlled linear recurrence. T. Katsch, arXiv:2311.01927 (§3).

    a_n = f(W_γ x_n) · exp(i·g(W_θ x_n)),   S_n = diag(a_n) S_{n-1} + k_n v_nᵀ,   y_n = Re(q_nᵀ S_n)

with q, k, v real linear maps of x_n, f = sigmoid (magnitude) and g = identity (phase) by default. The state S
is complex ``(B, H, K, V)``; max heads (the paper's setting, ``n_heads=None``) is H = d_model, K = V = 1.
Modes (all equal up to rounding; ops in ``seqzoo/ops/gateloop``): ``recurrent`` (the O(T) loop), ``scan``
(associative scan, eq. 13), ``chunkwise`` (linear, matmuls inside chunks) and ``attention`` (the O(T²)
surrogate-attention form, eqs. 14-21, computed with relative exponents so it cannot underflow). Every mode takes
``segment_pos`` (packed documents): the transition into a document start is 0, so nothing crosses a start
(``ops/gateloop/README.md`` §4.4), the Triton kernel included.

Transitions compared in the paper (``transition=``): ``"data"`` (eq. 25), ``"fixed"`` (learned, input-independent
a, as S4D / LRU; inits in ``fixed_init``), ``"real"`` (θ ≡ 0) and ``"retnet"`` (fixed untrained decays with
rotations). ``retnet`` follows RetNet (Sun et al., arXiv:2307.08621, §2.2 and its official code): head h of H
decays by γ_h = 1 - 2^{-5-h}, h = 0 .. H-1, for any H (so with many heads the last ones barely decay:
γ_h > 1 - 1e-6 from h = 15 on). State-transition parameters get their own optimiser group (``optim_overrides``).

Context parallelism (``context_parallel=group``: one sequence split along time over the ranks): the recurrence is
linear in S, so each rank reduces its block to its total transition and its state from zero (A, S⁰)
(``ops/gateloop/summary.py``), gets the state entering its block from the gathered summaries
(``ops/context_parallel.py: incoming_state`` with ``linear_combine``) and runs its block in the chosen mode from
that state; the returned state is the last rank's, on every rank. Documents may cross a rank boundary.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ..errors import InputError
from ..ops.context_parallel import incoming_state, linear_combine
from ..ops.context_parallel_state import from_last_rank
from ..ops.gateloop import gateloop
from ..ops.gateloop.summary import gateloop_summary
from .base import Mixer, register_mixer

TRANSITIONS = ("data", "fixed", "real", "retnet")
# log|a| = f(z): every choice keeps |a| <= 1 (a stable recurrence)
MAGNITUDES = {
    "sigmoid": F.logsigmoid,  # paper: |a| = σ(z), log-space (never log of a rounded sigmoid)
    "exp_exp": lambda z: -torch.exp(z),  # LRU: |a| = exp(-exp(z))
    "sigmoid_abs": lambda z: F.logsigmoid(z.abs()),  # lucidrains' σ(|z|) ∈ [0.5, 1) (not in the paper)
}
# activations a user may reach for that let |a| exceed 1: refused with an explanation
UNGUARDED_MAGNITUDES = ("identity", "exp", "softplus", "relu", "gelu", "silu", "abs", "tanh")
PHASES = {"identity": lambda z: z, "exp": torch.exp}
FIXED_INITS = ("zeros", "s4d_lin", "s4d_inv", "lru")


def _inverse_magnitude(name: str, log_mag: torch.Tensor) -> torch.Tensor:
    """z with f(z) = log_mag, f the magnitude activation (log_mag < 0)."""
    log_mag = log_mag.clamp(max=-1e-12)
    if name == "sigmoid":
        return log_mag - torch.log(-torch.expm1(log_mag))  # logit(e^{log_mag})
    if name == "exp_exp":
        return torch.log(-log_mag)
    return (log_mag - torch.log(-torch.expm1(log_mag))).abs()  # sigmoid_abs


def _inverse_phase(name: str, phase: torch.Tensor) -> torch.Tensor:
    return phase if name == "identity" else torch.log(phase.clamp(min=1e-12))


def fixed_transition_init(
    kind: str,
    n: int,
    generator: torch.Generator | None = None,
    dt_min: float = 1e-3,
    dt_max: float = 1e-1,
    s4d_n: int = 64,
    r_min: float = 0.0,
    r_max: float = 1.0,
    max_phase: float = 2 * math.pi,
):
    """Target ``(log|a|, θ)`` of ``n`` channels for the fixed-transition inits (S4D, arXiv:2206.11893; LRU, arXiv:2303.06349), fp64.

    S4D variants discretise ā by zero-order hold, a = exp(Δ·ā), Δ log-uniform in [dt_min, dt_max];
    ``s4d_inv`` uses the S4D paper's −1/2 + i(N/π)(N/(2k+1) − 1) (the GateLoop paper prints a different form).
    ``lru`` samples LRU's ring: |a| = u(r_max² − r_min²) + r_min² under a square root, arg a = max_phase·u′.
    """
    if kind not in FIXED_INITS:
        raise InputError(f"fixed_init must be one of {FIXED_INITS}, got {kind!r}")
    if kind == "zeros":  # |a| = σ(0) = 0.5, no rotation
        return torch.full((n,), math.log(0.5), dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    if kind == "lru":
        u2 = torch.rand(n, generator=generator, dtype=torch.float64)
        log_mag = 0.5 * torch.log(u * (r_max**2 - r_min**2) + r_min**2).clamp(max=-1e-9)
        return log_mag, max_phase * u2
    dt = torch.exp(math.log(dt_min) + u * (math.log(dt_max) - math.log(dt_min)))
    kk = torch.arange(n, dtype=torch.float64) % s4d_n
    if kind == "s4d_lin":
        im = math.pi * kk
    else:  # s4d_inv
        im = (s4d_n / math.pi) * (s4d_n / (2 * kk + 1) - 1)
    return -0.5 * dt, dt * im  # log|exp(Δā)| = Δ·Re ā, arg = Δ·Im ā


@register_mixer("gateloop")
class GateLoop(Mixer):
    modes = ("recurrent", "scan", "chunkwise", "attention")
    test_kwargs = {"n_heads": 4}
    supports_segment_pos = True
    supports_context_parallel = True

    def __init__(
        self,
        d_model: int,
        n_heads: int | None = None,
        d_qk: int | None = None,
        d_v: int | None = None,
        transition: str = "data",
        magnitude: str = "sigmoid",
        phase: str = "identity",
        bias: bool = True,
        out_proj: bool | None = None,
        chunk_size: int = 64,
        scan_mode: str = "blelloch",
        fixed_init: str = "zeros",
        transition_lr: float | None = None,
        transition_weight_decay: float | None = 0.0,
    ):
        super().__init__(d_model)
        d_qk = d_model if d_qk is None else d_qk
        d_v = d_model if d_v is None else d_v
        for name, val in (("d_qk", d_qk), ("d_v", d_v)):
            if not isinstance(val, int) or isinstance(val, bool) or val <= 0:
                raise InputError(f"gateloop: {name} must be a positive int, got {val!r}")
        n_heads = d_qk if n_heads is None else n_heads  # max heads: K = 1
        if not isinstance(n_heads, int) or isinstance(n_heads, bool) or n_heads <= 0:
            raise InputError(f"gateloop: n_heads must be a positive int, got {n_heads!r}")
        if d_qk % n_heads or d_v % n_heads:
            raise InputError(f"gateloop: d_qk={d_qk} and d_v={d_v} must both be divisible by n_heads={n_heads}")
        if transition not in TRANSITIONS:
            raise InputError(f"gateloop: transition must be one of {TRANSITIONS}, got {transition!r}")
        if magnitude in UNGUARDED_MAGNITUDES:
            raise InputError(
                f"gateloop: magnitude activation {magnitude!r} can exceed 1 and has no guard (|a| > 1 "
                f"makes the state grow without bound); use one of {tuple(MAGNITUDES)}, which keep |a| <= 1"
            )
        if magnitude not in MAGNITUDES:
            raise InputError(f"gateloop: magnitude must be one of {tuple(MAGNITUDES)}, got {magnitude!r}")
        if phase not in PHASES:
            raise InputError(f"gateloop: phase must be one of {tuple(PHASES)}, got {phase!r}")
        if not isinstance(chunk_size, int) or chunk_size <= 0:
            raise InputError(f"gateloop: chunk_size must be a positive int, got {chunk_size!r}")
        if scan_mode not in ("hillis_steele", "blelloch", "two_level", "torch_hop"):
            raise InputError(
                f"gateloop: scan_mode must be hillis_steele, blelloch, two_level or torch_hop, got {scan_mode!r}"
            )
        self.n_heads, self.d_qk, self.d_v = n_heads, d_qk, d_v
        self.head_k, self.head_v = d_qk // n_heads, d_v // n_heads
        self.transition, self.magnitude, self.phase = transition, magnitude, phase
        self.chunk_size, self.scan_mode = chunk_size, scan_mode
        self.transition_lr, self.transition_weight_decay = transition_lr, transition_weight_decay

        self.q_proj = nn.Linear(d_model, d_qk, bias=bias)
        self.k_proj = nn.Linear(d_model, d_qk, bias=bias)
        self.v_proj = nn.Linear(d_model, d_v, bias=bias)
        if transition in ("data", "real"):
            self.gamma_proj = nn.Linear(d_model, d_qk, bias=bias)  # magnitude pre-activation γ̃
            self.theta_proj = nn.Linear(d_model, d_qk, bias=bias) if transition == "data" else None
        elif transition == "fixed":
            log_mag, theta = fixed_transition_init(fixed_init, d_qk)
            self.gamma = nn.Parameter(_inverse_magnitude(magnitude, log_mag).float())
            self.theta = nn.Parameter(_inverse_phase(phase, theta).float())
        else:  # retnet: fixed, untrained; γ_h = 1 - 2^{-5-h} for head h (RetNet's per-head decays), θ_j = 10000^{-j/N}
            c = torch.arange(n_heads, dtype=torch.float64).repeat_interleave(self.head_k)
            self.register_buffer("retnet_log_mag", torch.log1p(-(2.0 ** (-5.0 - c))).float())
            self.register_buffer("retnet_theta", (10000.0 ** (-torch.arange(d_qk, dtype=torch.float64) / d_qk)).float())
        if out_proj is None:
            out_proj = d_v != d_model
        if not out_proj and d_v != d_model:
            raise InputError(f"gateloop: out_proj=False needs d_v == d_model ({d_model}), got d_v={d_v}")
        self.out_proj = nn.Linear(d_v, d_model, bias=bias) if out_proj else None

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, heads={self.n_heads}, K={self.head_k}, V={self.head_v}, "
            f"transition={self.transition}, magnitude={self.magnitude}, phase={self.phase}"
        )

    # ------------------------------------------------------------------ pieces
    def gates(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``log|a|`` and θ, each ``(B, T, d_qk)`` (broadcast from ``(d_qk,)`` for input-independent transitions)."""
        f, g = MAGNITUDES[self.magnitude], PHASES[self.phase]
        if self.transition == "data":
            return f(self.gamma_proj(x)), g(self.theta_proj(x))
        if self.transition == "real":
            return f(self.gamma_proj(x)), None
        if self.transition == "fixed":
            shape = (*x.shape[:2], self.d_qk)
            return f(self.gamma).to(x.dtype).expand(shape), g(self.theta).to(x.dtype).expand(shape)
        shape = (*x.shape[:2], self.d_qk)
        return self.retnet_log_mag.to(x.dtype).expand(shape), self.retnet_theta.to(x.dtype).expand(shape)

    def state_shape(self, batch: int) -> tuple[int, int, int, int]:
        return (batch, self.n_heads, self.head_k, self.head_v)

    def check_state(self, x: torch.Tensor, state: Any) -> None:
        shape = self.state_shape(x.shape[0])
        if not isinstance(state, torch.Tensor) or not state.is_complex() or tuple(state.shape) != shape:
            got = tuple(state.shape) if isinstance(state, torch.Tensor) else type(state).__name__
            dt = f" {state.dtype}" if isinstance(state, torch.Tensor) else ""
            raise InputError(f"gateloop: state must be a complex tensor of shape (B, H, K, V) = {shape}, got {got}{dt}")

    def default_mode(self, x: torch.Tensor, state: Any) -> str:
        if x.shape[1] == 1:
            return "recurrent"
        return "scan" if self.head_k == 1 and self.head_v == 1 else "chunkwise"

    def _impl(self, mode: str) -> str:
        return {"recurrent": "naive", "scan": self.scan_mode, "chunkwise": "chunkwise", "attention": "attention"}[mode]

    def head_inputs(self, x: torch.Tensor):
        """Per-head q, k ``(B, T, H, K)``, v ``(B, T, H, V)``, log|a| and phase ``(B, T, H, K)`` (phase may be None)."""
        H = self.n_heads
        q = rearrange(self.q_proj(x), "b t (h k) -> b t h k", h=H)  # (B, T, H, K)
        k = rearrange(self.k_proj(x), "b t (h k) -> b t h k", h=H)
        v = rearrange(self.v_proj(x), "b t (h v) -> b t h v", h=H)  # (B, T, H, V)
        log_mag, theta = self.gates(x)
        log_mag = rearrange(log_mag, "b t (h k) -> b t h k", h=H)
        theta = None if theta is None else rearrange(theta, "b t (h k) -> b t h k", h=H)
        return q, k, v, log_mag, theta

    def _forward(
        self,
        x: torch.Tensor,
        state: Any,
        mode: str,
        segment_pos: torch.Tensor | None = None,
        context_parallel: dist.ProcessGroup | None = None,
        return_state: bool = True,
    ):
        if state is not None:
            self.check_state(x, state)
        q, k, v, log_mag, theta = self.head_inputs(x)
        if context_parallel is not None:  # x is one rank's block: start from the state entering it
            state = self._incoming_state(x, k, v, log_mag, theta, state, segment_pos, context_parallel)
        # the op decides the implementation: the chunkwise mode runs the Triton kernel (with this chunk_size) where
        # the kernels switch allows it
        y, new_state = gateloop(
            q,
            k,
            v,
            log_mag,
            theta,
            state,
            mode=self._impl(mode),
            chunk_size=self.chunk_size,
            segment_pos=segment_pos,
            follow_switch=True,
        )
        y = rearrange(y, "b t h v -> b t (h v)").to(x.dtype)  # (B, T, d_v)
        if self.out_proj is not None:
            y = self.out_proj(y)
        if context_parallel is not None and return_state:
            (new_state,) = from_last_rank((new_state,), context_parallel)
        return y, new_state

    def _incoming_state(self, x, k, v, log_mag, theta, state, segment_pos, group) -> torch.Tensor:
        """The state S entering this rank's block: every rank's (A, S⁰) summary gathered and combined in rank order
        from ``state`` (rank 0's; zeros for a fresh stream), ``ops/gateloop/summary.py``."""
        summary = gateloop_summary(k, v, log_mag, theta, segment_pos)
        dtype = summary[1].dtype
        initial = torch.zeros(self.state_shape(x.shape[0]), dtype=dtype, device=x.device) if state is None else state
        (incoming,) = incoming_state(summary, linear_combine, (initial.to(dtype),), group)
        return incoming

    # ---------------------------------------------------------------- optimiser
    def transition_parameter_names(self) -> list[str]:
        """W_γ, W_θ and their biases (γ, θ for fixed transitions): the paper's state-transition projections."""
        names = []
        for mod in ("gamma_proj", "theta_proj"):
            if getattr(self, mod, None) is not None:
                names += [f"{mod}.{n}" for n, _ in getattr(self, mod).named_parameters()]
        if self.transition == "fixed":
            names += ["gamma", "theta"]
        return names

    def optim_overrides(self) -> dict[str, dict[str, float]]:
        setting: dict[str, float] = {}
        if self.transition_lr is not None:
            setting["lr"] = float(self.transition_lr)
        if self.transition_weight_decay is not None:
            setting["weight_decay"] = float(self.transition_weight_decay)
        return {name: dict(setting) for name in self.transition_parameter_names()} if setting else {}
