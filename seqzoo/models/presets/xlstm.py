"""xLSTM presets (arXiv:2405.04517 §2.4, §4; arXiv:2503.13427): NeurIPS stacks xLSTM[a:b] at the paper's sizes, the 7B-style mLSTM-only model, toys.

Naming: ``xlstm71-<size>`` is xLSTM[7:1] with the paper's sLSTM placement, ``xlstm10-<size>`` is xLSTM[1:0]
(mLSTM only), ``xlstm7b`` the simplified 7B architecture. Block types are expressed with the "residual" block:
mLSTM layers have no MLP, sLSTM layers the GeLU-gated FFN (width ceil(1.3 D / 64) * 64), every norm a weight-only
LayerNorm (eps 1e-5); the 7B style uses RMSNorm (eps 1e-6), SwiGLU (width 2.6667 D rounded up to 64 as xLSTMLarge does) and logits
soft-capped at 30. ``xlstm_init_(model)`` applies the NeurIPS per-block initialisation (NX-AI's official xlstm package), which needs
each block's index and therefore cannot happen inside a mixer constructor.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from ...errors import InputError
from ...models.config import ModelConfig
from ...naming import RENAMED_PRESET_KEYS, rename_keys
from . import register_preset

GPT2_VOCAB_PADDED = 50304
# paper placements (arXiv:2405.04517 §4)
SLSTM_AT_24 = [3, 20]
SLSTM_AT_48 = [3, 5, 7, 40, 42, 44]


def _round_up(x: float, multiple: int = 64) -> int:
    """NeurIPS code: ceil(x / multiple) * multiple."""
    return int(math.ceil(x / multiple) * multiple)


def _round_up_7b(x: float, multiple: int = 64) -> int:
    """xLSTMLarge code: floor((x + multiple - 1) / multiple) * multiple; differs from ceil for x just above a
    multiple (2.6667 * 96 = 256.003 -> 256, where ceil gives 320)."""
    return int(((x + multiple - 1) // multiple) * multiple)


def xlstm_config(
    d_model: int,
    n_layers: int,
    slstm_at: Iterable[int] = (),
    vocab_size: int = GPT2_VOCAB_PADDED,
    mlstm_n_heads: int = 4,
    slstm_n_heads: int = 4,
    ffn_factor: float = 1.3,
    chunk_size: int = 64,
    conv_size: int = 4,
    dropout: float = 0.0,
    slstm_cell_mode: str = "auto",
    **mlstm_kwargs,
) -> ModelConfig:
    """NeurIPS xLSTM stack: ``slstm_at`` lists the 0-based sLSTM block indices, every other block is mLSTM."""
    renamed = RENAMED_PRESET_KEYS["xlstm_config"]  # old keywords, read with a FutureWarning
    if "conv_kernel" in mlstm_kwargs:  # it set both mixers' conv, as conv_size does (not only the mLSTM's)
        if conv_size != 4:
            raise InputError("xlstm_config: both 'conv_kernel' (the old name) and 'conv_size' are given")
        conv_size = rename_keys(renamed, {"conv_kernel": mlstm_kwargs.pop("conv_kernel")}, "xlstm_config")["conv_size"]
    slstm_at = sorted({int(i) for i in slstm_at})
    if any(i < 0 or i >= n_layers for i in slstm_at):
        raise InputError(f"slstm_at must hold block indices in [0, {n_layers}), got {slstm_at}")
    pattern = ["slstm" if i in slstm_at else "mlstm" for i in range(n_layers)]
    used = set(pattern)  # settings only for the block kinds the stack has (ModelConfig refuses the others)
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        pattern=pattern,
        mixer_kwargs={
            k: v
            for k, v in {
                "mlstm": {
                    "n_heads": mlstm_n_heads,
                    "chunk_size": chunk_size,
                    "conv_size": conv_size,
                    "n_blocks": n_layers,
                    "dropout": dropout,
                    **mlstm_kwargs,
                },
                "slstm": {
                    "n_heads": slstm_n_heads,
                    "conv_size": conv_size,
                    "n_blocks": n_layers,
                    "cell_mode": slstm_cell_mode,
                    "dropout": dropout,
                },
            }.items()
            if k in used
        },
        block_kwargs={
            k: v
            for k, v in {
                "mlstm": {"mlp": "none"},
                "slstm": {"mlp": "geglu", "mlp_hidden": _round_up(ffn_factor * d_model)},
            }.items()
            if k in used
        },
        norm="layernorm_nobias",
        norm_eps=1e-5,
        mlp="none",
        mlp_bias=False,
        dropout=dropout,
        tie_embeddings=False,
        embed_init_std=math.sqrt(2.0 / (5.0 * d_model)),
        extra={"family": "xlstm", "variant": "neurips", "slstm_at": slstm_at},
    )


def xlstm7b_config(
    d_model: int = 4096,
    n_layers: int = 32,
    n_heads: int = 8,
    vocab_size: int = GPT2_VOCAB_PADDED,
    chunk_size: int = 64,
    ffn_factor: float = 2.6667,
    qk_dim_factor: float = 0.5,
    v_dim_factor: float = 1.0,
    gate_soft_cap: float = 15.0,
    logit_soft_cap: float = 30.0,
) -> ModelConfig:
    """Simplified 7B-style stack (arXiv:2503.13427): mLSTM layer + SwiGLU per block, RMSNorm, soft caps."""
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        pattern=["mlstm"],
        mixer_kwargs={
            "mlstm": {
                "variant": "7b",
                "n_heads": n_heads,
                "chunk_size": chunk_size,
                "qk_dim_factor": qk_dim_factor,
                "v_dim_factor": v_dim_factor,
                "gate_soft_cap": gate_soft_cap,
                "n_blocks": n_layers,
                "norm_eps": 1e-6,
            }
        },
        block_kwargs={"mlstm": {"mlp": "swiglu", "mlp_hidden": _round_up_7b(ffn_factor * d_model)}},
        norm="rmsnorm",
        norm_eps=1e-6,
        mlp="swiglu",
        tie_embeddings=False,
        logit_softcap=logit_soft_cap,
        embed_init_std=math.sqrt(2.0 / (5.0 * d_model)),
        extra={"family": "xlstm", "variant": "7b"},
    )


@torch.no_grad()
def xlstm_init_(model) -> None:
    """NeurIPS / 7B initialisation of a freshly built xLSTM LanguageModel (NX-AI xlstm / Hugging Face recipes), block index aware.

    Mixers re-initialise themselves with ``n_blocks`` and their ``block_idx`` (the sLSTM power-law forget
    bias depends on it); FFN up-projections get small init, FFN down-projections Wang init (7B: sqrt of the
    FFN width in place of sqrt(D)); embedding and untied head N(0, 2/(5D)).
    """
    D, N = model.config.d_model, len(model.blocks)
    small = math.sqrt(2.0 / (5.0 * D))
    for idx, block in enumerate(model.blocks):
        mixer = block.mixer
        if hasattr(mixer, "block_idx"):
            mixer.block_idx, mixer.n_blocks = idx, N
        elif hasattr(mixer, "n_blocks"):
            mixer.n_blocks = N
        if hasattr(mixer, "reset_parameters"):
            mixer.reset_parameters()
        mlp = getattr(block, "mlp", None)
        if mlp is not None:
            for lin in (mlp.up, mlp.gate):
                if lin is not None:
                    nn.init.normal_(lin.weight, std=small)
            width = mlp.down.weight.shape[1] if model.config.extra.get("variant") == "7b" else D
            nn.init.normal_(mlp.down.weight, std=2.0 / (N * math.sqrt(width)))
    nn.init.normal_(model.embed.weight, std=small)
    head = getattr(model, "lm_head", None)
    if head is not None and head.weight is not model.embed.weight:
        nn.init.normal_(head.weight, std=small)


# --------------------------------------------------------------------------- paper sizes (arXiv:2405.04517 §4)
_SIZES = {
    "125m": (768, 24, SLSTM_AT_24),
    "350m": (1024, 48, SLSTM_AT_48),
    "760m": (1536, 48, SLSTM_AT_48),
    "1.3b": (2048, 48, SLSTM_AT_48),
}


def _register_paper(size: str, d: int, n: int, at: list[int]) -> None:
    register_preset(f"xlstm71-{size}", "xlstm", f"xLSTM[7:1] {size} (NeurIPS): D={d}, {n} blocks, sLSTM at {at}")(
        lambda: xlstm_config(d, n, at)
    )
    register_preset(f"xlstm10-{size}", "xlstm", f"xLSTM[1:0] {size} (NeurIPS, mLSTM only): D={d}, {n} blocks")(
        lambda: xlstm_config(d, n, ())
    )


for _size, (_d, _n, _at) in _SIZES.items():
    _register_paper(_size, _d, _n, _at)


@register_preset("xlstm10-2.7b", "xlstm", "xLSTM[1:0] 2.7B (NeurIPS, mLSTM only): D=2560, 64 blocks")
def xlstm10_2p7b():
    return xlstm_config(2560, 64, ())


@register_preset("xlstm-7b", "xlstm", "xLSTM 7B architecture: 32 blocks, D=4096, 8 heads (K=256, V=512), FFN 10944")
def xlstm_7b():
    return xlstm7b_config()


# --------------------------------------------------------------------------------------------- toys for CPU
@register_preset("xlstm-tiny", "xlstm", "xLSTM[3:1] toy: D=128, 4 blocks, sLSTM at [1], byte vocab")
def xlstm_tiny():
    return xlstm_config(128, 4, [1], vocab_size=256)


@register_preset("xlstm71-tiny", "xlstm", "xLSTM[7:1] toy: D=64, 8 blocks, sLSTM at [3], byte vocab")
def xlstm71_tiny():
    return xlstm_config(64, 8, [3], vocab_size=256, mlstm_n_heads=2)


@register_preset("xlstm10-tiny", "xlstm", "xLSTM[1:0] toy: D=64, 4 mLSTM blocks, byte vocab")
def xlstm10_tiny():
    return xlstm_config(64, 4, (), vocab_size=256, mlstm_n_heads=2)


@register_preset("xlstm7b-tiny", "xlstm", "7B-style toy: D=64, 2 blocks, 2 heads, byte vocab")
def xlstm7b_tiny():
    return xlstm7b_config(d_model=64, n_layers=2, n_heads=2, vocab_size=256, chunk_size=16)
