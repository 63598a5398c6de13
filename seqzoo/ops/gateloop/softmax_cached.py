"""GateLoop's softmax generalisation with a growing cache (Katsch, arXiv:2311.01927, §3.4, eqs. 22-23): the op
behind the ``gateloop_softmax`` mixer.

    A_nm = s · Σ_d q_nd k_md · e^{L_n - L_m} · cos(Φ_n - Φ_m)  (m <= n),   y_n = Σ_m softmax_m(A_n·) v_m

The cache holds past k, v and their fp64 L, Φ (the running totals are the last entries) and, with packed
documents, each key's document. ``choose_implementation`` decides the form: the blocked one of ``softmax.py``
(training and prefill on CPU beyond ``BLOCKED_FROM`` tokens) or the materialised scores (``attention.py:
relative_scores``, against the cached keys too).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...kernels.switch import Choice
from .attention import relative_scores
from .common import check_segment_pos, document_starts, wrap_phase, zero_at_starts
from .softmax import softmax_relative_attention

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


def choose_implementation(q: torch.Tensor, cache: GateLoopSoftmaxCache | None) -> Choice:
    """Which form ``softmax_gateloop_attention`` runs for queries ``q (B, T, H, K)``, and why the blocked one was
    passed over: ``blocked`` (``softmax.py: softmax_relative_attention``, no T×T scores) for training and prefill on
    CPU (no cache) beyond ``BLOCKED_FROM`` tokens, else ``scores`` (the (T, S + T) scores materialised). Up to 128
    tokens the materialised scores are faster (idle, forward+backward, batch 8, 4 heads, measured with the C passes:
    8.3-8.4 vs 10.1 ms at T = 64, 17.5-17.9 vs 19.0-19.5 ms at T = 128; at T = 256 the blocked form is 1.9x
    faster)."""
    if cache is not None:
        return Choice("scores", "the blocked form takes no cache (decode steps, continued prefill)")
    if q.device.type != "cpu":
        return Choice("scores", f"the blocked form is the CPU path, got {q.device.type} tensors")
    if q.shape[1] <= BLOCKED_FROM:
        return Choice("scores", f"up to {BLOCKED_FROM} tokens the materialised scores are faster")
    return Choice("blocked")


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
    if choose_implementation(q, cache).name == "blocked":
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
