"""Causal attention over a sequence split along time across the ranks of a process group (context parallelism).

Rank r of N holds tokens [r·T, (r+1)·T) of every sequence (T = the block length, equal on every rank). Softmax
attention is exact under the split when each rank's queries see the keys and values of the ranks before it:

    y_i = softmax_j( q_i · k_j / sqrt(hd) + mask_ij ) v_j   over the keys j of the initial cache, of the ranks
                                                             before r and of rank r's own block,

with every position (causality, the window, RoPE) the global one: rank r's stream positions start at
``pos0 + r·T``. What a rank receives is a "past" in the layout of the KV cache, so the one-process code attends:

* global attention: the keys and values of every earlier rank (an all-gather, the one all ranks share);
* a window of W tokens: the last W keys before the block, i.e. a halo of min(W, T) keys from each rank (the
  previous rank alone when W <= T, whole blocks of earlier ranks when W > T);
* the short convolution (``short_conv = k``): a halo of the previous rank's last k - 1 inputs (its buffer, the
  inputs before a document start inside it zeroed, as ``causal_conv1d`` carries it);
* the initial state (KV cache, position, document positions, conv inputs) is rank 0's, sent to every rank;
* packed documents: each rank's ``segment_pos`` is its slice of the global one; the document positions of the
  earlier keys travel with them, so a document that crosses a rank boundary keeps its keys and hides the rest.

The returned state is the cache after the whole sequence, the same on every rank. Gradients flow back through the
all-gathers to the ranks that sent the data, so every gradient equals the one-process gradient.
"""

from __future__ import annotations

import torch

from ..errors import InputError
from ..ops.causal_conv.common import new_state, starts_cumsum
from ..ops.context_parallel import gather_ranks, group_rank_size
from ..ops.context_parallel_pack import gather_packed
from .base import Mixer
from .kv_cache import KVCache


def _check_same_layout(mixer: Mixer, x, state, segment_pos, group) -> tuple[int, int]:
    """Every rank must hold the same block shape and state layout (one all-gather of a few ints): (rank, N)."""
    rank, n = group_rank_size(group)
    B, T, _ = x.shape
    S0 = -1 if state is None else state.k.shape[1]
    seg0 = state is not None and state.seg is not None
    header = torch.tensor([B, T, S0, int(seg0), int(segment_pos is not None)], device=x.device)
    rows = gather_ranks(header, group)
    if not bool((rows == rows[0]).all()):
        raise InputError(
            f"{mixer.name} (context parallel): every rank must pass a block of the same (batch, length), a state of "
            f"the same length (or none on every rank) and segment_pos on every rank or none; per rank "
            f"[B, T, state length (-1: none), state has document positions, segment_pos]: {rows.tolist()}"
        )
    return rank, n


def _conv_buffer(x: torch.Tensor, k: int, segment_pos) -> torch.Tensor:
    """The short convolution's buffer after this block, ``(B, k-1, D)``: its last k - 1 inputs, those before a
    document start inside it zeroed, exactly the state ``causal_conv1d`` returns (it depends on this block alone)."""
    return new_state(x, k, None if segment_pos is None else starts_cumsum(segment_pos, k))


def split_forward(
    mixer: Mixer, x: torch.Tensor, state: KVCache | None, mode: str, segment_pos, group, return_state: bool = True
):
    """``mixer``'s output on this rank's block ``x (B, T, D)`` and the cache after the whole sequence (None when
    ``return_state`` is False: it needs no collective of its own, only the copies of the gathered keys)."""
    if not mixer.causal:
        raise InputError(
            f"{mixer.name}: context parallelism needs causal attention (a bidirectional query reads later ranks' keys)"
        )
    B, T, _ = x.shape
    cw = max(mixer.short_conv - 1, 0)  # the short convolution's halo
    if cw > T:
        raise InputError(
            f"{mixer.name} (context parallel): short_conv - 1 = {cw} must be at most the block length T = {T}"
        )
    pos0 = 0 if state is None else mixer._check_state(x, state)
    rank, n = _check_same_layout(mixer, x, state, segment_pos, group)
    W = mixer.window
    L = T if W is None else min(W, T)  # keys each rank sends: whole blocks, or the window's halo
    steps = torch.arange(T, device=x.device)
    seg_mode = segment_pos is not None or (state is not None and state.seg is not None)

    # rank 0's initial state and every rank's convolution tail: one gather of floats and one of ints
    floats = [_conv_buffer(x, mixer.short_conv, segment_pos)] if mixer.short_conv else []
    k0 = v0 = seg0 = conv0 = None
    if state is not None:
        floats += [state.k.to(x.dtype), state.v.to(x.dtype)] + ([state.conv.to(x.dtype)] if mixer.short_conv else [])
    got = gather_packed(floats, group) if floats else []
    if state is not None:
        first = 1 if mixer.short_conv else 0
        k0, v0 = got[first][0], got[first + 1][0]
        conv0 = got[first + 2][0] if mixer.short_conv else None
        ints = gather_packed(
            [state.pos.to(torch.long)] + ([state.seg.to(torch.long)] if state.seg is not None else []), group
        )
        pos0 = int(ints[0][0, 0])  # rank 0's stream position is the sequence's
        seg0 = ints[1][0] if state.seg is not None else None
    S0 = 0 if k0 is None else k0.shape[1]
    start = pos0 + rank * T  # stream position of this block's first token

    # document / RoPE positions of this block: the global ones
    if segment_pos is not None:
        rope_pos = mixer._positions(x, None, 0, segment_pos)  # (B, T)
    elif seg0 is not None and S0 > 0:
        rope_pos = seg0[:, -1:] + 1 + rank * T + steps  # the document open in the initial cache continues
    else:
        rope_pos = steps + start  # (T,)

    prev_conv = None
    if mixer.short_conv:
        before = conv0 if conv0 is not None else torch.zeros_like(got[0][0])  # what precedes rank 0
        # rank 0 reads row 0 of the same stack, so every rank's backward joins the collective
        prev_conv = torch.cat([before[None], got[0][:-1]])[rank]
    xc, _ = mixer._short_conv(x, prev_conv, segment_pos)
    q, k, v = mixer._qkv(xc, rope_pos)

    # the keys and values of the earlier ranks (halo of L each), with their document positions
    kv = gather_packed([k[:, T - L :], v[:, T - L :]], group)  # (N, B, L, Hkv, hd) each
    k_ranks, v_ranks = (t.transpose(0, 1).flatten(1, 2) for t in kv)  # (B, N·L, Hkv, hd), rank order
    seg_ranks = None
    if seg_mode:
        seg_block = rope_pos.expand(B, T)
        seg_ranks = gather_ranks(seg_block[:, T - L :].contiguous(), group).transpose(0, 1).flatten(1, 2)
        if seg0 is None:  # the initial cache without document positions: its keys' stream positions
            seg0 = torch.arange(pos0 - S0, pos0, device=x.device).expand(B, S0)

    def history(upto: int, keep: int | None):
        """Initial cache + the halos of ranks < ``upto``, the last ``keep`` keys (all when None)."""
        parts_k = ([k0] if k0 is not None else []) + [k_ranks[:, : upto * L]]
        parts_v = ([v0] if v0 is not None else []) + [v_ranks[:, : upto * L]]
        hk, hv = torch.cat(parts_k, 1), torch.cat(parts_v, 1)
        hs = None
        if seg_mode:
            hs = torch.cat(([seg0] if seg0 is not None else []) + [seg_ranks[:, : upto * L]], 1)
        if keep is not None:
            hk, hv, hs = (
                hk[:, hk.shape[1] - keep :],
                hv[:, hv.shape[1] - keep :],
                None if hs is None else hs[:, hs.shape[1] - keep :],
            )
        return hk, hv, hs

    keep_past = None if W is None else min(W, S0 + rank * L)
    pk, pv, ps = history(rank, keep_past)
    past = KVCache(k=pk, v=pv, pos=torch.full((B,), start, dtype=torch.long, device=x.device), seg=ps)
    y, _ = mixer._attend_cached(q, k, v, past, start, rope_pos, mode, None, pad_queries=True)
    if not return_state:
        return y, None

    # the cache after the whole sequence, from the same gathered tensors on every rank
    fk, fv, fs = history(n, None if W is None else min(W, S0 + n * L))
    conv = None
    if mixer.short_conv:
        conv = got[0][-1]  # the last rank's buffer
    final = KVCache(
        k=fk, v=fv, pos=torch.full((B,), pos0 + n * T, dtype=torch.long, device=x.device), seg=fs, conv=conv
    )
    return y, final
