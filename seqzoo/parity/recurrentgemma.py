"""Weight, config and cache maps between DeepMind's ``recurrentgemma`` (PyTorch, v1.0.1) and seqzoo.

Used by tests/test_griffin_parity.py against stored fixtures (``fixtures/recurrentgemma`` under ``tests/conftest.py``'s
``shared_dir()``; no install needed) and, when ``recurrentgemma`` is installed, against the live package (docs/griffin.md).

Name map (``P = blocks.{i}.``): ``temporal_pre_norm.scale`` / ``channel_pre_norm.scale`` / ``final_norm.scale`` →
``P.norm1`` / ``P.norm2`` / ``norm`` with γ = 1 + scale; ``recurrent_block.*`` → ``mixer.*`` (``conv_1d.{w,b}`` →
``conv.{weight,bias}``, block-diagonal ``{w,b}`` → ``{weight,bias}``); ``attention_block.proj_{q,k,v,final}`` →
``mixer.{q,k,v,o}_proj``; ``mlp_block.ffw_up.w[0]ᵀ`` / ``w[1]ᵀ`` → ``mlp.up`` (GeLU branch) / ``mlp.gate``;
``ffw_down`` → ``mlp.down``; ``embedder.input_embedding`` → ``embed.weight`` (= the tied head).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
import types
from collections.abc import Callable
from typing import Any

import torch

from ..errors import InputError
from ..mixers.attention import KVCache
from ..mixers.rglru import RGLRUState
from ..models.config import ModelConfig
from ..models.presets.griffin import bf16_sqrt, griffin_config
from .fixtures import load_fixture  # noqa: F401  (re-exported: the parity tests load cases through this module)


def import_recurrentgemma_torch(
    import_module: Callable[[str], types.ModuleType] = importlib.import_module,
) -> types.ModuleType:
    """The installed ``recurrentgemma.torch`` (ImportError when it is not installed). The package's ``__init__``
    imports its JAX half (jax, flax), which the torch modules never use; when JAX is missing, the torch modules are
    imported under a bare package object with the same search path (the files are the installed ones, unchanged).
    Every user of the live package goes through here, so whether it imports never depends on what ran before.
    ``import_module``: the importer to use (the official benchmark passes its own)."""
    try:
        return import_module("recurrentgemma.torch")
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in ("jax", "jaxlib", "flax", "orbax", "optax", "chex"):
            raise
    spec = importlib.util.find_spec("recurrentgemma")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'recurrentgemma'", name="recurrentgemma")
    pkg = types.ModuleType("recurrentgemma")
    pkg.__path__ = list(spec.submodule_search_locations)
    pkg.__version__ = importlib.metadata.version("recurrentgemma")
    sys.modules["recurrentgemma"] = pkg
    return import_module("recurrentgemma.torch")


def _strip(sd: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in sd.items() if k.startswith(prefix)}


def rglru_state_dict(ref: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``recurrentgemma.torch.RGLRU`` state dict -> ``seqzoo.mixers.rglru.RGLRU``."""
    return {
        "a_param": ref["a_param"],
        "input_gate.weight": ref["input_gate.w"],
        "input_gate.bias": ref["input_gate.b"],
        "a_gate.weight": ref["a_gate.w"],
        "a_gate.bias": ref["a_gate.b"],
    }


def recurrent_block_state_dict(ref: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``RecurrentBlock`` -> mixer ``"rglru"`` (``RGLRUBlock``)."""
    out = {f"rglru.{k}": v for k, v in rglru_state_dict(_strip(ref, "rg_lru.")).items()}
    for name in ("linear_x", "linear_y", "linear_out"):
        out[f"{name}.weight"] = ref[f"{name}.weight"]
        out[f"{name}.bias"] = ref[f"{name}.bias"]
    out["conv.weight"] = ref["conv_1d.w"]  # (4, R), row 3 = current token, same as ours
    out["conv.bias"] = ref["conv_1d.b"]
    return out


def local_attention_state_dict(ref: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``LocalAttentionBlock`` -> mixer ``"local_attention"`` (MQA, o_proj with bias)."""
    return {
        "q_proj.weight": ref["proj_q.weight"],
        "k_proj.weight": ref["proj_k.weight"],
        "v_proj.weight": ref["proj_v.weight"],
        "o_proj.weight": ref["proj_final.weight"],
        "o_proj.bias": ref["proj_final.bias"],
    }


def mlp_state_dict(ref: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``MLPBlock`` (``ffw_up.w (2, D, M)``, ``ffw_up.b (2, 1, 1, M)``) -> seqzoo ``MLP`` (gelu_tanh_gated)."""
    w, b = ref["ffw_up.w"], ref["ffw_up.b"].reshape(2, -1)  # (2, D, M), (2, M)
    return {
        "up.weight": w[0].t().contiguous(),
        "up.bias": b[0],  # GeLU branch
        "gate.weight": w[1].t().contiguous(),
        "gate.bias": b[1],  # linear branch
        "down.weight": ref["ffw_down.weight"],
        "down.bias": ref["ffw_down.bias"],
    }


def griffin_state_dict(ref: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """``recurrentgemma.torch.Griffin`` -> ``seqzoo.LanguageModel`` (the tied head is ``embed.weight``)."""
    out = {"embed.weight": ref["embedder.input_embedding"], "norm.weight": 1.0 + ref["final_norm.scale"]}
    out["lm_head.weight"] = out["embed.weight"]
    for i in range(n_layers):
        blk = _strip(ref, f"blocks.{i}.")
        out[f"blocks.{i}.norm1.weight"] = 1.0 + blk["temporal_pre_norm.scale"]
        out[f"blocks.{i}.norm2.weight"] = 1.0 + blk["channel_pre_norm.scale"]
        if any(k.startswith("recurrent_block.") for k in blk):
            mixer = recurrent_block_state_dict(_strip(blk, "recurrent_block."))
        else:
            mixer = local_attention_state_dict(_strip(blk, "attention_block."))
        out.update({f"blocks.{i}.mixer.{k}": v for k, v in mixer.items()})
        out.update({f"blocks.{i}.mlp.{k}": v for k, v in mlp_state_dict(_strip(blk, "mlp_block.")).items()})
    return out


def model_config_from_griffin(cfg: dict[str, Any]) -> ModelConfig:
    """A ``GriffinConfig`` (as a dict, block types by name) -> the equivalent ``ModelConfig``."""
    width, heads = cfg["width"], cfg["num_heads"]
    types = [str(t).split(".")[-1].upper() for t in cfg["block_types"]]
    n_layers = cfg.get("num_layers", len(types))
    names = {"RECURRENT": "rglru", "ATTENTION": "local_attention"}
    if any(t not in names for t in types):
        raise InputError(f"block_types must be RECURRENT / ATTENTION, got {types}")
    config = griffin_config(
        "griffin",
        cfg["vocab_size"],
        width,
        cfg.get("lru_width") or width,
        n_layers,
        heads,
        head_dim=width // heads,
        n_blocks=heads,
        window=cfg["attention_window_size"],
        mlp_hidden=cfg["mlp_expanded_width"],
        embed_scale=bf16_sqrt(width) if cfg.get("embeddings_scale_by_sqrt_dim", True) else None,
        logit_softcap=cfg.get("logits_soft_cap") or None,
    )
    return config.replace(pattern=[names[t] for t in types])


# --------------------------------------------------------------------------- caches
def rglru_state_from_reference(conv1d_state: torch.Tensor, rg_lru_state: torch.Tensor) -> RGLRUState:
    return RGLRUState(conv=conv1d_state, h=rg_lru_state)


def ring_from_linear(cache: KVCache, window: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Our linear ``KVCache`` (last ≤ W keys, oldest first) -> the reference's ring ``(keys, values, num_tokens)``.

    The reference places the key at document position q in slot ``q mod W`` and counts ``num_tokens`` as the
    document position of the next token (``segment_pos[-1] + 1``); empty slots are zero.
    """
    B, S = cache.k.shape[:2]
    if cache.seg is not None:
        seg = cache.seg
    else:
        seg = (cache.pos[:, None] - S + torch.arange(S, device=cache.k.device)).long()  # (B, S)
    keys = cache.k.new_zeros(B, window, *cache.k.shape[2:])
    values = cache.v.new_zeros(B, window, *cache.v.shape[2:])
    slot = seg % window  # (B, S)
    for b in range(B):
        keys[b, slot[b]] = cache.k[b]
        values[b, slot[b]] = cache.v[b]
    return keys, values, seg[:, -1] + 1
