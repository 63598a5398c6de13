"""sLSTM layer: scalar memory with exponential gating and block-diagonal memory mixing (xLSTM).

Beck et al., "xLSTM: Extended Long Short-Term Memory", arXiv:2405.04517 (NeurIPS 2024), §2.2 (cell) and §2.4 (post-up-projection block):

    (i~, f~, z~, o~) = W x_t + R h_{t-1} + b   (W, R block-diagonal per head);  m_t = max(i~, logsig(f~) + m_{t-1})
    c_t = e^{logsig(f~)+m_{t-1}-m_t} c_{t-1} + e^{i~-m_t} tanh(z~);  n_t alike with 1;  h_t = sigmoid(o~) c_t / n_t

The mixer is the layer: causal conv k=4 + SiLU feeding the i/f gates (z/o read the raw input), headwise W, the cell,
dropout, per-head LayerNorm (weight only). The post-up-projection gated FFN is the residual block's MLP ("geglu").
There is no parallel form: the only mode is "recurrent", a loop over T (``cell_mode`` picks the loop: a mode of ops/slstm).
Packed documents (``segment_pos``, 0 where one starts): the conv's taps stop at the start and the cell restarts from
the fresh state (h, c, n, m) = 0 there, so each document sees only itself.
Context parallelism (a sequence split along time over ranks) is refused: the gates read R h_{t-1} through the
non-linear cell, so a block's effect on its entering state is no fixed-size linear map that a rank could summarise
without the state the ranks before it end in (the split would be sequential, rank after rank).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ..errors import InputError
from ..ops.causal_conv import causal_conv1d
from ..ops.slstm import MODES, slstm
from .base import Mixer, register_mixer
from .mlstm import small_init_std

BIAS_INITS = ("powerlaw_blockdependent", "small_init", "zeros")


@dataclass
class SLSTMState:
    """Cell state ``h, c, n, m`` each ``(B, D)`` float32, and the conv buffer: the last k-1 inputs ``(B, k-1, D)``."""

    h: torch.Tensor
    c: torch.Tensor
    n: torch.Tensor
    m: torch.Tensor
    conv: torch.Tensor | None = None

    def cell(self):
        return self.h, self.c, self.n, self.m


def powerlaw_forget_bias(d: int, block_idx: int, n_blocks: int) -> torch.Tensor:
    """NX-AI xlstm's power-law forget bias: ``5 - 12 (j/(d-1))^(0.3 + 1.3 beta)``, beta = block_idx / (n_blocks - 1) (0 for one block)."""
    beta = block_idx / (n_blocks - 1) if n_blocks > 1 else 0.0
    j = torch.arange(d, dtype=torch.float64)
    ratio = j / (d - 1) if d > 1 else torch.zeros(d, dtype=torch.float64)
    return (5.0 - 12.0 * ratio ** (0.3 + 1.3 * beta)).float()


@register_mixer("slstm")
class SLSTM(Mixer):
    modes = ("recurrent",)
    test_kwargs = {"n_heads": 2}
    supports_segment_pos = True

    def __init__(
        self,
        d_model: int,
        n_heads: int = 4,
        conv_size: int = 4,
        cell_mode: str = "auto",
        bias_init: str = "powerlaw_blockdependent",
        block_idx: int = 0,
        n_blocks: int = 1,
        norm_eps: float = 1e-5,
        dropout: float = 0.0,
    ):
        super().__init__(d_model)
        if not isinstance(n_heads, int) or n_heads <= 0 or d_model % n_heads:
            raise InputError(f"slstm: n_heads must be a positive int dividing d_model={d_model}, got {n_heads!r}")
        if cell_mode not in MODES:
            raise InputError(f"slstm: cell_mode must be one of {MODES}, got {cell_mode!r}")
        if bias_init not in BIAS_INITS:
            raise InputError(f"slstm: bias_init must be one of {BIAS_INITS}, got {bias_init!r}")
        if not isinstance(conv_size, int) or conv_size < 1:
            raise InputError(f"slstm: conv_size must be a positive int, got {conv_size!r}")
        if not (
            isinstance(n_blocks, int) and n_blocks > 0 and isinstance(block_idx, int) and 0 <= block_idx < n_blocks
        ):
            raise InputError(
                f"slstm: need 0 <= block_idx < n_blocks, got block_idx={block_idx!r}, n_blocks={n_blocks!r}"
            )
        H, d = n_heads, d_model // n_heads
        self.n_heads, self.head_dim, self.conv_size, self.cell_mode = H, d, conv_size, cell_mode
        self.bias_init, self.block_idx, self.n_blocks, self.norm_eps = bias_init, block_idx, n_blocks, norm_eps
        self.conv_weight = nn.Parameter(torch.empty(d_model, conv_size))  # [:, -1] hits the current token
        self.conv_bias = nn.Parameter(torch.empty(d_model))
        self.W_i = nn.Parameter(torch.empty(H, d, d))  # (head, out, in), reads SiLU(conv(x))
        self.W_f = nn.Parameter(torch.empty(H, d, d))  # reads SiLU(conv(x))
        self.W_z = nn.Parameter(torch.empty(H, d, d))  # reads x
        self.W_o = nn.Parameter(torch.empty(H, d, d))  # reads x
        self.R = nn.Parameter(torch.empty(H, d, 4, d))  # (head, d_in, gate i/f/z/o, d_out)
        self.bias = nn.Parameter(torch.empty(H, 4, d))  # (head, gate, d)
        self.norm_weight = nn.Parameter(torch.empty(d_model))
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """NeurIPS recipe (NX-AI's official xlstm package): R = 0, W small init, power-law forget bias, other biases 0."""
        bound = 1.0 / self.conv_size**0.5
        nn.init.uniform_(self.conv_weight, -bound, bound)
        nn.init.uniform_(self.conv_bias, -bound, bound)
        for w in (self.W_i, self.W_f, self.W_z, self.W_o):
            nn.init.normal_(w, std=small_init_std(self.d_model))
        nn.init.zeros_(self.R)
        nn.init.zeros_(self.bias)
        d = self.head_dim
        if self.bias_init == "powerlaw_blockdependent":
            self.bias[:, 1] = powerlaw_forget_bias(d, self.block_idx, self.n_blocks)
        elif self.bias_init == "small_init":
            self.bias[:, 1] = torch.linspace(3.0, 6.0, d)
        nn.init.ones_(self.norm_weight)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, heads={self.n_heads}, head_dim={self.head_dim}, cell_mode={self.cell_mode}"

    def optim_overrides(self):
        return {n: {"weight_decay": 0.0} for n in ("bias", "norm_weight", "conv_bias")}

    def _check_state(self, x, state):
        if state is None:
            return None
        if not isinstance(state, SLSTMState):
            raise InputError(
                f"slstm: state must be an SLSTMState returned by a previous call, got {type(state).__name__}"
            )
        B, D = x.shape[0], self.d_model
        for name in "hcnm":
            t = getattr(state, name)
            if tuple(t.shape) != (B, D):
                raise InputError(f"slstm: state.{name} must have shape ({B}, {D}), got {tuple(t.shape)}")
        want = (B, self.conv_size - 1, D)
        if state.conv is None or tuple(state.conv.shape) != want:
            raise InputError(
                f"slstm: state.conv must have shape {want}, got "
                f"{None if state.conv is None else tuple(state.conv.shape)}"
            )
        return state.cell()

    def gate_inputs(self, x: torch.Tensor, conv_state=None, segment_pos=None):
        """Input pre-activations ``wx (B, T, H, 4, d)`` (i, f from SiLU(conv(x)); z, o from x; bias added)."""
        H = self.n_heads
        x_c, conv_state = causal_conv1d(
            x, self.conv_weight, self.conv_bias, conv_state, segment_pos=segment_pos, activation="silu"
        )
        x_c = rearrange(x_c, "b t (h j) -> b t h j", h=H)  # (B, T, H, d)
        x_h = rearrange(x, "b t (h j) -> b t h j", h=H)
        w_if = torch.einsum("bthj,hgkj->bthgk", x_c, torch.stack([self.W_i, self.W_f], 1))  # (B, T, H, 2, d)
        w_zo = torch.einsum("bthj,hgkj->bthgk", x_h, torch.stack([self.W_z, self.W_o], 1))
        return torch.cat([w_if, w_zo], dim=3) + self.bias, conv_state

    def _forward(self, x: torch.Tensor, state, mode: str, segment_pos: torch.Tensor | None = None):
        cell_state = self._check_state(x, state)
        wx, conv_state = self.gate_inputs(x, None if state is None else state.conv, segment_pos)
        h, (hh, c, n, m) = slstm(wx, self.R, cell_state, mode=self.cell_mode, segment_pos=segment_pos)  # (B, T, H, d)
        h = self.dropout(h)
        hn = F.layer_norm(h, (self.head_dim,), eps=self.norm_eps)
        y = rearrange(hn, "b t h j -> b t (h j)") * self.norm_weight
        return y, SLSTMState(hh, c, n, m, conv_state)
