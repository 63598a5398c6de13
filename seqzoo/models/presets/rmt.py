"""Recurrent Memory Transformer presets (Bulatov et al., arXiv:2207.06881, arXiv:2304.11062): backbones by name,
with the RMT settings each is meant for in ``RMT_DEFAULTS``; ``build_rmt(name)`` builds the wrapped model.

seqzoo backbones use RoPE inside attention instead of the papers' learned absolute position tables (BERT,
GPT-2), so there is no position budget; the sizes follow the papers. All are randomly initialised.
"""

from typing import Any

from ...errors import InputError
from ...models.config import ModelConfig
from . import PRESETS, register_preset

RMT_DEFAULTS: dict[str, dict[str, Any]] = {
    "rmt-tiny": {"num_mem_tokens": 4, "segment_size": 32, "num_labels": 6},
    "rmt-tiny-decoder": {"num_mem_tokens": 4, "segment_size": 32},
    "rmt-bert-base": {"num_mem_tokens": 10, "segment_size": 499, "num_labels": 6},
    "rmt-gpt2-small": {"num_mem_tokens": 16, "segment_size": 512},
}


@register_preset(
    "rmt-tiny", "rmt", "RMT CPU encoder backbone: 2 x 64, 4 heads, MLP 256, bidirectional (docs/rmt.md)", kind="encoder"
)
def rmt_tiny():
    return ModelConfig(
        vocab_size=256,
        d_model=64,
        n_layers=2,
        pattern=["attention"],
        mixer_kwargs={"attention": {"n_heads": 4}},
        mlp="gelu",
        mlp_ratio=4.0,
        dropout=0.0,
    )


@register_preset("rmt-tiny-decoder", "rmt", "RMT CPU causal backbone: 2 x 64, 4 heads, MLP 256 (read/write memory)")
def rmt_tiny_decoder():
    return ModelConfig(
        vocab_size=256,
        d_model=64,
        n_layers=2,
        pattern=["attention"],
        mixer_kwargs={"attention": {"n_heads": 4}},
        mlp="gelu",
        mlp_ratio=4.0,
        dropout=0.0,
    )


@register_preset(
    "rmt-bert-base", "rmt", "BERT-base-sized bidirectional backbone (12 x 768); RMT m=10, L=499", kind="encoder"
)
def rmt_bert_base():
    return ModelConfig(
        vocab_size=28996,
        d_model=768,
        n_layers=12,
        pattern=["attention"],
        mixer_kwargs={"attention": {"n_heads": 12}},
        mlp="gelu",
        mlp_ratio=4.0,
        dropout=0.1,
    )


@register_preset("rmt-gpt2-small", "rmt", "GPT-2-small-sized causal backbone (12 x 768); RMT m=16, L=512")
def rmt_gpt2_small():
    return ModelConfig(
        vocab_size=50257,
        d_model=768,
        n_layers=12,
        pattern=["attention"],
        mixer_kwargs={"attention": {"n_heads": 12}},
        mlp="gelu",
        mlp_ratio=4.0,
        dropout=0.1,
    )


def build_rmt(name: str, rmt_overrides: dict[str, Any] | None = None, **model_overrides: Any):
    """``build_rmt("rmt-tiny", vocab_size=V, rmt_overrides={"num_mem_tokens": 10})`` -> ``RMT``."""
    from ..base import MODEL_TYPES
    from ..rmt import RMT, RMTConfig

    if name not in RMT_DEFAULTS:
        raise InputError(f"unknown RMT preset {name!r}; available: {sorted(RMT_DEFAULTS)}")
    preset = PRESETS[name]
    backbone = MODEL_TYPES[preset.kind](preset.config(**model_overrides))
    return RMT(backbone, RMTConfig(**{**RMT_DEFAULTS[name], **(rmt_overrides or {})}))
