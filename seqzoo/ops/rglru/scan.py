"""Two-level chunked linear scan ``h_t = a_t h_{t-1} + b_t`` with a reverse-scan backward.

Forward (see README.md for the derivation): view the first nc·L steps as ``(B, nc, L, R)``;
  1. scan every chunk from a zero state, all chunks at once (L Python steps over ``(B, nc, R)``), keeping only
  each chunk's end state and product P = Π a; 2. chain the nc carries sequentially
  (``carry_k = P_k carry_{k-1} + end_k``); 3. re-run every chunk from its true incoming carry and write h
  (the same values as ``h_t^local + P_t carry_{k-1}``, without storing P_t); 4. a plain loop for the tail.
  No division, no closed form, so a_t = 0 (document resets) and a_t = 1 are exact.

Backward is the reverse scan ``g_t = dh_t + a_{t+1} g_{t+1}`` (same chunked routine on flipped tensors),
``db_t = g_t``, ``da_t = g_t h_{t-1}``, ``dh0 = a_1 g_1``: no T-long autograd graph is built.
"""

from __future__ import annotations

import math

import torch

from .naive import acc_dtype


def default_chunk(T: int) -> int:
    """Chunk length ≈ √T (balances the in-chunk and the carry loop), at least 8."""
    return max(8, math.ceil(math.sqrt(T)))


def _chunked_scan(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None, chunk: int | None) -> torch.Tensor:
    """No-grad core: ``a, b (B, T, R)`` in the accumulation dtype -> ``h (B, T, R)``.

    Pass 1 runs every chunk's local scan at once, keeping only the running end state and the running product
    P = Π a per chunk; the chunk carries are then chained sequentially; pass 2 re-runs every chunk from its true
    incoming state and writes h. The steps past the last whole chunk are a plain loop. Nothing is copied or padded.
    """
    B, T, R = b.shape
    L = chunk or default_chunk(T)
    nc = T // L
    h = torch.empty_like(b)
    prev = h0
    if nc >= 2:
        n = nc * L
        a4 = a[:, :n].view(B, nc, L, R)  # (B, nc, L, R)
        b4 = b[:, :n].view(B, nc, L, R)
        h4 = h[:, :n].view(B, nc, L, R)
        end = b4[:, :, 0].clone()  # (B, nc, R): local state at the end of each chunk (from zero)
        P = a4[:, :, 0].clone()  # (B, nc, R): product of a over the chunk
        for t in range(1, L):
            torch.addcmul(b4[:, :, t], a4[:, :, t], end, out=end)
            P.mul_(a4[:, :, t])
        incoming = torch.empty_like(end)  # (B, nc, R): true state before each chunk
        for k in range(nc):
            if prev is None:
                incoming[:, k] = 0
                prev = end[:, k]
            else:
                incoming[:, k] = prev
                prev = torch.addcmul(end[:, k], P[:, k], prev)
        cur = incoming
        for t in range(L):  # pass 2: every chunk from its true incoming state
            torch.addcmul(b4[:, :, t], a4[:, :, t], cur, out=h4[:, :, t])
            cur = h4[:, :, t]
        start = n
    else:
        start = 0
    for t in range(start, T):  # tail (or the whole sequence when it is short)
        prev = b[:, t] if prev is None else torch.addcmul(b[:, t], a[:, t], prev)
        h[:, t] = prev
    return h


class _LinearScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, h0, chunk):
        h = _chunked_scan(a, b, h0, chunk)
        ctx.save_for_backward(a, h, h0)
        ctx.chunk = chunk
        return h

    @staticmethod
    def backward(ctx, dh):
        a, h, h0 = ctx.saved_tensors
        # reverse scan g_t = dh_t + a_{t+1} g_{t+1}: shift a left by one (a_{T+1} = 0) and scan the flipped sequence
        a_next = torch.cat([a[:, 1:], a.new_zeros(a.shape[0], 1, a.shape[2])], dim=1)  # (B, T, R)
        g = _chunked_scan(a_next.flip(1), dh.contiguous().flip(1), None, ctx.chunk).flip(1)  # (B, T, R)
        if h0 is None:
            h_prev = torch.cat([h.new_zeros(h.shape[0], 1, h.shape[2]), h[:, :-1]], dim=1)
        else:
            h_prev = torch.cat([h0[:, None], h[:, :-1]], dim=1)  # (B, T, R): h_{t-1}
        da = g * h_prev if ctx.needs_input_grad[0] else None
        dh0 = a[:, 0] * g[:, 0] if (h0 is not None and ctx.needs_input_grad[2]) else None
        return da, g, dh0, None


def linear_scan_chunked(
    a: torch.Tensor, b: torch.Tensor, state: torch.Tensor | None = None, chunk_size: int | None = None
):
    """``a, b (B, T, R)``, ``state (B, R)`` (h_0) or None -> ``h (B, T, R)``, ``h_T (B, R)`` in the accumulation dtype.

    Differentiable in a, b and state through a custom backward (reverse chunked scan).
    """
    acc = acc_dtype(b.dtype)
    a_acc = a.to(acc).contiguous()
    b_acc = b.to(acc).contiguous()
    h0_acc = None if state is None else state.to(acc).contiguous()
    h = _LinearScan.apply(a_acc, b_acc, h0_acc, chunk_size)
    return h, h[:, -1]
