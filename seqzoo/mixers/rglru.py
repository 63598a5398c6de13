"""Griffin / Hawk recurrent block around the RG-LRU.

De et al., "Griffin: Mixing Gated Linear Recurrences with Local Attention for Efficient Language Models",
arXiv:2402.19427 (§2.4, Fig. 2); Botev et al., "RecurrentGemma", arXiv:2404.07839. User docs: docs/griffin.md.

    log a_t = −c·σ(W_a x_t + b_a)·softplus(Λ̃),   h_t = a_t ⊙ h_{t−1} + sqrt(1 − a_t²) ⊙ σ(W_x x_t + b_x) ⊙ x_t
    block:  out = W_out( RG-LRU(Conv1D_4(W_x' x)) ⊙ gelu_tanh(W_y x) )      (a_t = 0, no sqrt, at a document start)

Modes: ``"recurrent"`` (a loop over t; the reference and the T = 1 decode path) and ``"scan"`` (two-level chunked
scan with a reverse-scan backward, seqzoo/ops/rglru). The state is ``RGLRUState(conv (B, 3, R), h (B, R) fp32)``.

Context parallelism (``context_parallel=group``: one sequence split along time over the ranks): each rank reduces its
block to (Π a_t, its last state from h = 0) (``ops/rglru/summary.py``), gets the state entering its block from the
gathered summaries (``ops/context_parallel.py: incoming_state`` with ``linear_combine``) and scans its block from
it; the Conv1D reads the previous rank's last inputs (``ops/context_parallel_state.py: conv_history``). Only rank 0
starts a fresh stream's document at its first token. The state returned is the last rank's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ..errors import InputError
from ..ops.causal_conv import causal_conv1d
from ..ops.context_parallel import group_rank_size, incoming_state, linear_combine
from ..ops.context_parallel_state import conv_history, from_last_rank
from ..ops.rglru import rglru
from ..ops.rglru.summary import rglru_summary
from .base import Mixer, register_mixer

A_INITS = ("code", "paper")


@dataclass
class RGLRUState:
    """Carried between calls: the last ``conv_size − 1`` conv inputs ``(B, k−1, R)`` and the RG-LRU state ``h (B, R)``."""

    conv: torch.Tensor
    h: torch.Tensor


class BlockDiagonalLinear(nn.Module):
    """``y[..., j] = x[..., j] @ weight[j] + bias[j]`` over ``n_blocks`` blocks; ``weight (nb, R/nb, R/nb)`` (in, out)."""

    def __init__(self, width: int, n_blocks: int, w_init_variance_scale: float = 1.0):
        super().__init__()
        self.width, self.n_blocks = width, n_blocks
        self.block_width = width // n_blocks
        self.w_init_variance_scale = w_init_variance_scale
        self.weight = nn.Parameter(torch.empty(n_blocks, self.block_width, self.block_width))
        self.bias = nn.Parameter(torch.empty(n_blocks, self.block_width))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # LeCun normal over the block's fan-in
        nn.init.normal_(self.weight, std=math.sqrt(self.w_init_variance_scale / self.block_width))
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xb = rearrange(x, "... (h i) -> ... h i", h=self.n_blocks)  # (..., nb, R/nb)
        y = torch.einsum("...hi,hij->...hj", xb, self.weight) + self.bias
        return rearrange(y, "... h j -> ... (h j)")  # (..., R)


def init_a_param(a_param: torch.Tensor, a_init: str = "code", lo: float = 0.9, hi: float = 0.999) -> torch.Tensor:
    """Fill Λ̃ (``a = σ(−Λ̃)``).

    ``"code"`` (DeepMind's reference): a² ~ U(lo², hi²), so a ∈ [lo, hi] "uniform on the ring".
    ``"paper"`` (Griffin §2.4 text): a^c ~ U(lo, hi) with c = 8, i.e. a = w^{1/8}.
    """
    with torch.no_grad():
        if a_init == "code":
            a = torch.empty_like(a_param, dtype=torch.float64).uniform_(lo**2, hi**2).sqrt()
        elif a_init == "paper":
            a = torch.empty_like(a_param, dtype=torch.float64).uniform_(lo, hi).pow(1.0 / 8.0)
        else:
            raise InputError(f"a_init must be one of {A_INITS}, got {a_init!r}")
        a_param.copy_(torch.log(1.0 / a - 1.0))  # Λ̃ = log(1/a − 1) = −logit(a)
    return a_param


class RGLRU(nn.Module):
    """The Real-Gated Linear Recurrent Unit over ``x (B, T, R)`` (parameter names follow the reference)."""

    def __init__(self, width: int, n_blocks: int, c: float = 8.0, a_init: str = "code"):
        super().__init__()
        if a_init not in A_INITS:
            raise InputError(f"a_init must be one of {A_INITS}, got {a_init!r}")
        self.width, self.n_blocks, self.c, self.a_init = width, n_blocks, c, a_init
        self.a_param = nn.Parameter(torch.empty(width))
        self.input_gate = BlockDiagonalLinear(width, n_blocks)
        self.a_gate = BlockDiagonalLinear(width, n_blocks)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init_a_param(self.a_param, self.a_init)
        self.input_gate.reset_parameters()
        self.a_gate.reset_parameters()

    def forward(
        self,
        x: torch.Tensor,
        reset: torch.Tensor | None,
        state: torch.Tensor | None,
        mode: str,
        group: dist.ProcessGroup | None = None,
    ):
        """``x (B, T, R)``, ``reset (B, T)`` or None, ``state`` h_0 ``(B, R)`` or None -> ``y (B, T, R)``, ``h_T``.
        With a context-parallel ``group``, ``x`` is this rank's block and ``state`` the state entering the whole
        sequence: the block starts from the state its summaries give (``ops/rglru/summary.py``)."""
        gx, ga = self.input_gate(x), self.a_gate(x)
        if group is not None:
            summary = rglru_summary(
                x, gx, ga, self.a_param, reset, self.c, mode="naive" if mode == "recurrent" else "auto"
            )
            initial = summary[1].new_zeros(summary[1].shape) if state is None else state.to(summary[1].dtype)
            (state,) = incoming_state(summary, linear_combine, (initial,), group)
        # the op decides the implementation: the "scan" mode runs the fused Triton kernel where the kernels switch
        # allows it (CUDA by default)
        impl = "naive" if mode == "recurrent" else "scan"
        return rglru(x, gx, ga, self.a_param, reset, state, self.c, mode=impl, follow_switch=True)


@register_mixer("rglru")
class RGLRUBlock(Mixer):
    """Griffin's recurrent temporal-mixing block (d_model → D_RNN branches → d_model)."""

    modes = ("recurrent", "scan")
    supports_segment_pos = True
    supports_context_parallel = True
    test_kwargs = {"d_rnn": 24, "n_blocks": 4}

    def __init__(
        self,
        d_model: int,
        d_rnn: int | None = None,
        n_blocks: int | None = None,
        conv_size: int = 4,
        c: float = 8.0,
        a_init: str = "code",
        final_w_init_variance_scale: float = 1.0,
    ):
        super().__init__(d_model)
        d_rnn = d_model if d_rnn is None else d_rnn
        if not isinstance(d_rnn, int) or isinstance(d_rnn, bool) or d_rnn <= 0:
            raise InputError(f"d_rnn must be a positive int (the recurrence width D_RNN), got {d_rnn!r}")
        if n_blocks is None:
            n_blocks = math.gcd(d_rnn, 16)  # the paper's 16 blocks when D_RNN allows it
        if not isinstance(n_blocks, int) or isinstance(n_blocks, bool) or n_blocks <= 0 or d_rnn % n_blocks:
            raise InputError(
                f"n_blocks must be a positive int dividing d_rnn={d_rnn} (block-diagonal gates), got {n_blocks!r}"
            )
        if not isinstance(conv_size, int) or conv_size < 1:
            raise InputError(f"conv_size must be a positive int, got {conv_size!r}")
        if not c > 0:
            raise InputError(f"c must be positive (a_t = a^(c r_t)), got {c!r}")
        if a_init not in A_INITS:
            raise InputError(f"a_init must be one of {A_INITS}, got {a_init!r}")
        self.d_rnn, self.n_blocks, self.conv_size = d_rnn, n_blocks, conv_size
        self.final_w_init_variance_scale = final_w_init_variance_scale
        self.linear_y = nn.Linear(d_model, d_rnn)
        self.linear_x = nn.Linear(d_model, d_rnn)
        self.linear_out = nn.Linear(d_rnn, d_model)
        self.conv = nn.Module()
        self.conv.weight = nn.Parameter(torch.empty(conv_size, d_rnn))  # (k, R): row k-1 hits the current token
        self.conv.bias = nn.Parameter(torch.empty(d_rnn))
        self.rglru = RGLRU(d_rnn, n_blocks, c=c, a_init=a_init)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """recurrentgemma's initialisers: branches N(0, 1/D), out N(0, κ/R), conv N(0, 0.01/k), biases 0, RG-LRU §2.3."""
        nn.init.normal_(self.linear_y.weight, std=self.d_model**-0.5)
        nn.init.normal_(self.linear_x.weight, std=self.d_model**-0.5)
        nn.init.normal_(self.linear_out.weight, std=math.sqrt(self.final_w_init_variance_scale / self.d_rnn))
        nn.init.normal_(self.conv.weight, std=math.sqrt(0.01 / self.conv_size))
        for lin in (self.linear_y, self.linear_x, self.linear_out):
            nn.init.zeros_(lin.bias)
        nn.init.zeros_(self.conv.bias)
        self.rglru.reset_parameters()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, d_rnn={self.d_rnn}, n_blocks={self.n_blocks}, conv_size={self.conv_size}"

    def default_mode(self, x, state):
        return "recurrent" if x.shape[1] == 1 else "scan"

    def _check_state(self, x: torch.Tensor, state) -> None:
        if not isinstance(state, RGLRUState):
            raise InputError(
                f"rglru: state must be an RGLRUState returned by a previous call, got {type(state).__name__}"
            )
        B = x.shape[0]
        if tuple(state.conv.shape) != (B, self.conv_size - 1, self.d_rnn):
            raise InputError(
                f"rglru: state.conv must have shape ({B}, {self.conv_size - 1}, {self.d_rnn}), "
                f"got {tuple(state.conv.shape)}"
            )
        if tuple(state.h.shape) != (B, self.d_rnn):
            raise InputError(f"rglru: state.h must have shape ({B}, {self.d_rnn}), got {tuple(state.h.shape)}")

    def _forward(
        self,
        x: torch.Tensor,
        state: RGLRUState | None,
        mode: str,
        segment_pos: torch.Tensor | None = None,
        context_parallel: dist.ProcessGroup | None = None,
        return_state: bool = True,
    ):
        group = context_parallel
        if state is not None:
            self._check_state(x, state)
        if group is not None and x.shape[1] < self.conv_size - 1:
            raise InputError(
                f"rglru: with context_parallel each rank's block needs at least conv_size - 1 = {self.conv_size - 1} "
                f"tokens (the conv halo comes from the previous rank), got {x.shape[1]}"
            )
        y = F.gelu(self.linear_y(x), approximate="tanh")  # (B, T, R)
        u = self.linear_x(x)  # (B, T, R)
        conv_in = None if state is None else state.conv
        if group is not None:  # this rank's block: the conv reads the previous rank's last inputs
            conv_in = conv_history(u, self.conv_size - 1, conv_in, segment_pos, group)
        u, conv_state = causal_conv1d(u, self.conv.weight.t(), self.conv.bias, conv_in, segment_pos=segment_pos)
        if segment_pos is not None:
            reset = segment_pos == 0  # (B, T)
        elif state is None and (group is None or group_rank_size(group)[0] == 0):
            # a fresh stream starts a document at t = 0 (DeepMind's recurrentgemma block does the same: a = 0 and no
            # sqrt(1 - a^2) scaling there); a carried state continues the document it holds
            reset = torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device)
            reset[:, 0] = True
        else:
            reset = None
        u, h = self.rglru(u, reset, None if state is None else state.h, mode, group)
        out = self.linear_out(u * y)
        if group is not None and return_state:  # the state after the whole sequence is the last rank's
            conv_state, h = from_last_rank((conv_state, h), group)
        return out, RGLRUState(conv=conv_state, h=h)
