"""Which linear layers of a seqzoo model LoRA (peft, Hu et al. arXiv:2106.09685) can adapt.

LoRA replaces a frozen ``nn.Linear`` ``W`` by ``W + (alpha / r) B A`` with trainable ``A`` (r x in) and ``B``
(out x r). peft's ``LoraConfig(target_modules=[...])`` picks the layers by the end of their module name; this module
lists, for a given seqzoo model, the names that exist in it: every ``nn.Linear`` that is a direct child of a mixer
(attention's ``q_proj``/``k_proj``/``v_proj``/``o_proj``, GateLoop's projections and gates, mLSTM's up/down
projections and gates or the 7B variant's ``q``/``k``/``v``/``ogate``/``out_proj``, RG-LRU's ``linear_x``/
``linear_y``/``linear_out``, Orchid's ``in_proj``/``out_proj``) and, with ``mlp=True``, the MLP's. Parameters that are
not ``nn.Linear`` modules (sLSTM's recurrent weights, mLSTM's block-diagonal q/k/v, RG-LRU's block-diagonal gates,
Orchid's filter network inside its own module) are not LoRA targets; an sLSTM-only model is adapted through its
MLP.
"""

from __future__ import annotations

from torch import nn

from ..errors import InputError

MLP_PREFIX = "mlp"


def lora_target_modules(model: nn.Module, mlp: bool = False) -> list[str]:
    """``target_modules`` for ``peft.LoraConfig`` on a seqzoo ``LanguageModel`` / ``Encoder`` or its HF wrapper.

    Returns name endings such as ``"mixer.q_proj"`` and (``mlp``) ``"mlp.up"``, sorted, each naming an
    ``nn.Linear`` in at least one block; the embedding and output heads are never included.
    """
    core = getattr(model, "seqzoo_model", model)
    blocks = getattr(core, "blocks", None)
    if not isinstance(blocks, nn.ModuleList):
        raise InputError(f"lora_target_modules needs a seqzoo LanguageModel or Encoder, got {type(model).__name__}")
    names: set[str] = set()
    for block in blocks:
        parts = [("mixer", block.mixer)] + ([(MLP_PREFIX, block.mlp)] if mlp and hasattr(block, "mlp") else [])
        for prefix, module in parts:
            names |= {f"{prefix}.{n}" for n, child in module.named_children() if type(child) is nn.Linear}
    if not names:
        raise InputError(
            f"no block of this model ({sorted(set(core.config.layer_mixers()))}) has an nn.Linear in its mixer: "
            "pass mlp=True to adapt the MLP layers"
        )
    return sorted(names)


__all__ = ["lora_target_modules"]
