"""Griffin, Hawk and their MQA-Transformer baseline (arXiv:2402.19427), and RecurrentGemma (arXiv:2404.07839).

Paper sizes follow Griffin Table 2 (shared by MQA, Hawk and Griffin; MLP expansion 3, head dim 128, 16 RG-LRU
gate blocks, window 1024); the reference presets follow DeepMind's ``recurrentgemma`` (github.com/google-deepmind/recurrentgemma, arXiv:2404.07839).
"""

from __future__ import annotations

import math

import torch

from ...errors import InputError
from ...models.config import ModelConfig
from . import register_preset

GRIFFIN_PATTERN = ["rglru", "rglru", "local_attention"]


def bf16_sqrt(d: int) -> float:
    """√d rounded to bfloat16, as RecurrentGemma scales its embeddings (50.5 for d = 2560, 8.0 for 64)."""
    return float(torch.tensor(math.sqrt(d), dtype=torch.float32, device="cpu").to(torch.bfloat16).float())


def griffin_config(
    kind: str,
    vocab_size: int,
    d_model: int,
    d_rnn: int,
    n_layers: int,
    n_heads: int,
    head_dim: int | None = None,
    n_blocks: int = 16,
    window: int = 1024,
    mlp_hidden: int | None = None,
    embed_scale: float | None = None,
    logit_softcap: float | None = None,
    rope_fraction: float = 0.5,
    a_init: str = "code",
) -> ModelConfig:
    """``kind``: ``"griffin"`` (rglru, rglru, local_attention)*, ``"hawk"`` (all rglru) or ``"mqa"`` (global MQA).

    A Griffin of fewer than 3 layers alternates (rglru, local_attention): the 3-period pattern truncated to 2 layers
    would have no attention layer at all, i.e. be a Hawk.
    """
    griffin_pattern = GRIFFIN_PATTERN if n_layers >= len(GRIFFIN_PATTERN) else ["rglru", "local_attention"]
    pattern = {"griffin": griffin_pattern, "hawk": ["rglru"], "mqa": ["attention"]}
    if kind not in pattern:
        raise InputError(f"kind must be one of {sorted(pattern)}, got {kind!r}")
    head_dim = head_dim or d_model // n_heads
    attn = {"n_heads": n_heads, "head_dim": head_dim, "n_kv_heads": 1, "rope_fraction": rope_fraction, "out_bias": True}
    mixer_kwargs = {}
    if kind in ("griffin", "hawk"):
        mixer_kwargs["rglru"] = {"d_rnn": d_rnn, "n_blocks": n_blocks, "a_init": a_init}
    if kind == "griffin":
        mixer_kwargs["local_attention"] = {**attn, "window": window}
    if kind == "mqa":
        mixer_kwargs["attention"] = attn
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        pattern=pattern[kind],
        mixer_kwargs=mixer_kwargs,
        block="griffin",
        norm="rmsnorm",
        norm_eps=1e-6,
        mlp="gelu_tanh_gated",
        mlp_hidden=mlp_hidden or 3 * d_model,
        mlp_bias=True,
        tie_embeddings=True,
        embed_init_std=d_model**-0.5,
        embed_scale=embed_scale,
        logit_softcap=logit_softcap,
    )


# ---------------------------------------------------------------- toy sizes (CPU)
TINY = dict(vocab_size=256, d_model=128, d_rnn=192, n_layers=6, n_heads=4, n_blocks=4, window=32)


@register_preset("hawk-tiny", "griffin", "Hawk, 6 x 128, D_RNN 192, byte vocab (CPU)")
def hawk_tiny():
    return griffin_config("hawk", **TINY)


@register_preset("griffin-tiny", "griffin", "Griffin (rglru, rglru, local MQA W=32), 6 x 128, D_RNN 192 (CPU)")
def griffin_tiny():
    return griffin_config("griffin", **TINY)


@register_preset("mqa-tiny", "griffin", "Griffin paper's MQA Transformer baseline, 6 x 128, 4 heads (CPU)")
def mqa_tiny():
    return griffin_config("mqa", **TINY)


# ---------------------------------------------------------------- paper sizes (Griffin Table 2)
PAPER_SIZES = {  # name: (D, D_RNN, depth, heads)
    "100m": (768, 1024, 12, 6),
    "200m": (1024, 1536, 12, 8),
    "400m": (1536, 2048, 12, 12),
    "1.3b": (2048, 2560, 24, 16),
    "3b": (3072, 4096, 24, 24),
    "7b": (4096, 5632, 32, 32),
    "14b": (5120, 8192, 40, 40),
}
PAPER_VOCAB = 256_000  # not stated in the paper; non-embedding counts do not depend on it


def _register_paper(kind: str, size: str, dims: tuple[int, int, int, int]) -> None:
    D, R, depth, heads = dims

    def make():
        return griffin_config(kind, PAPER_VOCAB, D, R, depth, heads, head_dim=128, n_blocks=16, window=1024)

    register_preset(
        f"{kind}-{size}",
        "griffin",
        f"{kind} at the Griffin paper's {size} size (D={D}, D_RNN={R}, depth {depth}, {heads} heads x 128)",
    )(make)


for _kind in ("hawk", "griffin", "mqa"):
    for _size, _dims in PAPER_SIZES.items():
        _register_paper(_kind, _size, _dims)


# ---------------------------------------------------------------- reference presets (recurrentgemma)
@register_preset("recurrentgemma-2b", "griffin", "RecurrentGemma-2B: 26 layers (18 rec / 8 local MQA), D 2560")
def recurrentgemma_2b():
    return griffin_config(
        "griffin",
        256_000,
        2560,
        2560,
        26,
        10,
        head_dim=256,
        n_blocks=10,
        window=2048,
        mlp_hidden=7680,
        embed_scale=bf16_sqrt(2560),
        logit_softcap=30.0,
    )


@register_preset("recurrentgemma-9b", "griffin", "RecurrentGemma-9B: 38 layers (26 rec / 12 local MQA), D 4096")
def recurrentgemma_9b():
    return griffin_config(
        "griffin",
        256_000,
        4096,
        4096,
        38,
        16,
        head_dim=256,
        n_blocks=16,
        window=2048,
        mlp_hidden=12288,
        embed_scale=bf16_sqrt(4096),
        logit_softcap=30.0,
    )


@register_preset("griffin-paper-7b", "griffin", "Griffin 7B as built by the reference code (nb = heads = 32)")
def griffin_paper_7b():
    return griffin_config("griffin", 256_000, 4096, 5632, 32, 32, head_dim=128, n_blocks=32, window=1024)


@register_preset("hawk-paper-7b", "griffin", "Hawk 7B as built by the reference code (nb = 32)")
def hawk_paper_7b():
    return griffin_config("hawk", 256_000, 4096, 5632, 32, 32, head_dim=128, n_blocks=32, window=1024)
