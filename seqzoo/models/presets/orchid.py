"""Orchid presets: associative-recall encoders (CPU), Orchid-BERT (M2 layout) and Orchid-ViT (arXiv:2402.18508, §4.1-§4.3).

``orchid_ar_config(mixer, vocab_size, seq_len)`` builds the §8 recall model for any mixer, so Orchid,
the static long convolution and attention are compared with everything else equal.
"""

from __future__ import annotations

from ...models import vision as _vision  # noqa: F401  (registers model type "vision")
from ...models.config import ModelConfig
from . import register_preset

AR_MIXER_KWARGS = {
    "orchid": {"conditioning": "type1", "conv": "circular", "param_groups": False},
    "long_conv": {"conv": "circular", "param_groups": False},
    # the attention reference with Orchid's short convolution (conv_size 3): plain attention stays on the recall
    # plateau here (docs/zoo.md "The encoder probe"); pass short_conv=0 for it
    "attention": {"n_heads": 4, "short_conv": 3},
}


def orchid_ar_config(
    mixer: str = "orchid", vocab_size: int = 30, seq_len: int = 66, d_model: int = 64, n_layers: int = 2, **mixer_kwargs
) -> ModelConfig:
    """§8 protocol model: pre-LN residual blocks, GELU MLP 4x, LayerNorm; ``seq_len`` is the model input length."""
    kw = dict(AR_MIXER_KWARGS.get(mixer, {}))
    if mixer in ("orchid", "long_conv"):
        kw["l_max"] = seq_len
    kw.update(mixer_kwargs)
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        pattern=[mixer],
        mixer_kwargs={mixer: kw},
        mlp="gelu",
        mlp_ratio=4.0,
        mlp_bias=True,
        norm="layernorm",
    )


@register_preset(
    "orchid-ar-tiny",
    "orchid",
    "2-layer Orchid encoder (type I, d=64) for associative recall, V=30, T=64",
    kind="encoder",
)
def orchid_ar_tiny():
    return orchid_ar_config("orchid", 30, 66)


@register_preset(
    "long-conv-ar-tiny",
    "orchid",
    "2-layer static long-conv (Hyena-style) encoder, the Orchid AR baseline",
    kind="encoder",
)
def long_conv_ar_tiny():
    return orchid_ar_config("long_conv", 30, 66)


# --------------------------------------------------------------------- Orchid-BERT (M2 layout)
def orchid_bert_config(
    d_model: int,
    n_layers: int = 12,
    filter_width: int = 128,
    seq_len: int = 128,
    vocab_size: int = 30522,
    conditioning: str = "type1",
) -> ModelConfig:
    """§6: Orchid replaces attention, GLU block-diagonal MLP (4H, nb 4), post-LN M2 layer, residual long conv.

    BERT embeddings (words + learned positions + 2 token types, LayerNorm), positions re-added after every
    layer (M2), MLM head with the dense-GELU-LN transform and a tied decoder, tanh pooler on the first token.
    """
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        pattern=["orchid"],
        mixer_kwargs={
            "orchid": {"conditioning": conditioning, "l_max": seq_len, "filter_width": filter_width, "filter_wd": 0.1}
        },
        block="m2",
        mlp_ratio=4.0,
        norm="layernorm",
        norm_eps=1e-12,
        n_classes=2,
        pool="first",
        max_positions=seq_len,
        type_vocab_size=2,
        embed_norm=True,
        readd_positions=True,
        mlm_transform=True,
        pooler=True,
        extra={"mlp_nblocks": 4},
    )


@register_preset(
    "orchid-bert-tiny", "orchid", "2-layer Orchid-BERT (M2 layer, d=64, seq 128) for CPU tests", kind="encoder"
)
def orchid_bert_tiny():
    return orchid_bert_config(64, n_layers=2, filter_width=32, vocab_size=256)


@register_preset(
    "orchid-bert-base",
    "orchid",
    "Orchid-BERT-base: 12 x 768, GLU block-diagonal MLP, seq 128 (paper: 77M)",
    kind="encoder",
)
def orchid_bert_base():
    return orchid_bert_config(768)


@register_preset(
    "orchid-bert-large",
    "orchid",
    "Orchid-BERT-large: 12 x 1536, GLU block-diagonal MLP, seq 128 (paper: 254M)",
    kind="encoder",
)
def orchid_bert_large():
    return orchid_bert_config(1536)


# ------------------------------------------------------------------------------ Orchid-ViT
def orchid_vit_config(
    mixer: str = "orchid",
    d_model: int = 64,
    n_layers: int = 4,
    image_size: int = 8,
    patch_size: int = 1,
    channels: int = 1,
    max_value: float = 16.0,
    n_classes: int = 10,
    mlp_hidden: int | None = None,
    **mixer_kwargs,
) -> ModelConfig:
    """ViT with the mixer of choice, block-diagonal GELU MLP (4x, nb 4), learned positions, mean pool."""
    n_tokens = (image_size // patch_size) ** 2
    kw = {
        "orchid": {"conditioning": "type1", "l_max": n_tokens},
        "long_conv": {"l_max": n_tokens},
        "attention": {"n_heads": 4},
    }.get(mixer, {})
    kw = {**kw, **mixer_kwargs}
    return ModelConfig(
        vocab_size=1,
        d_model=d_model,
        n_layers=n_layers,
        pattern=[mixer],
        mixer_kwargs={mixer: kw},
        block="residual_bd",
        mlp_ratio=4.0,
        mlp_hidden=mlp_hidden,
        norm="layernorm",
        n_classes=n_classes,
        pool="mean",
        tie_embeddings=False,
        extra={
            "mlp_nblocks": 4,
            "image_size": image_size,
            "patch_size": patch_size,
            "channels": channels,
            "max_value": max_value,
        },
    )


@register_preset(
    "orchid-vit-digits", "orchid", "4-layer Orchid-ViT, d=64, 1x1 patches of 8x8 digits (64 tokens)", kind="vision"
)
def orchid_vit_digits():
    return orchid_vit_config()


@register_preset(
    "orchid-vit-fashion",
    "orchid",
    "6-layer Orchid-ViT, d=128, 4x4 patches of 28x28 Fashion-MNIST (49 tokens)",
    kind="vision",
)
def orchid_vit_fashion():
    return orchid_vit_config(d_model=128, n_layers=6, image_size=28, patch_size=4, max_value=255.0)


@register_preset(
    "orchid-vit-cifar", "orchid", "6-layer Orchid-ViT, d=128, 4x4 patches of 32x32x3 (64 tokens)", kind="vision"
)
def orchid_vit_cifar():
    return orchid_vit_config(d_model=128, n_layers=6, image_size=32, patch_size=4, channels=3, max_value=255.0)


@register_preset(
    "orchid-vit-b", "orchid", "Orchid-ViT-base: 12 x 768, 16x16 patches of 224x224x3 (196 tokens)", kind="vision"
)
def orchid_vit_b():
    return orchid_vit_config(d_model=768, n_layers=12, image_size=224, patch_size=16, channels=3, max_value=255.0)
