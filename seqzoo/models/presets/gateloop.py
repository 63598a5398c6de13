"""GateLoop presets (Katsch, arXiv:2311.01927, appendix C, Tables 3-4).

Each layer: x + GateLoop(LN(x)), then x + Linear(GELU(Linear(LN(x)))) (the "residual" block with a GELU MLP of
width d_channel_mixing, biases on), max heads (d_h = 1), untied LM head, no positional encoding.
"""

from ...models.config import ModelConfig
from . import register_preset


def gateloop_config(
    vocab_size: int, d_model: int, n_layers: int, d_channel_mixing: int, dropout: float = 0.0, **mixer_kwargs
) -> ModelConfig:
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        pattern=["gateloop"],
        mixer_kwargs={"gateloop": mixer_kwargs},
        norm="layernorm",
        norm_eps=1e-5,
        mlp="gelu",
        mlp_hidden=d_channel_mixing,
        mlp_bias=True,
        dropout=dropout,
        tie_embeddings=False,
    )


@register_preset(
    "gateloop-mh",
    "gateloop",
    "Memory Horizon model (Table 3): 4 layers, d_model 64, channel mixing 128, max heads; 51-token vocab",
)
def gateloop_mh():
    # inputs 0..5 and 51 output classes share one 51-entry vocabulary; one optimiser group (Table 3)
    return gateloop_config(51, 64, 4, 128, transition_weight_decay=None)


@register_preset(
    "gateloop-mh-fixed",
    "gateloop",
    "Memory Horizon model with fixed (input-independent) state transitions, the paper's ablation",
)
def gateloop_mh_fixed():
    return gateloop_config(51, 64, 4, 128, transition="fixed", transition_weight_decay=None)


@register_preset(
    "gateloop-wt103",
    "gateloop",
    "WikiText-103 model (Table 4): 12 layers, d_model 624, channel mixing 1872, GPT-2 BPE; "
    "transition projections lr 1e-4, no weight decay",
)
def gateloop_wt103():
    return gateloop_config(50257, 624, 12, 1872, dropout=0.1, transition_lr=1e-4, transition_weight_decay=0.0)


@register_preset("gateloop-tiny", "gateloop", "2-layer GateLoop, d_model 64, channel mixing 128, byte vocab (CPU)")
def gateloop_tiny():
    return gateloop_config(256, 64, 2, 128)


@register_preset("gateloop-tiny-heads", "gateloop", "2-layer GateLoop, d_model 64, 4 heads of d_h = 16 (chunkwise)")
def gateloop_tiny_heads():
    return gateloop_config(256, 64, 2, 128, n_heads=4)
