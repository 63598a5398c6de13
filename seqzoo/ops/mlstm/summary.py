"""A block of mLSTM tokens reduced to its effect on the state: what context parallelism gathers from each rank.

The mLSTM cell (arXiv:2405.04517 §2.3) keeps its state stabilised, (C, n, m) with the true memory C̃ = e^m C.
Unrolled over a block of tokens τ = 1..L with φ = log f (the recurrent form's m_t = max(φ_t + m_{t-1}, i_t)):

    F = Σ_τ φ_τ,   a_τ = Σ_{l>τ} φ_l + i_τ,   m_blk = max_τ a_τ,   C_blk = Σ_τ e^{a_τ - m_blk} k_τ v_τᵀ   (n_blk: k_τ)

and a block entering in state (C_in, n_in, m_in) leaves it in

    m = max(F + m_in, m_blk),   C = e^{F + m_in - m} C_in + e^{m_blk - m} C_blk   (n alike)

which is ``mlstm_combine``: exactly what the step loop gives, stabiliser included (max distributes over +), and
what the chunkwise form's chunk states give (``chunkwise.py``: m_c = max(g + m_{c-1}, max_τ a_τ)). m_blk is the
block's own maximum, not that of a zero state's m = 0: the entering m_in may be negative (gates near -10), and then
e^{F + 0} would wrongly compete in the max. With document starts (``reset``) the block forgets what entered it:
F = -inf, the keys before its last start are dropped (a_τ = -inf), and the stabiliser restarts from the fresh
state's m = 0 at that start, m_blk = max(Σ_{l>=start} φ_l, max_τ a_τ), as the step loop does. ``C_blk`` is the
chunkwise form's outgoing state of one chunk holding the whole block (one (K, L)·(L, V) matmul): no output is
computed, and no (L, L) matrix is built.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange

from .common import compute_dtype, doc_index, log_forget


def mlstm_summary(k, v, i, f, forget_gate: str = "sigmoid", reset=None):
    """``k (B, T, H, K)``, ``v (B, T, H, V)``, gate pre-activations ``i, f (B, T, H)``, ``reset (B, T)`` bool or None
    -> ``(F (B, H), C (B, H, K, V), n (B, H, K), m (B, H))`` in the compute dtype (module docstring)."""
    with torch.autocast(device_type=k.device.type, enabled=False):  # as the cell ops: the state stays fp32 / fp64
        return _summary(k, v, i, f, forget_gate, reset)


def _summary(k, v, i, f, forget_gate, reset):
    ct = compute_dtype(k.dtype)
    kk = rearrange(k.to(ct), "b t h k -> b h t k")
    vv = rearrange(v.to(ct), "b t h v -> b h t v")
    ig = rearrange(i.to(ct), "b t h -> b h t")
    phi = rearrange(log_forget(f.to(ct), forget_gate), "b t h -> b h t")
    suffix = phi.flip(-1).cumsum(-1).flip(-1)  # Σ_{l>=τ} φ_l, summed from the end (no difference of prefix sums)
    a = F.pad(suffix[..., 1:], (0, 1)) + ig  # (B, H, T)
    total = suffix[..., 0]
    if reset is None:
        m = a.max(-1).values
    else:
        doc = doc_index(reset)[:, None]  # (B, 1, T)
        last = doc == doc[..., -1:]  # tokens of the block's last document (all of them without a start)
        started = doc[..., -1] > 0  # (B, 1)
        a = a.masked_fill(~last, float("-inf"))
        restart = torch.where(last, phi, 0.0).sum(-1).masked_fill(~started, float("-inf"))
        m = torch.maximum(a.max(-1).values, restart)
        total = total.masked_fill(started, float("-inf"))
    w = torch.exp(a - m[..., None])  # (B, H, T) <= 1
    C = (w[..., None] * kk).transpose(-1, -2) @ vv
    n = (w[..., None, :] @ kk).squeeze(-2)
    return total, C, n, m


def mlstm_combine(state, summary):
    """``state = (C_in, n_in, m_in)`` entering a block, ``summary = (F, C_blk, n_blk, m_blk)`` of the block
    (``mlstm_summary``) -> ``(C, n, m)`` after it (module docstring); a block with F = -inf ignores the state."""
    C_in, n_in, m_in = state
    total, C_blk, n_blk, m_blk = summary
    m = torch.maximum(total + m_in, m_blk)
    w_in, w_blk = torch.exp(total + m_in - m), torch.exp(m_blk - m)
    C = w_in[..., None, None] * C_in + w_blk[..., None, None] * C_blk
    n = w_in[..., None] * n_in + w_blk[..., None] * n_blk
    return C, n, m
