"""mLSTM layer: matrix memory with exponential gating (xLSTM).

Beck et al., "xLSTM: Extended Long Short-Term Memory", arXiv:2405.04517 (NeurIPS 2024); the 7B-style layer from
"xLSTM 7B", arXiv:2503.13427. Per head, with q scaled by K^-1/2 and log forget gate phi = logsigmoid(f~):

    m_t = max(phi_t + m_{t-1}, i~_t);  C_t = e^{phi_t+m_{t-1}-m_t} C_{t-1} + e^{i~_t-m_t} k_t v_t^T   (n_t alike with k_t)
    h_t = q_t^T C_t / (max(|q_t^T n_t|, e^{-m_t}) + eps)

The mixer is the whole layer (arXiv:2405.04517 §2.4, pre-up-projection block, variant "neurips"): up-projection D -> 2E, causal conv k=4 + SiLU, headwise
q/k (from the conv branch) and v (from the raw branch), gates from [q; k; v], the cell, per-head LayerNorm,
learnable skip, SiLU(z) output gate, down-projection. Variant "7b" (xLSTM 7B, arXiv:2503.13427): q/k/v/o from the input, soft-capped
gates, per-head LayerNorm, sigmoid output gate, out-projection (its SwiGLU FFN is the residual block's MLP).
The cell ops live in ``seqzoo.ops.mlstm`` (modes "recurrent", "parallel", "chunkwise").

Packed documents: with ``segment_pos (B, T)`` a position with ``segment_pos == 0`` starts a fresh stream. The short
conv drops its taps across the start (``ops/causal_conv``) and the cell drops its state there, stabiliser included
(``ops/mlstm`` ``reset``), so no information crosses a document start, in every mode and in the decode step.

Context parallelism (``context_parallel=group``: one sequence split along time over the ranks): each rank reduces its
block to (F, C, n, m) (``ops/mlstm/summary.py``: total log forget gate, the block's own stabilised state), gets the
state entering its block from the gathered summaries merged in log space (``mlstm_combine`` through
``ops/context_parallel.py: incoming_state``), and runs its block in the chosen mode from it; the short conv reads the
previous rank's last inputs (``ops/context_parallel_state.py: conv_history``). The state returned is the last rank's.
The merge gives the step loop's stabiliser exactly, so the recurrent and chunkwise modes equal one process. The
parallel mode stabilises the rows of a call without a state, and of a document started inside the call, by their
own scores alone (``ops/mlstm/parallel.py``), while a later rank's block continues from a state; the two differ only
through ``eps`` (about 1e-8 relative at eps = 1e-6 in ``tests/test_context_parallel_mixers.py``; equal at eps = 0,
the setting at which the op tests compare the modes).
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
from ..ops.context_parallel import incoming_state
from ..ops.context_parallel_state import conv_history, from_last_rank
from ..ops.mlstm import FORGET_GATES, mlstm
from ..ops.mlstm.common import compute_dtype, log_forget, zero_state
from ..ops.mlstm.headwise import headwise, linear_parts, qkv_gates
from ..ops.mlstm.output import head_norm, mlstm_output
from ..ops.mlstm.recurrent import mlstm_step
from ..ops.mlstm.summary import mlstm_combine, mlstm_summary
from .base import Mixer, register_mixer

VARIANTS = ("neurips", "7b")


@dataclass
class MLSTMState:
    """Cell state ``C (B, H, K, V)``, ``n (B, H, K)``, ``m (B, H)`` (float32) and, for the NeurIPS layer, the
    conv buffer: the last ``conv_size - 1`` inputs of the conv branch ``(B, k-1, E)`` (None for "7b")."""

    C: torch.Tensor
    n: torch.Tensor
    m: torch.Tensor
    conv: torch.Tensor | None = None

    def cell(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.C, self.n, self.m


def round_up(x: float, multiple: int) -> int:
    return int(math.ceil(x / multiple) * multiple)


def small_init_std(d: int) -> float:
    """xLSTM "small init": N(0, 2 / (5 d))."""
    return math.sqrt(2.0 / (5.0 * d))


def wang_init_std(d: int, n_blocks: int) -> float:
    """xLSTM "Wang init" for output projections: std 2 / (n_blocks sqrt(d))."""
    return 2.0 / (n_blocks * math.sqrt(d))


@register_mixer("mlstm")
class MLSTM(Mixer):
    modes = ("recurrent", "parallel", "chunkwise")
    supports_segment_pos = True
    supports_context_parallel = True
    test_kwargs = {"n_heads": 2, "chunk_size": 4}

    def __init__(
        self,
        d_model: int,
        n_heads: int = 4,
        variant: str = "neurips",
        proj_factor: float = 2.0,
        round_to: int = 64,
        conv_size: int = 4,
        qkv_blocksize: int = 4,
        qk_dim_factor: float = 0.5,
        v_dim_factor: float = 1.0,
        gate_soft_cap: float | None = 15.0,
        chunk_size: int = 64,
        eps: float = 1e-6,
        norm_eps: float | None = None,
        forget_gate: str = "sigmoid",
        dropout: float = 0.0,
        n_blocks: int = 1,
        mode: str | None = None,
    ):
        super().__init__(d_model)
        if mode is not None and mode not in self.modes:
            raise InputError(f"mlstm: mode (the default algorithm) must be one of {self.modes} or None, got {mode!r}")
        self.fixed_mode = mode
        if variant not in VARIANTS:
            raise InputError(f"mlstm: variant must be one of {VARIANTS}, got {variant!r}")
        if forget_gate not in FORGET_GATES:
            raise InputError(f"mlstm: forget_gate must be one of {FORGET_GATES}, got {forget_gate!r}")
        if not isinstance(n_heads, int) or n_heads <= 0:
            raise InputError(f"mlstm: n_heads must be a positive int, got {n_heads!r}")
        if not isinstance(chunk_size, int) or chunk_size <= 0:
            raise InputError(f"mlstm: chunk_size must be a positive int, got {chunk_size!r}")
        if not isinstance(n_blocks, int) or n_blocks <= 0:
            raise InputError(f"mlstm: n_blocks must be a positive int, got {n_blocks!r}")
        self.variant, self.n_heads, self.chunk_size = variant, n_heads, chunk_size
        self.eps, self.forget_gate, self.n_blocks = eps, forget_gate, n_blocks
        self.norm_eps = norm_eps if norm_eps is not None else (1e-5 if variant == "neurips" else 1e-6)
        self.dropout = nn.Dropout(dropout)
        H = n_heads
        if variant == "neurips":
            E = round_up(proj_factor * d_model, round_to)
            if E % H:
                raise InputError(
                    f"mlstm: n_heads={H} must divide the inner width E={E} (= ceil({proj_factor} * "
                    f"d_model / {round_to}) * {round_to})"
                )
            if E % qkv_blocksize:
                raise InputError(f"mlstm: qkv_blocksize={qkv_blocksize} must divide the inner width E={E}")
            if not isinstance(conv_size, int) or conv_size < 1:
                raise InputError(f"mlstm: conv_size must be a positive int, got {conv_size!r}")
            self.inner, self.qk_dim, self.v_dim = E, E // H, E // H
            self.conv_size = conv_size
            nb = E // qkv_blocksize
            self.proj_up = nn.Linear(d_model, 2 * E, bias=False)
            self.conv_weight = nn.Parameter(torch.empty(E, conv_size))  # [:, -1] hits the current token
            self.conv_bias = nn.Parameter(torch.empty(E))
            self.q_proj = nn.Parameter(torch.empty(nb, qkv_blocksize, qkv_blocksize))  # (block, out, in)
            self.k_proj = nn.Parameter(torch.empty(nb, qkv_blocksize, qkv_blocksize))
            self.v_proj = nn.Parameter(torch.empty(nb, qkv_blocksize, qkv_blocksize))
            self.igate = nn.Linear(3 * E, H)
            self.fgate = nn.Linear(3 * E, H)
            self.outnorm_weight = nn.Parameter(torch.empty(E))
            self.skip = nn.Parameter(torch.empty(E))
            self.proj_down = nn.Linear(E, d_model, bias=False)
        else:
            dqk, dv = round(d_model * qk_dim_factor), round(d_model * v_dim_factor)
            if dqk % H or dv % H or dqk == 0:
                raise InputError(
                    f"mlstm: n_heads={H} must divide the q/k width {dqk} (= qk_dim_factor * d_model) and "
                    f"the v width {dv} (= v_dim_factor * d_model)"
                )
            self.qk_dim, self.v_dim, self.inner = dqk // H, dv // H, dv
            self.gate_soft_cap = gate_soft_cap
            self.q = nn.Linear(d_model, dqk, bias=False)
            self.k = nn.Linear(d_model, dqk, bias=False)
            self.v = nn.Linear(d_model, dv, bias=False)
            self.ogate = nn.Linear(d_model, dv, bias=False)
            self.igate = nn.Linear(d_model, H)
            self.fgate = nn.Linear(d_model, H)
            self.outnorm_weight = nn.Parameter(torch.empty(dv))
            self.out_proj = nn.Linear(dv, d_model, bias=False)
        self.reset_parameters()

    # ------------------------------------------------------------------ init (NX-AI xlstm's NeurIPS recipe)
    @torch.no_grad()
    def reset_parameters(self) -> None:
        D, H = self.d_model, self.n_heads
        std_in, std_out = small_init_std(D), wang_init_std(D, self.n_blocks)
        nn.init.zeros_(self.igate.weight)
        nn.init.zeros_(self.fgate.weight)
        self.fgate.bias.copy_(torch.linspace(3.0, 6.0, H))
        nn.init.ones_(self.outnorm_weight)
        if self.variant == "neurips":
            nn.init.normal_(self.proj_up.weight, std=std_in)
            bound = 1.0 / math.sqrt(self.conv_size)  # PyTorch's Conv1d default for fan_in = k
            nn.init.uniform_(self.conv_weight, -bound, bound)
            nn.init.uniform_(self.conv_bias, -bound, bound)
            for w in (self.q_proj, self.k_proj, self.v_proj):
                nn.init.normal_(w, std=std_in)
            nn.init.normal_(self.igate.bias, std=0.1)
            nn.init.ones_(self.skip)
            nn.init.normal_(self.proj_down.weight, std=std_out)
        else:
            for lin in (self.q, self.k, self.v, self.ogate):
                nn.init.normal_(lin.weight, std=std_in)
            self.igate.bias.fill_(-10.0)
            nn.init.normal_(self.out_proj.weight, std=std_out)

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, variant={self.variant}, heads={self.n_heads}, qk_dim={self.qk_dim}, "
            f"v_dim={self.v_dim}, inner={self.inner}, chunk_size={self.chunk_size}, forget_gate={self.forget_gate}"
        )

    def default_mode(self, x, state):
        """The constructor's ``mode`` if given, else the recurrent step for T = 1 and chunkwise otherwise."""
        if self.fixed_mode is not None:
            return self.fixed_mode
        return "recurrent" if x.shape[1] == 1 else "chunkwise"

    def optim_overrides(self):
        """No weight decay on gate biases, norm weights, the skip and the conv bias (as the reference)."""
        names = ["igate.bias", "fgate.bias", "outnorm_weight"]
        if self.variant == "neurips":
            names += ["skip", "conv_bias"]
        return {n: {"weight_decay": 0.0} for n in names}

    # ------------------------------------------------------------------ forward
    def _check_state(self, x: torch.Tensor, state) -> tuple | None:
        if state is None:
            return None
        if not isinstance(state, MLSTMState):
            raise InputError(
                f"mlstm: state must be an MLSTMState returned by a previous call, got {type(state).__name__}"
            )
        B, H, K, V = x.shape[0], self.n_heads, self.qk_dim, self.v_dim
        for name, t, want in (("C", state.C, (B, H, K, V)), ("n", state.n, (B, H, K)), ("m", state.m, (B, H))):
            if tuple(t.shape) != want:
                raise InputError(f"mlstm: state.{name} must have shape {want}, got {tuple(t.shape)}")
        if self.variant == "neurips":
            want = (B, self.conv_size - 1, self.inner)
            if state.conv is None or tuple(state.conv.shape) != want:
                raise InputError(
                    f"mlstm: state.conv must have shape {want}, got "
                    f"{None if state.conv is None else tuple(state.conv.shape)}"
                )
        return state.cell()

    def _cell(self, q, k, v, ig, fg, cell_state, mode, reset=None, group=None):
        """``q, k (B, T, H*K)``, ``v (B, T, H*V)`` (or already ``(B, T, H, .)``), gates ``(B, T, H)``, ``reset (B, T)``
        bool or None (document starts) -> ``h (B, T, H, V)``, state. With a context-parallel ``group`` the inputs are
        this rank's block and ``cell_state`` the state entering the whole sequence; the returned state is this
        block's (``_forward`` takes the last rank's)."""
        if q.dim() == 3:
            H = self.n_heads
            q = rearrange(q, "b t (h k) -> b t h k", h=H)
            k = rearrange(k, "b t (h k) -> b t h k", h=H)
            v = rearrange(v, "b t (h v) -> b t h v", h=H)
        if group is not None:
            cell_state = self._incoming_cell_state(k, v, ig, fg, cell_state, reset, group)
        # the op decides the implementation: the chunkwise mode runs the Triton kernel, forward and backward (training
        # too), where the kernels switch allows it (CUDA by default), document starts included
        return mlstm(
            q,
            k,
            v,
            ig,
            fg,
            state=cell_state,
            mode=mode,
            chunk_size=self.chunk_size,
            eps=self.eps,
            forget_gate=self.forget_gate,
            reset=reset,
            follow_switch=True,
        )

    def _incoming_cell_state(self, k, v, ig, fg, cell_state, reset, group) -> tuple:
        """The cell state entering this rank's block: every rank's summary (``ops/mlstm/summary.py``) gathered and
        merged in log space from ``cell_state`` (rank 0's; the zero state of a fresh stream)."""
        summary = mlstm_summary(k, v, ig, fg, self.forget_gate, reset)
        ct = summary[0].dtype
        B, _, H, K = k.shape
        initial = zero_state(B, H, K, v.shape[-1], ct, k.device) if cell_state is None else cell_state
        return incoming_state(summary, mlstm_combine, tuple(t.to(ct) for t in initial), group)

    def _headnorm(self, h: torch.Tensor) -> torch.Tensor:
        """Per-head LayerNorm (weight only): ``h (B, T, H, V)`` -> ``(B, T, H*V)``."""
        return head_norm(h, self.outnorm_weight, self.norm_eps)

    def _gate_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Both gates' weights and biases as one ``(2H, in)`` map (input gates first)."""
        return torch.cat([self.igate.weight, self.fgate.weight]), torch.cat([self.igate.bias, self.fgate.bias])

    def _gates(self, *xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Input and forget gate pre-activations ``(B, T, H)`` each from the gates' input, given whole or as the
        parts it concatenates (the NeurIPS layer's [q; k; v]: no (B, T, 3E) copy is made). One matmul per part
        for both gates: two ``Linear(., H)`` of H = 4 outputs are two thin matmuls with two input gradients."""
        return linear_parts(xs, *self._gate_weights()).split(self.n_heads, dim=-1)

    def _forward(
        self,
        x: torch.Tensor,
        state,
        mode: str,
        segment_pos: torch.Tensor | None = None,
        context_parallel: dist.ProcessGroup | None = None,
        return_state: bool = True,
    ):
        cell_state = self._check_state(x, state)
        group = context_parallel
        if group is not None and self.variant == "neurips" and x.shape[1] < self.conv_size - 1:
            raise InputError(
                f"mlstm: with context_parallel each rank's block needs at least conv_size - 1 = {self.conv_size - 1} "
                f"tokens (the conv halo comes from the previous rank), got {x.shape[1]}"
            )
        reset = None if segment_pos is None else segment_pos.to(x.device) == 0  # (B, T): document starts
        if self.variant == "7b":
            return self._forward_7b(x, cell_state, mode, reset, group, return_state)
        if x.shape[1] == 1 and state is not None and mode == "recurrent" and group is None:
            return self._decode_step(x, state, None if reset is None else reset[:, 0])
        E = self.inner
        x_m, z = self.proj_up(x).split(E, dim=-1)  # (B, T, E) each: cell branch, output gate branch
        conv_in = None if state is None else state.conv
        if group is not None:  # this rank's block: the conv reads the previous rank's last inputs
            conv_in = conv_history(x_m, self.conv_size - 1, conv_in, segment_pos, group)
        x_c, conv_state = causal_conv1d(
            x_m, self.conv_weight, self.conv_bias, conv_in, segment_pos=segment_pos, activation="silu"
        )
        # q, k from the conv branch, v from the raw one, and the gates from [q; k; v] (one C pass on CPU); q, k, v
        # as (B, T, H, .)
        q, k, v, gates = qkv_gates(
            x_c, x_m, self.q_proj, self.k_proj, self.v_proj, *self._gate_weights(), n_heads=self.n_heads
        )
        ig, fg = gates.split(self.n_heads, dim=-1)
        h, (C, n, m) = self._cell(q, k, v, ig, fg, cell_state, mode, reset, group)
        u = mlstm_output(h, x_c, z, self.outnorm_weight, self.skip, self.norm_eps)  # (LN(h) w + skip x_c) SiLU(z)
        y = self.proj_down(self.dropout(u))
        if group is not None and return_state:  # the state after the whole sequence is the last rank's
            C, n, m, conv_state = from_last_rank((C, n, m, conv_state), group)
        return y, MLSTMState(C, n, m, conv_state)

    def _decode_step(self, x: torch.Tensor, state: MLSTMState, reset: torch.Tensor | None = None):
        """One decoded token of the NeurIPS layer: the same equations as ``_forward`` (the registry tests hold
        prefill + steps equal to one pass), without the (B, T, H, .) rearranges and per-call checks of the
        T-length path, which made a decoded token cost ~2.7x the aten ops of a transformer layer's. ``reset (B,)``:
        the token starts a document (the conv buffer and the cell state are dropped)."""
        E, H = self.inner, self.n_heads
        x_m, z = self.proj_up(x[:, 0]).split(E, dim=-1)  # (B, E) each
        prev = state.conv.to(x_m.dtype)
        if reset is not None:  # every conv input before a document start is out of reach (ops/causal_conv)
            prev = torch.where(reset[:, None, None], torch.zeros((), dtype=prev.dtype, device=prev.device), prev)
        buf = torch.cat([prev, x_m[:, None]], dim=1)  # (B, k, E): the last k inputs
        x_c = F.silu(
            (buf * self.conv_weight.t().to(buf.dtype)).sum(1) + self.conv_bias.to(buf.dtype)
        )  # causal conv at the newest position
        q, k, v = headwise(x_c, self.q_proj), headwise(x_c, self.k_proj), headwise(x_m, self.v_proj)
        ig, fg = self._gates(q, k, v)  # (B, H) each
        ct = compute_dtype(x.dtype)
        B = x.shape[0]
        h, (C, n, m) = mlstm_step(
            (q.to(ct) * self.qk_dim**-0.5).view(B, H, -1),
            k.to(ct).view(B, H, -1),
            v.to(ct).view(B, H, -1),
            ig.to(ct),
            log_forget(fg.to(ct), self.forget_gate),
            state.cell(),
            self.eps,
            reset,
        )
        h = self._headnorm(h.to(x.dtype)[:, None])[:, 0] + self.skip * x_c  # (B, E)
        y = self.proj_down(self.dropout(h * F.silu(z)))
        return y[:, None], MLSTMState(C, n, m, buf[:, 1:])

    def _forward_7b(
        self,
        x: torch.Tensor,
        cell_state,
        mode: str,
        reset: torch.Tensor | None = None,
        group=None,
        return_state: bool = True,
    ):
        ig, fg = self._gates(x)  # (B, T, H)
        cap = self.gate_soft_cap
        if cap is not None:
            ig, fg = cap * torch.tanh(ig / cap), cap * torch.tanh(fg / cap)
        h, (C, n, m) = self._cell(self.q(x), self.k(x), self.v(x), ig, fg, cell_state, mode, reset, group)
        y = self.out_proj(self.dropout(torch.sigmoid(self.ogate(x)) * self._headnorm(h)))
        if group is not None and return_state:
            C, n, m = from_last_rank((C, n, m), group)
        return y, MLSTMState(C, n, m, None)
