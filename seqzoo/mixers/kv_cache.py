"""The state of an attention layer: its KV cache (``mixers/attention.py``; the context-parallel split,
``mixers/attention_split.py``, builds one from the keys and values of earlier ranks)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class KVCache:
    """Keys (rotated) and values of the visible past, ``(B, S, H_kv, hd)``, and the stream position ``(B,)``.

    ``conv (B, k-1, D)``: the last inputs of the ``short_conv`` convolution (None without one).
    ``seg (B, S)``: the RoPE / document position (``segment_pos``) of every cached key; None means it equals the
    stream position (no packed documents). It continues ``segment_pos`` for a call that passes none, and marks
    document starts (0) inside the cache, which hide the keys before them.
    """

    k: torch.Tensor
    v: torch.Tensor
    pos: torch.Tensor
    seg: torch.Tensor | None = None
    conv: torch.Tensor | None = None  # (B, short_conv - 1, D): the short convolution's last inputs, if it has one


__all__ = ["KVCache"]
