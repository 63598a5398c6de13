"""Softmax-attention baselines: the reference every other family is compared against."""

from ...models.config import ModelConfig
from . import register_preset


@register_preset("attention-tiny", "transformer", "2-layer RoPE transformer, d=64, 4 heads (CPU tests and MQAR)")
def attention_tiny():
    return ModelConfig(
        vocab_size=256,
        d_model=64,
        n_layers=2,
        pattern=["attention"],
        mixer_kwargs={"attention": {"n_heads": 4}},
        mlp="swiglu",
        mlp_ratio=2.0,
    )


@register_preset("local-attention-tiny", "transformer", "2-layer sliding-window (W=32) transformer, d=64")
def local_attention_tiny():
    return ModelConfig(
        vocab_size=256,
        d_model=64,
        n_layers=2,
        pattern=["local_attention"],
        mixer_kwargs={"local_attention": {"n_heads": 4, "window": 32}},
        mlp="swiglu",
        mlp_ratio=2.0,
    )


@register_preset("attention-small", "transformer", "4-layer RoPE transformer, d=128, 4 heads")
def attention_small():
    return ModelConfig(
        vocab_size=256,
        d_model=128,
        n_layers=4,
        pattern=["attention"],
        mixer_kwargs={"attention": {"n_heads": 4}},
        mlp="swiglu",
        mlp_ratio=8 / 3,
    )


@register_preset(
    "transformer-125m", "transformer", "GPT-2-small-sized RoPE transformer (12 x 768, 12 heads, GPT-2 vocab)"
)
def transformer_125m():
    return ModelConfig(
        vocab_size=50257,
        d_model=768,
        n_layers=12,
        pattern=["attention"],
        mixer_kwargs={"attention": {"n_heads": 12}},
        mlp="gelu",
        mlp_ratio=4.0,
        norm="layernorm",
    )


@register_preset("encoder-tiny", "transformer", "2-layer bidirectional attention encoder, d=64", kind="encoder")
def encoder_tiny():
    return ModelConfig(
        vocab_size=256,
        d_model=64,
        n_layers=2,
        pattern=["attention"],
        mixer_kwargs={"attention": {"n_heads": 4}},
        mlp="gelu",
        mlp_ratio=4.0,
        n_classes=2,
    )
