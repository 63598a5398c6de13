"""GateLoop as an associative scan (paper §3.2, eq. 13; associativity in appendix B).

Each token is the pair e_n = (a_n, b_n) with b_n = k_n v_nᵀ. With p earlier and q later,

    (p₁, p₂) • (q₁, q₂) = (p₁ q₁,  q₁ p₂ + q₂)          (q₁ scales the key rows of p₂)

and the second component of the inclusive scan at n is the state S_n. A carried state S_0 is folded into
the first element (b_1 ← a_1 S_0 + b_1). A document start (``segment_pos == 0``) is the element (0, b_n): it
discards every earlier prefix, the carried state included. Implementations of the same scan:

* ``hillis_steele``: log₂T vectorised passes, O(T log T) work (the paper's complexity);
* ``blelloch``: odd/even recursion as in ``jax.lax.associative_scan``: O(T) work, 2·log₂T depth;
* ``two_level``: chunks of C≈√T: one pass inside all chunks at once, one pass over chunk carries (CPU default);
* ``torch_hop``: PyTorch's prototype ``associative_scan`` higher-order op (eager "generic" mode; opt-in only).

All build new tensors per pass (no in-place writes), so autograd is safe. They materialise all T states,
(B, T, H, K, V) complex, as the paper notes for the general-head case.
"""

from __future__ import annotations

import math

import torch

from ...errors import InputError
from .common import document_starts, prepare, transition, zero_at_starts


def _combine(a_p, b_p, a_q, b_q):
    """``e_p • e_q`` for p earlier than q."""
    return a_p * a_q, a_q * b_p + b_q


def scan_hillis_steele(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Inclusive scan over dim 1. ``a (B, T, ..., 1)`` broadcasts over ``b (B, T, ..., V)``; returns all b-prefixes."""
    T = a.shape[1]
    d = 1
    while d < T:
        a_tail, b_tail = _combine(a[:, :-d], b[:, :-d], a[:, d:], b[:, d:])  # e_{n-d} • e_n for n >= d
        a = torch.cat([a[:, :d], a_tail], dim=1)
        b = torch.cat([b[:, :d], b_tail], dim=1)
        d *= 2
    return b


def _blelloch(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    T = a.shape[1]
    if T < 2:
        return a, b
    n2 = T // 2
    # combine neighbours (2i, 2i+1): the pair ends at the odd position 2i+1
    a_pair, b_pair = _combine(a[:, 0 : 2 * n2 : 2], b[:, 0 : 2 * n2 : 2], a[:, 1 : 2 * n2 : 2], b[:, 1 : 2 * n2 : 2])
    a_odd, b_odd = _blelloch(a_pair, b_pair)  # prefixes ending at 1, 3, 5, ...  (B, n2, ...)
    # even position 2i (i >= 1) = prefix ending at 2i-1 • e_{2i}; position 0 is its own prefix
    n_even = (T + 1) // 2
    a_e, b_e = _combine(a_odd[:, : n_even - 1], b_odd[:, : n_even - 1], a[:, 2::2], b[:, 2::2])
    a_even = torch.cat([a[:, :1], a_e], dim=1)  # (B, n_even, ...)
    b_even = torch.cat([b[:, :1], b_e], dim=1)

    def interleave(even, odd):  # even (B, n_even, ...), odd (B, n2, ...) -> (B, T, ...)
        both = torch.stack([even[:, :n2], odd], dim=2)  # (B, n2, 2, ...)
        out = both.reshape(even.shape[0], 2 * n2, *even.shape[2:])
        return torch.cat([out, even[:, n2:]], dim=1) if n_even > n2 else out

    return interleave(a_even, a_odd), interleave(b_even, b_odd)


def scan_blelloch(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _blelloch(a, b)[1]


def scan_two_level(a: torch.Tensor, b: torch.Tensor, chunk_size: int | None = None) -> torch.Tensor:
    """Chunks of C: local scans from zero inside all chunks at once, then a pass over the T/C carries."""
    B, T = a.shape[:2]
    C = chunk_size or max(1, math.isqrt(T - 1) + 1)  # ≈ ceil(sqrt(T)): about 2·sqrt(T) Python steps in total
    N = -(-T // C)
    pad = N * C - T
    if pad:  # pad tokens: a = 1, b = 0 (they neither decay nor write)
        a = torch.cat([a, a.new_ones(B, pad, *a.shape[2:])], dim=1)
        b = torch.cat([b, b.new_zeros(B, pad, *b.shape[2:])], dim=1)
    a = a.reshape(B, N, C, *a.shape[2:])  # (B, N, C, ..., 1)
    b = b.reshape(B, N, C, *b.shape[2:])  # (B, N, C, ..., V)
    h, p = b[:, :, 0], a[:, :, 0]
    hs, ps = [h], [p]
    for c in range(1, C):  # local states and local transition products, all chunks at once
        h = a[:, :, c] * h + b[:, :, c]
        p = p * a[:, :, c]
        hs.append(h)
        ps.append(p)
    h_loc = torch.stack(hs, dim=2)  # (B, N, C, ..., V)
    p_loc = torch.stack(ps, dim=2)  # (B, N, C, ..., 1)
    carry = torch.zeros_like(h_loc[:, 0, 0])
    carries = [carry]
    for n in range(N - 1):  # state entering chunk n+1
        carry = p_loc[:, n, -1] * carry + h_loc[:, n, -1]
        carries.append(carry)
    carry_in = torch.stack(carries, dim=1)  # (B, N, ..., V)
    out = h_loc + p_loc * carry_in[:, :, None]  # (B, N, C, ..., V)
    return out.reshape(B, N * C, *out.shape[3:])[:, :T]


def scan_torch_hop(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """PyTorch's prototype associative_scan (eager, combine_mode="generic"); leaves need equal shapes."""
    from torch._higher_order_ops.associative_scan import associative_scan

    a = torch.broadcast_to(a, b.shape).contiguous()

    def fn(x, y):
        return _combine(x[0], x[1], y[0], y[1])

    return associative_scan(fn, (a, b), dim=1, combine_mode="generic")[1]


SCANS = {
    "hillis_steele": scan_hillis_steele,
    "blelloch": scan_blelloch,
    "two_level": scan_two_level,
    "torch_hop": scan_torch_hop,
}


def gateloop_scan(q, k, v, log_mag, phase=None, state=None, mode: str = "two_level", segment_pos=None):
    """Same inputs / outputs as ``gateloop_naive``; ``mode`` names the scan algorithm (see ``SCANS``)."""
    if mode not in SCANS:
        raise InputError(f"gateloop scan: mode must be one of {sorted(SCANS)}, got {mode!r}")
    q, k, v, log_mag, phase, state = prepare(q, k, v, log_mag, phase, state)
    a = zero_at_starts(transition(log_mag, phase), document_starts(segment_pos, q.device))[..., None]  # (B,T,H,K,1)
    b = (k[..., :, None] * v[..., None, :]).to(a.dtype)  # (B, T, H, K, V): k_n v_nᵀ
    if state is not None:  # fold S_0 into the first element
        b = torch.cat([a[:, :1] * state[:, None] + b[:, :1], b[:, 1:]], dim=1)
    S_all = SCANS[mode](a, b)  # (B, T, H, K, V) complex: S_1 .. S_T
    y = torch.einsum("bthk,bthkv->bthv", q, S_all.real)  # Re(q_nᵀ S_n)
    return y, S_all[:, -1]
