"""Builders of the zoo's models, apart from the zoo's tables (``zoo_models.py``): a run key hashes the module of
its model's builder (``sweep/train_run.py``), so RMT's runs retrain when this file changes, and not when the list
of zoo models, their descriptions or ``model_spec`` change.

``single_mixer_config``: a stack of one mixer with the zoo's SwiGLU MLP (ratio 2); ``rmt_model``: the Recurrent
Memory Transformer (Bulatov et al., arXiv:2207.06881) around the zoo's ``attention`` stack. ``ZOO_HEADS`` and
``ZOO_ROPE_BASE``: the zoo's attention settings (docs/zoo.md, "Attention settings of the zoo").
"""

from __future__ import annotations

from typing import Any

from ..mixers import MIXERS
from ..models import ModelConfig

ZOO_ROPE_BASE = 100.0
ZOO_HEADS = 4  # head dimension 16 at the zoo width 64, as attention-tiny and Griffin's local MQA


def single_mixer_config(mixer: str, vocab_size: int, d_model: int, n_layers: int, **mixer_kwargs: Any) -> ModelConfig:
    cls = MIXERS[mixer]
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        pattern=[mixer],
        mixer_kwargs={mixer: {**getattr(cls, "zoo_kwargs", {}), **mixer_kwargs}},
        block_kwargs={mixer: dict(getattr(cls, "zoo_block_kwargs", {}))},
        mlp="swiglu",
        mlp_ratio=2.0,
    )


def rmt_model(task, d_model: int, n_layers: int, segment_size: int, num_mem_tokens: int, n_heads: int = ZOO_HEADS):
    """RMT (read/write memory, full BPTT) around the zoo's ``attention`` stack for ``task``."""
    from ..models import LanguageModel
    from ..models.rmt import RMT, RMTConfig

    backbone = LanguageModel(
        single_mixer_config("attention", task.vocab_size, d_model, n_layers, rope_base=ZOO_ROPE_BASE, n_heads=n_heads)
    )
    return RMT(backbone, RMTConfig(num_mem_tokens=num_mem_tokens, segment_size=segment_size))
