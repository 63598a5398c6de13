"""Shared RMT test fixtures (tests/test_rmt.py, tests/test_rmt_layout.py): a tiny attention backbone config and
the RMT / data builders. Test files import from here, never from each other.

Tiny float64 backbones: d 32, 2 layers, m 3 memory tokens, segments of L 5; vocabulary 40."""

from __future__ import annotations

import torch

from seqzoo.models import Encoder, LanguageModel, ModelConfig
from seqzoo.models.rmt import RMT, RMTConfig

V, D, M, L = 40, 32, 3, 5
CFG = ModelConfig(
    vocab_size=V, d_model=D, n_layers=2, pattern=["attention"], mixer_kwargs={"attention": {"n_heads": 4}}
)


def make(kind="lm", seed=0, **rmt):
    """An RMT in float64 over a seeded ``LanguageModel`` (``kind="lm"``) or ``Encoder`` (``"enc"``, 6 labels)."""
    torch.manual_seed(seed)
    bb = LanguageModel(CFG) if kind == "lm" else Encoder(CFG)
    rmt.setdefault("num_mem_tokens", M)
    rmt.setdefault("segment_size", L)
    if kind == "enc":
        rmt.setdefault("num_labels", 6)
    return RMT(bb, RMTConfig(**rmt)).double()


def data(T, B=2, seed=1):
    """``ids (B, T)``, LM labels ``(B, T)`` with one ignored position (-100), class labels ``(B,)`` in [0, 6)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, T), generator=g)
    lm_labels = torch.randint(0, V, (B, T), generator=g)
    lm_labels[0, 0] = -100
    return ids, lm_labels, torch.randint(0, 6, (B,), generator=g)
