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
(``ops/gateloop/softmax.py``): O(T·32) score memory; otherwise the (T, S + T) scores are materialised.

Packed documents (``segment_pos``, 0 where a document starts): every score across a start is -inf in every path,
L and Φ restart at each start, and the cache records each key's document (``GateLoopSoftmaxCache.doc``), so later
queries see only the keys of their own document: continuing a packed prefill equals running the last document
alone.

Context parallelism (a sequence split along time over ranks) is refused: the softmax normalises each query over all
earlier keys, so what a block needs from the ranks before it is their whole growing cache of keys and values, not a
fixed-size state of a linear recurrence that their summaries could combine into.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from einops import rearrange

from ..errors import InputError
from ..ops.gateloop.attention import relative_scores
from ..ops.gateloop.common import check_segment_pos, document_starts, wrap_phase, zero_at_starts
from ..ops.gateloop.softmax import softmax_relative_attention
from .base import register_mixer
from .gateloop import GateLoop

BLOCKED_FROM = 128  # longer inputs without a cache take the blocked form on CPU


@dataclass
class GateLoopSoftmaxCache:
    """Past keys ``k (B, S, H, K)``, values ``v (B, S, H, V)`` and fp64 cumulative ``L, Phi (B, S, H, K)`` (restarted
    at each document start); ``doc (B, S)``: each key's document (a running count of starts), None when no call
    had ``segment_pos``."""

    k: torch.Tensor
    v: torch.Tensor
    L: torch.Tensor
    Phi: torch.Tensor
    doc: torch.Tensor | None = None


def softmax_gateloop_attention(
    q, k, v, log_mag, phase, cache: GateLoopSoftmaxCache | None, scale: float = 1.0, segment_pos=None
):
    """``q, k, log_mag, phase (B, T, H, K)``, ``v (B, T, H, V)``, ``segment_pos (B, T)`` or None -> ``y (B, T, H,
    V)``, updated cache.

    Scores among the new tokens: ``ops.gateloop.attention.relative_scores`` (matmuls, no T×T×K tensor). Scores
    against the S cached keys factor exactly, because every cached key precedes every new query:
    e^{L_n - L_m} = e^{L_n - L_S} · e^{L_S - L_m} (both exponents <= 0) and cos(Φ_n - Φ_m) splits into cos·cos +
    sin·sin, so they are one matmul of width 2K as well. Keys of another document than the query's score -inf.
    """
    check_segment_pos(segment_pos, *q.shape[:2])
    dt = torch.promote_types(q.dtype, torch.float32)
    q, k, v, log_mag = (t.to(dt) for t in (q, k, v, log_mag))
    phase = torch.zeros_like(log_mag) if phase is None else phase.to(dt)
    starts = document_starts(segment_pos, q.device)
    log_mag, phase = zero_at_starts(log_mag, starts), zero_at_starts(phase, starts)  # their gradient there is 0
    doc = _documents(starts, cache, q.shape[:2], q.device)
    q = q * scale  # the scores are linear in q: scaling (T, K) here spares a pass over (T, S + T)
    # training and prefill on CPU: no T×T scores (ops/gateloop/softmax.py); up to 128 tokens the materialised
    # scores are faster (idle, forward+backward, batch 8, 4 heads, re-measured with the C passes of 2026-11-27:
    # 8.3-8.4 vs 10.1 ms at T = 64, 17.5-17.9 vs 19.0-19.5 ms at T = 128; at T = 256 the blocked form is 1.9x faster)
    if cache is None and q.device.type == "cpu" and q.shape[1] > BLOCKED_FROM:
        y, L, Phi = softmax_relative_attention(q, k, v, log_mag, phase, starts=starts)
        return y, GateLoopSoftmaxCache(k, v, L, Phi, doc)
    # -inf above the diagonal: the causal mask among the new tokens, and across document starts
    A, L, Phi = relative_scores(q, k, log_mag, phase, upper=float("-inf"), starts=starts)  # (B, H, T, T); fp64
    if cache is not None:
        L_S, Phi_S = cache.L[:, -1:], cache.Phi[:, -1:]
        # the tokens before this call's first start continue the cache's last document (and its sums)
        cont = _continuing(starts, q.shape[:2], q.device)
        Phi = Phi + Phi_S * cont
        q_dec = q * torch.exp(L).to(dt)  # e^{L_n - L_S}
        log_k = L_S - cache.L  # e^{L_S - L_m}; <= 0 within the last cached document, cut for keys before it
        if cache.doc is not None:
            log_k = log_k.masked_fill((cache.doc != cache.doc[:, -1:])[..., None, None], float("-inf"))
        k_dec = cache.k.to(dt) * torch.exp(log_k).to(dt)
        ang_q, ang_k = wrap_phase(Phi).to(dt), wrap_phase(cache.Phi).to(dt)
        q_rot = torch.cat([q_dec * torch.cos(ang_q), q_dec * torch.sin(ang_q)], dim=-1)  # (B, T, H, 2K)
        k_rot = torch.cat([k_dec * torch.cos(ang_k), k_dec * torch.sin(ang_k)], dim=-1)  # (B, S, H, 2K)
        past = torch.einsum("bnhk,bmhk->bhnm", q_rot, k_rot)  # (B, H, T, S)
        if doc is not None:  # a query sees the cached keys of its own document only
            S = cache.k.shape[1]
            past = past.masked_fill((doc[:, S:, None] != doc[:, None, :S])[:, None], float("-inf"))
        A = torch.cat([past, A], dim=-1)  # (B, H, T, S+T)
        L = L + L_S * cont
        k_all = torch.cat([cache.k.to(dt), k], 1)  # (B, S+T, H, K)
        v_all = torch.cat([cache.v.to(dt), v], 1)
        L_all, Phi_all = torch.cat([cache.L, L], 1), torch.cat([cache.Phi, Phi], 1)
    else:
        k_all, v_all, L_all, Phi_all = k, v, L, Phi
    y = torch.einsum("bhnm,bmhv->bnhv", A.softmax(-1), v_all)
    return y, GateLoopSoftmaxCache(k_all, v_all, L_all, Phi_all, doc)


def _continuing(starts, BT, device) -> torch.Tensor:
    """``(B, T, 1, 1)`` float64: 1 for the tokens before the row's first start (they continue the cache), else 0."""
    if starts is None:
        return torch.ones(*BT, 1, 1, dtype=torch.float64, device=device)
    return (starts.long().cumsum(1) == 0).double()[..., None, None]


def _documents(starts, cache: GateLoopSoftmaxCache | None, BT, device) -> torch.Tensor | None:
    """The document of every key after this call, ``(B, S + T)`` (only this call's T when there is no cache); None
    while no call had ``segment_pos``. Cached keys without ids are one document, 0."""
    if starts is None and (cache is None or cache.doc is None):
        return None
    new = torch.zeros(BT, dtype=torch.long, device=device) if starts is None else starts.long().cumsum(1)
    if cache is None:
        return new
    old = cache.doc if cache.doc is not None else torch.zeros(cache.k.shape[:2], dtype=torch.long, device=device)
    return torch.cat([old, old[:, -1:] + new], 1)


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
