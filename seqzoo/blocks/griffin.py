"""Griffin's residual block (arXiv:2402.19427 §2.1-§2.2, Fig. 2).

    r = x + Temporal(RMSNorm(x));   out = r + GatedMLP(RMSNorm(r))        (MLP: down(gelu_tanh(up x) ⊙ gate x))

The layout is seqzoo's pre-norm ``ResidualBlock`` (RMSNorm with γ = 1 + the reference's ``scale``); this block
adds Griffin's initialisation with final scale κ = 2 / n_layers: temporal input projections and both MLP up
branches N(0, 1/D), the recurrent output N(0, κ/D_RNN), the attention output N(0, κ/D), the MLP down
N(0, κ/M), biases 0, norms 1.
"""

from __future__ import annotations

import math

from torch import nn

from ..mixers.attention import Attention
from ..mixers.rglru import RGLRUBlock
from .residual import ResidualBlock, register_block


@register_block("griffin")
class GriffinBlock(ResidualBlock):
    def __init__(self, config, mixer: str, causal: bool | None = None):
        super().__init__(config, mixer, causal)
        self.final_scale = 2.0 / config.n_layers
        self.reset_parameters()

    def reset_parameters(self) -> None:
        d, kappa = self.mixer.d_model, self.final_scale
        for norm in (self.norm1, self.norm2):
            if norm is not None and getattr(norm, "weight", None) is not None:
                nn.init.ones_(norm.weight)
        m = self.mixer
        if isinstance(m, RGLRUBlock):
            m.final_w_init_variance_scale = kappa
            m.reset_parameters()
        elif isinstance(m, Attention):
            for lin in (m.q_proj, m.k_proj, m.v_proj):
                nn.init.normal_(lin.weight, std=d**-0.5)
            nn.init.normal_(m.o_proj.weight, std=math.sqrt(kappa / m.o_proj.in_features))
            for lin in (m.q_proj, m.k_proj, m.v_proj, m.o_proj):
                if lin.bias is not None:
                    nn.init.zeros_(lin.bias)
        if self.mlp is not None:
            hidden = self.mlp.down.in_features
            for lin in (self.mlp.up, self.mlp.gate):
                if lin is not None:
                    nn.init.normal_(lin.weight, std=d**-0.5)
            nn.init.normal_(self.mlp.down.weight, std=math.sqrt(kappa / hidden))
            for lin in (self.mlp.up, self.mlp.gate, self.mlp.down):
                if lin is not None and lin.bias is not None:
                    nn.init.zeros_(lin.bias)
