"""Softmax attention: multi-head / grouped-query / multi-query, global or sliding-window, with RoPE.

Vaswani et al. (arXiv:1706.03762); RoPE (arXiv:2104.09864); MQA (arXiv:1911.02150); GQA (arXiv:2305.13245);
the sliding window follows Griffin (arXiv:2402.19427, §2.3, local MQA):

    y_i = softmax_j( q_i · k_j / sqrt(hd) + mask_ij ) v_j,
    key j is visible from query i  iff  p_j <= p_i  and (window is None or p_i - p_j <= window)

so a local query sees itself plus the ``window`` previous tokens, and the cache it needs holds the keys
and values of the last ``window`` tokens (bounded memory). With ``segment_pos (B, T)`` (packed documents,
0 where a document starts) a key is also hidden when a document starts in ``(p_j, p_i]``, and RoPE uses
``segment_pos`` (restarting at 0 per document) instead of the stream position, as in Griffin/RecurrentGemma. The state is the KV cache: rotated keys and
values of the tokens seen so far (all of them for global attention, the last ``window`` for local) plus
the stream position, which continues RoPE across calls.

Modes (all equal up to rounding): ``"sdpa"`` (PyTorch's fused scaled-dot-product attention with a
boolean mask or ``is_causal``), ``"naive"`` (explicit fp32 softmax, the reference), and for local
attention ``"blocked"`` (query blocks of ``window`` tokens against their 2·window keys: O(T·W) memory,
never a T×T mask).

``short_conv = k > 0`` (off by default) adds a depthwise causal convolution of the last k inputs to the input
before the projections, ``x_t <- x_t + Σ_{j<k} w_j ⊙ x_{t-j}`` (zero-initialised: the layer starts as plain
attention), the short convolution Hyena and Orchid put before their global mixers (arXiv:2302.10866,
arXiv:2402.18508). It hands every position its predecessor, the previous-token feature that recall needs and
that attention otherwise has to learn as a head first (docs/zoo.md, "The encoder probe"). Its last k-1 inputs
travel in the state (``KVCache.conv``), and its taps stop at document starts (``segment_pos``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from ..errors import InputError
from ..ops.causal_conv import causal_conv1d
from ..ops.rope import apply_rope
from .base import Mixer, register_mixer
from .kv_cache import KVCache

DOCUMENT_BLOCK = 128  # queries per block of causal attention over packed documents (Attention._by_documents)


def visible_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """Boolean ``(Tq, Tk)`` mask, True where query at ``q_pos`` may attend key at ``k_pos``."""
    diff = q_pos[:, None] - k_pos[None, :]  # (Tq, Tk): p_i - p_j
    mask = diff >= 0
    if window is not None:
        mask &= diff <= window
    return mask


def document_mask(starts: torch.Tensor, T: int) -> torch.Tensor:
    """``starts (B, S+T)`` bool (a document starts at this key) -> ``(B, T, S+T)``: True where the query (one of the
    last T positions) and the key lie in the same document, i.e. no document starts in ``(p_j, p_i]``."""
    doc = starts.long().cumsum(dim=1)  # (B, S+T): document index of every position
    return doc[:, -T:, None] == doc[:, None, :]


def naive_attention(q, k, v, mask, scale):
    """Reference: ``q (B, H, Tq, hd)``, ``k, v (B, H, Tk, hd)``, boolean ``mask`` ``(Tq, Tk)`` / ``(B, 1, Tq, Tk)`` or None."""
    compute = torch.promote_types(q.dtype, torch.float32)
    logits = torch.einsum("bhqd,bhkd->bhqk", q.to(compute), k.to(compute)) * scale
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    return torch.einsum("bhqk,bhkd->bhqd", logits.softmax(-1), v.to(compute)).to(q.dtype)


@register_mixer("attention")
class Attention(Mixer):
    modes = ("sdpa", "naive")
    supports_segment_pos = True
    supports_context_parallel = True  # causal: keys and values of earlier ranks gathered (attention_split.py)
    test_kwargs = {"n_heads": 4, "n_kv_heads": 2}

    def __init__(
        self,
        d_model: int,
        n_heads: int | None = None,
        head_dim: int | None = None,
        n_kv_heads: int | None = None,
        rope_fraction: float = 1.0,
        rope_base: float = 10000.0,
        causal: bool = True,
        window: int | None = None,
        qkv_bias: bool = False,
        out_bias: bool = False,
        short_conv: int = 0,
    ):
        super().__init__(d_model)
        if not isinstance(short_conv, int) or isinstance(short_conv, bool) or short_conv < 0:
            raise InputError(f"short_conv must be an int >= 0 (kernel size; 0: none), got {short_conv!r}")
        if n_heads is None:
            n_heads = max(1, d_model // (head_dim or 64))
        if not isinstance(n_heads, int) or n_heads <= 0:
            raise InputError(f"n_heads must be a positive int, got {n_heads!r}")
        if head_dim is None:
            if d_model % n_heads:
                raise InputError(f"d_model={d_model} is not divisible by n_heads={n_heads}; pass head_dim explicitly")
            head_dim = d_model // n_heads
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if not isinstance(n_kv_heads, int) or n_kv_heads <= 0 or n_heads % n_kv_heads:
            raise InputError(f"n_kv_heads must be a positive divisor of n_heads={n_heads}, got {n_kv_heads!r}")
        if window is not None and (not isinstance(window, int) or window <= 0):
            raise InputError(f"window must be a positive int (tokens before the query it may see), got {window!r}")
        if window is not None and not causal:
            raise InputError("a sliding window is only defined for causal attention (causal=True)")
        self.n_heads, self.head_dim, self.n_kv_heads = n_heads, head_dim, n_kv_heads
        self.rope_fraction, self.rope_base = rope_fraction, rope_base
        self.causal = causal
        self.window = window
        self.q_proj = nn.Linear(d_model, n_heads * head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(n_heads * head_dim, d_model, bias=out_bias)
        self.short_conv = short_conv
        if short_conv:
            self.conv_weight = nn.Parameter(torch.zeros(d_model, short_conv))  # [:, -1] hits the current token

    def extra_repr(self) -> str:
        return (
            f"{super().extra_repr()}, heads={self.n_heads}, kv_heads={self.n_kv_heads}, head_dim={self.head_dim}, "
            f"window={self.window}, rope_fraction={self.rope_fraction}"
            + (f", short_conv={self.short_conv}" if self.short_conv else "")
        )

    def default_mode(self, x, state):
        return "sdpa"

    def _check_state(self, x: torch.Tensor, state: KVCache) -> int:
        if not isinstance(state, KVCache):
            raise InputError(
                f"{self.name}: state must be a KVCache returned by a previous call, got {type(state).__name__}"
            )
        B = x.shape[0]
        if state.k.shape[0] != B or state.k.shape[2:] != (self.n_kv_heads, self.head_dim):
            raise InputError(
                f"{self.name}: state.k must have shape ({B}, S, {self.n_kv_heads}, {self.head_dim}), got {tuple(state.k.shape)}"
            )
        want = (B, self.short_conv - 1, self.d_model)
        if self.short_conv and (state.conv is None or tuple(state.conv.shape) != want):
            got = None if state.conv is None else tuple(state.conv.shape)
            raise InputError(
                f"{self.name}: state.conv must have shape {want} (short_conv={self.short_conv}), got {got}"
            )
        pos = state.pos
        if pos.numel() != B or (B > 1 and not bool((pos == pos[0]).all())):
            raise InputError(
                f"{self.name}: state.pos must hold one equal stream position per batch row, got {pos.tolist()}"
            )
        return int(pos[0])

    def _positions(self, x: torch.Tensor, state: KVCache | None, pos0: int, segment_pos: torch.Tensor | None):
        """RoPE / document positions of the new tokens: ``(B, T)``, or ``(T,)`` when they are the stream positions."""
        T = x.shape[1]
        if segment_pos is not None:
            if segment_pos.dtype.is_floating_point or segment_pos.dtype == torch.bool:
                raise InputError(f"{self.name}: segment_pos must be an integer tensor, got {segment_pos.dtype}")
            return segment_pos.to(device=x.device, dtype=torch.long)
        steps = torch.arange(T, device=x.device)
        if state is not None and state.seg is not None and state.seg.shape[1] > 0:
            return state.seg[:, -1:].to(torch.long) + 1 + steps  # (B, T): continue the documents
        return steps + pos0  # (T,)

    def _forward(
        self,
        x: torch.Tensor,
        state: KVCache | None,
        mode: str,
        segment_pos: torch.Tensor | None = None,
        context_parallel=None,
        return_state: bool = True,
    ):
        if context_parallel is not None:  # this rank's block of a sequence split along time (attention_split.py)
            from .attention_split import split_forward

            return split_forward(self, x, state, mode, segment_pos, context_parallel, return_state)
        pos0 = 0 if state is None else self._check_state(x, state)
        x, conv_state = self._short_conv(x, None if state is None else state.conv, segment_pos)
        rope_pos = self._positions(x, state, pos0, segment_pos)  # (B, T) or (T,)
        q, k, v = self._qkv(x, rope_pos)
        return self._attend_cached(q, k, v, state, pos0, rope_pos, mode, conv_state)

    def _short_conv(self, x: torch.Tensor, prev: torch.Tensor | None, segment_pos: torch.Tensor | None):
        """``x`` plus its short causal convolution over ``prev`` (the k-1 inputs before it; None: zeros) and x, and
        the convolution's new state; ``x`` unchanged and None without ``short_conv``."""
        if not self.short_conv:
            return x, None
        prev = None if prev is None else prev.to(x.dtype)
        delta, conv_state = causal_conv1d(x, self.conv_weight.to(x.dtype), None, prev, segment_pos)
        return x + delta, conv_state

    def _qkv(self, x: torch.Tensor, rope_pos: torch.Tensor):
        """Queries ``(B, T, H, hd)`` and keys, values ``(B, T, Hkv, hd)``; queries and keys rotated at ``rope_pos``."""
        q = rearrange(self.q_proj(x), "b t (h d) -> b t h d", h=self.n_heads)
        k = rearrange(self.k_proj(x), "b t (h d) -> b t h d", h=self.n_kv_heads)
        v = rearrange(self.v_proj(x), "b t (h d) -> b t h d", h=self.n_kv_heads)
        q = apply_rope(q, rope_pos, self.rope_fraction, self.rope_base)
        k = apply_rope(k, rope_pos, self.rope_fraction, self.rope_base)
        return q, k, v

    def _attend_cached(
        self, q, k, v, state: KVCache | None, pos0: int, rope_pos, mode: str, conv_state, pad_queries: bool = False
    ):
        """The new tokens (stream positions ``pos0``.., RoPE / document positions ``rope_pos``) attend to the cached
        keys of ``state`` and to each other: the output ``(B, T, D)`` and the cache after them."""
        B, T = q.shape[:2]
        device = q.device
        if state is not None:
            k_all = torch.cat([state.k.to(k.dtype), k], dim=1)  # (B, S+T, Hkv, hd)
            v_all = torch.cat([state.v.to(v.dtype), v], dim=1)
        else:
            k_all, v_all = k, v
        S = k_all.shape[1] - T
        q_pos = torch.arange(pos0, pos0 + T, device=device)  # stream positions (causality, window)
        k_pos = torch.arange(pos0 - S, pos0 + T, device=device)
        seg_new = rope_pos.expand(B, T) if rope_pos.dim() == 2 else None  # (B, T)
        seg_all = None  # (B, S+T) document positions of every key, when any are known
        if seg_new is not None or (state is not None and state.seg is not None):
            old = (
                (state.seg if state is not None and state.seg is not None else k_pos[:S].expand(B, S))
                if S
                else k_pos[:0].expand(B, 0)
            )
            new = seg_new if seg_new is not None else q_pos.expand(B, T)
            seg_all = torch.cat([old.to(torch.long), new], dim=1)
        doc = None  # (B, T, S+T) same-document mask, only when a document starts after the first key
        if seg_all is not None:
            starts = seg_all == 0
            if bool(starts[:, 1:].any()):
                doc = document_mask(starts, T)
        out = self._attend(q, k_all, v_all, q_pos, k_pos, mode, doc, pad_queries)  # (B, T, H, hd)
        y = self.o_proj(rearrange(out, "b t h d -> b t (h d)"))
        new_state = None
        if self.causal:
            keep = k_all.shape[1] if self.window is None else min(self.window, k_all.shape[1])
            new_state = KVCache(
                k=k_all[:, -keep:],
                v=v_all[:, -keep:],
                pos=torch.full((B,), pos0 + T, dtype=torch.long, device=device),
                seg=None if seg_all is None else seg_all[:, -keep:],
                conv=conv_state,
            )
        return y, new_state

    # ----------------------------------------------------------------- kernels
    def _attend(self, q, k, v, q_pos, k_pos, mode, doc=None, pad_queries=False):
        """q ``(B, T, H, hd)``, k/v ``(B, S+T, Hkv, hd)``, ``doc (B, T, S+T)`` or None -> ``(B, T, H, hd)``.

        ``pad_queries``: causal attention over S cached keys runs as the fused causal kernel on S zero queries
        followed by the T real ones, whose rows are kept. The (T, S+T) mask it avoids is what PyTorch's CPU kernel
        saves for the backward (as floats): O(T·(S+T)) memory against O(S+T), for (S+T)²/2 scores instead of
        T·(S+T). Context parallelism uses it (a rank's block after S = r·T/N earlier keys); a decode step does not.
        """
        scale = self.head_dim**-0.5
        group = self.n_heads // self.n_kv_heads
        q = q.transpose(1, 2)  # (B, H, T, hd)
        k = k.transpose(1, 2)  # (B, Hkv, S+T, hd)
        v = v.transpose(1, 2)
        if mode == "blocked":
            return self._blocked(q, k, v, q_pos, k_pos, scale, doc).transpose(1, 2)
        if mode == "sdpa" and doc is not None and self.causal and self.window is None:
            return self._by_documents(q, k, v, q_pos, k_pos, scale, doc).transpose(1, 2)
        mask = visible_mask(q_pos, k_pos, self.window) if self.causal else None  # (T, S+T)
        if doc is not None:
            mask = doc[:, None] if mask is None else mask & doc[:, None]  # (B, 1, T, S+T)
        if mode == "naive":
            k = k.repeat_interleave(group, dim=1)  # (B, H, S+T, hd)
            v = v.repeat_interleave(group, dim=1)
            out = naive_attention(q, k, v, mask, scale)
        elif self.causal and self.window is None and doc is None and (q.shape[2] == k.shape[2] or pad_queries):
            S = k.shape[2] - q.shape[2]
            q_all = F.pad(q, (0, 0, S, 0)) if S else q  # (B, H, S+T, hd): the causal kernel's square layout
            out = F.scaled_dot_product_attention(q_all, k, v, is_causal=True, scale=scale, enable_gqa=group > 1)
            out = out[:, :, S:]
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=group > 1)
        return out.transpose(1, 2)

    def _by_documents(self, q, k, v, q_pos, k_pos, scale, doc):
        """Causal attention over packed documents in query blocks of ``DOCUMENT_BLOCK``: a block reads the keys from
        the earliest document start among its queries (over the batch) to its last query, so the work follows the
        documents' lengths. One (T, S+T) mask over all keys would make the fused kernel score every key of every
        query, twice the work of its causal path (a 10M transformer's training step took 1.19x as long packed)."""
        first = doc.to(torch.uint8).argmax(-1)  # (B, T): the first key of each query's document
        return self._query_blocks(
            q, k, v, q_pos, k_pos, scale, doc, DOCUMENT_BLOCK, lambda lo, hi: int(first[:, lo:hi].min())
        )

    def _blocked(self, q, k, v, q_pos, k_pos, scale, doc=None):
        """Sliding-window attention in query blocks of ``window``: each block sees at most 2·window keys."""
        W, S = self.window, k.shape[2] - q.shape[2]
        # the first key any query of a block can see
        return self._query_blocks(q, k, v, q_pos, k_pos, scale, doc, W, lambda lo, hi: max(0, S + lo - W))

    def _query_blocks(self, q, k, v, q_pos, k_pos, scale, doc, block: int, first_key):
        """Attention in query blocks of ``block`` tokens: block [lo, hi) reads keys ``first_key(lo, hi)`` .. S + hi,
        masked by what each query may see (``visible_mask``, the window) and by its document (``doc``)."""
        T, S = q.shape[2], k.shape[2] - q.shape[2]
        group = self.n_heads // self.n_kv_heads
        outs = []
        for start in range(0, T, block):
            stop = min(start + block, T)
            k_lo, k_hi = first_key(start, stop), S + stop
            mask = visible_mask(q_pos[start:stop], k_pos[k_lo:k_hi], self.window)  # (tq, tk)
            if doc is not None:
                mask = mask & doc[:, None, start:stop, k_lo:k_hi]  # (B, 1, tq, tk)
            outs.append(
                F.scaled_dot_product_attention(
                    q[:, :, start:stop],
                    k[:, :, k_lo:k_hi],
                    v[:, :, k_lo:k_hi],
                    attn_mask=mask,
                    scale=scale,
                    enable_gqa=group > 1,
                )
            )
        return torch.cat(outs, dim=2)


@register_mixer("local_attention")
class LocalAttention(Attention):
    """Sliding-window attention: each query sees itself and the ``window`` previous tokens."""

    modes = ("sdpa", "blocked", "naive")
    test_kwargs = {"n_heads": 4, "n_kv_heads": 1, "window": 5}

    def __init__(self, d_model: int, window: int = 128, **kwargs):
        if kwargs.get("causal", True) is not True:
            raise InputError("local_attention is causal; use 'attention' with causal=False for a bidirectional mixer")
        super().__init__(d_model, window=window, **kwargs)

    def default_mode(self, x, state):
        T = x.shape[1]
        S = 0 if state is None else state.k.shape[1]
        # a full (T, S+T) mask is cheapest while small; beyond that the banded blocks win and bound memory
        return "sdpa" if T * (S + T) <= 4 * 1024 * 1024 or T <= 2 * self.window else "blocked"
