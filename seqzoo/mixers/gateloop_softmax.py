"""GateLoop's softmax generalisation (Katsch, arXiv:2311.01927, §3.4, eqs. 22-23): a different model, not a mode.

The surrogate-attention scores of GateLoop, with data-controlled relative positions, go through a softmax:

    A_nm = s · Σ_d q_nd k_md · e^{L_n - L_m} · cos(Φ_n - Φ_m)  (m <= n),   y_n = Σ_m softmax_m(A_n·) v_m

where L, Φ are cumulative sums of log|a| and θ (the real part of the complex score; a softmax of complex
numbers is undefined). The decay multiplies the logit, so a near-zero transition pulls a score toward 0, not
toward -inf. The state is a growing cache: past k, v and their fp64 L, Φ (the running totals are the last
entries). Only ``mode="attention"`` exists; the scores are matmuls of width 2K (``relative_scores``: rotated
q, k and hierarchically factored decays), so it costs O(T²·K) flops, like softmax attention. Without a cache on
CPU (training, prefill) of more than 128 tokens the levels of that construction from 32 tokens up run as
PyTorch's fused CPU attention kernel and only the diagonal 32-token blocks are materialised
(``ops/gateloop/softmax.py``): O(T·32) score memory; otherwise the (T, S + T) scores are materialised. The op,
which makes that choice, is ``ops/gateloop/softmax_cached.py``.

Packed documents (``segment_pos``, 0 where a document starts): every score across a start is -inf in every path,
L and Φ restart at each start, and the cache records each key's document (``GateLoopSoftmaxCache.doc``), so later
queries see only the keys of their own document: continuing a packed prefill equals running the last document
alone.

Context parallelism (a sequence split along time over ranks) is refused: the softmax normalises each query over all
earlier keys, so what a block needs from the ranks before it is their whole growing cache of keys and values, not a
fixed-size state of a linear recurrence that their summaries could combine into.
"""

from __future__ import annotations

import torch
from einops import rearrange

from ..errors import InputError
from ..ops.gateloop.softmax_cached import GateLoopSoftmaxCache, softmax_gateloop_attention
from .base import register_mixer
from .gateloop import GateLoop


@register_mixer("gateloop_softmax")
class GateLoopSoftmax(GateLoop):
    modes = ("attention",)
    test_kwargs = {"n_heads": 4}
    zoo_kwargs = {"n_heads": 4}  # max heads (d_h = 1) would make 16x more T×T score matrices at the zoo's width
    # not in the default zoo run (which has a measured time budget); `seqzoo zoo --mixers gateloop_softmax,...`
    in_zoo_default = False
    supports_context_parallel = False  # the cache grows with T and the softmax is not linear (module docstring)

    def __init__(self, d_model: int, score_scale: float | None = None, **kwargs):
        super().__init__(d_model, **kwargs)
        self.score_scale = 1.0 if score_scale is None else float(score_scale)  # paper: no 1/sqrt(K) (K = 1)

    def default_mode(self, x, state):
        return "attention"

    def check_state(self, x, state):
        B = x.shape[0]
        if not isinstance(state, GateLoopSoftmaxCache):
            raise InputError(
                f"{self.name}: state must be a GateLoopSoftmaxCache from a previous call, got {type(state).__name__}"
            )
        if state.k.dim() != 4 or state.k.shape[0] != B or state.k.shape[2:] != (self.n_heads, self.head_k):
            raise InputError(
                f"{self.name}: state.k must have shape ({B}, S, {self.n_heads}, {self.head_k}), "
                f"got {tuple(state.k.shape)}"
            )

    def _forward(self, x, state, mode, segment_pos=None):
        if state is not None:
            self.check_state(x, state)
        q, k, v, log_mag, theta = self.head_inputs(x)
        with torch.autocast(device_type=x.device.type, enabled=False):
            y, cache = softmax_gateloop_attention(q, k, v, log_mag, theta, state, self.score_scale, segment_pos)
        y = rearrange(y, "b t h v -> b t (h v)").to(x.dtype)
        if self.out_proj is not None:
            y = self.out_proj(y)
        return y, cache
