"""transformers' ``xLSTMForCausalLM`` (model_type ``xlstm``, the xLSTM-7B architecture) <-> seqzoo 7B-style stack.

xLSTM 7B: Beck et al., arXiv:2503.13427; the mLSTM cell: arXiv:2405.04517. The official ``xlstm`` package's weights
go through ``seqzoo/parity/xlstm.py``; this file maps the transformers layout
(``transformers/models/xlstm/modeling_xlstm.py``), ``P = backbone.blocks.{i}.``, ``B = blocks.{i}.``:

| transformers                                             | seqzoo                                          |
|----------------------------------------------------------|-------------------------------------------------|
| ``backbone.embeddings.weight``                           | ``embed.weight``                                |
| ``P.norm_mlstm`` / ``P.norm_ffn`` / ``backbone.out_norm`` | ``B.norm1`` / ``B.norm2`` / ``norm`` (as stored: plain RMSNorm weights) |
| ``P.mlstm_layer.{q,k,v}``, ``ogate_preact``, ``{i,f}gate_preact``, ``out_proj`` | ``B.mixer.{q,k,v}``, ``ogate``, ``{i,f}gate``, ``out_proj`` |
| ``P.mlstm_layer.multihead_norm.weight``                  | ``B.mixer.outnorm_weight``                      |
| ``P.ffn.proj_up_gate`` (SiLU branch) / ``proj_up`` / ``proj_down`` | ``B.mlp.up`` / ``B.mlp.gate`` / ``B.mlp.down`` |
| ``lm_head.weight``                                       | ``lm_head.weight`` (absent when tied)           |

``weight_mode="fused"`` checkpoints (``qkv_opreact`` rows [q; k; v; o], ``ifgate_preact`` [i; f],
``ffn.proj_up_gate_z`` [gate; up]) are split on the way in; the way out always writes ``"single"``.

Settings that only choose kernels or precision (``chunkwise_kernel``, ``sequence_kernel``, ``step_kernel``,
``mode``, ``autocast_kernel_dtype``, ``inference_state_dtype``, ``max_inference_chunksize``,
``norm_reduction_force_float32``, ``return_last_states``) do not change the function and are not mapped;
``chunk_size`` becomes the mixer's chunk size. transformers applies ``out_norm`` whatever ``add_out_norm`` says,
and so does the converted model. ``use_bias=True`` has no seqzoo equivalent and is refused.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..errors import require
from ..models.config import ModelConfig
from ..models.presets.xlstm import xlstm7b_config
from .plan import Rule

MODEL_TYPE = "xlstm"
ARCHITECTURE = "xLSTMForCausalLM"
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def round_up(x: float, multiple: int) -> int:
    """transformers' ``round_up_to_next_multiple_of`` (floor((x + m - 1) / m) * m on a float x)."""
    return int(((x + multiple - 1) // multiple) * multiple)


def _dims(cfg: dict[str, Any]) -> tuple[int, int, int, int]:
    """(hidden, heads, q/k width, v width) as transformers' ``xLSTMLayer`` computes them (``int(hidden * factor)``)."""
    d, H = int(cfg.get("hidden_size") or cfg["embedding_dim"]), int(cfg["num_heads"])
    dqk, dv = int(d * cfg.get("qk_dim_factor", 0.5)), int(d * cfg.get("v_dim_factor", 1.0))
    return d, H, dqk, dv


def blocks_built(cfg: dict[str, Any]) -> int:
    """How many blocks transformers' ``xLSTMModel`` builds: ``num_blocks``, else ``num_hidden_layers``. The two can
    differ (``xLSTMConfig(num_blocks=2)`` keeps its default ``num_hidden_layers=32``, which then only sizes the
    cache's per-layer states); the module list is ``num_blocks`` long."""
    nb = cfg.get("num_blocks")
    n = int(nb if nb is not None else cfg["num_hidden_layers"])
    require(n > 0, f"xlstm: num_blocks / num_hidden_layers must be a positive int, got {n}")
    return n


def config_from_hf(cfg: dict[str, Any]) -> ModelConfig:
    """An ``xLSTMConfig`` dict (config.json) -> the ``ModelConfig`` that computes the same function."""
    require(cfg.get("model_type") == MODEL_TYPE, f"config.json: model_type must be {MODEL_TYPE!r}")
    require(not cfg.get("use_bias", False), "xlstm: use_bias=True is not supported (seqzoo's 7B layer has no biases)")
    d, H, dqk, dv = _dims(cfg)
    emb = cfg.get("embedding_dim")
    require(emb in (None, d), f"xlstm: embedding_dim={emb} must equal hidden_size={d}")
    n_layers = blocks_built(cfg)
    qf, vf = float(cfg.get("qk_dim_factor", 0.5)), float(cfg.get("v_dim_factor", 1.0))
    # seqzoo rounds d * factor, transformers truncates: refuse the factors where the two disagree
    require(round(d * qf) == dqk and dqk > 0, f"xlstm: hidden_size * qk_dim_factor = {d * qf} must be a positive int")
    require(round(d * vf) == dv and dv > 0, f"xlstm: hidden_size * v_dim_factor = {d * vf} must be a positive int")
    require(dqk % H == 0 and dv % H == 0, f"xlstm: num_heads={H} must divide the q/k width {dqk} and v width {dv}")
    mode = cfg.get("weight_mode", "single")
    require(mode in ("single", "fused"), f"xlstm: weight_mode={mode!r} is not supported (single / fused)")
    hidden = round_up(d * float(cfg.get("ffn_proj_factor", 2.667)), int(cfg.get("ffn_round_up_to_multiple_of", 64)))
    gate_cap, logit_cap = cfg.get("gate_soft_cap", 15.0), cfg.get("output_logit_soft_cap", 30.0)
    config = xlstm7b_config(
        d_model=d,
        n_layers=n_layers,
        n_heads=H,
        vocab_size=int(cfg["vocab_size"]),
        chunk_size=int(cfg.get("chunk_size", 64)),
        qk_dim_factor=qf,
        v_dim_factor=vf,
        gate_soft_cap=None if gate_cap is None else float(gate_cap),
        logit_soft_cap=None if logit_cap is None else float(logit_cap),
    )
    norm_eps = float(cfg.get("norm_eps", 1e-6))
    mk = {"mlstm": {**config.mixer_kwargs["mlstm"], "eps": float(cfg.get("eps", 1e-6)), "norm_eps": norm_eps}}
    extra = {
        **config.extra,
        "transformers": {
            **{k: cfg[k] for k in TOKEN_IDS if k in cfg},
            "ffn_proj_factor": cfg.get("ffn_proj_factor", 2.667),
            "ffn_round_up_to_multiple_of": cfg.get("ffn_round_up_to_multiple_of", 64),
        },
    }
    return config.replace(
        mixer_kwargs=mk,
        block_kwargs={"mlstm": {"mlp": "swiglu", "mlp_hidden": hidden}},
        norm_eps=norm_eps,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        extra=extra,
    )


def _ffn(d: int, hidden: int, keep: dict[str, Any]) -> tuple[float, int]:
    """(ffn_proj_factor, ffn_round_up_to_multiple_of) that make transformers build ``hidden``."""
    cands = [(keep.get("ffn_proj_factor"), keep.get("ffn_round_up_to_multiple_of"))]
    cands += [(hidden / d, m) for m in (64, 32, 16, 8, 4, 2, 1)]
    for factor, multiple in cands:
        if factor is not None and multiple and round_up(d * factor, multiple) == hidden:
            return factor, multiple
    raise AssertionError(f"xlstm: no ffn_proj_factor reproduces the FFN width {hidden}")  # hidden/d with m=1 does


def config_to_hf(config: ModelConfig) -> dict[str, Any]:
    """A 7B-style ``ModelConfig`` -> ``xLSTMConfig`` fields; refuses what transformers cannot express."""
    mixers = set(config.layer_mixers())
    require(mixers == {"mlstm"}, f"xlstm: transformers' xLSTM is mLSTM-only, this model uses {sorted(mixers)}")
    mk = dict(config.mixer_kwargs.get("mlstm", {}))
    require(mk.get("variant") == "7b", "xlstm: only the 7B-style mLSTM layer (variant '7b') maps to transformers")
    require(mk.get("forget_gate", "sigmoid") == "sigmoid", "xlstm: transformers' forget gate is the sigmoid one")
    require(config.block == "residual", f"xlstm: block {config.block!r} is not supported (residual)")
    for key, want in (("norm", "rmsnorm"), ("mlp", "swiglu"), ("mlp_bias", False)):
        got = config.block_setting("mlstm", key)
        require(got == want, f"xlstm: {key}={got!r}, transformers needs {want!r}")
    require((config.final_norm or config.norm) == "rmsnorm", "xlstm: the final norm must be 'rmsnorm'")
    require(
        config.embed_scale is None, "xlstm: transformers' xLSTM does not scale embeddings (embed_scale must be None)"
    )
    require(config.dropout == 0.0 and mk.get("dropout", 0.0) == 0.0, "xlstm: dropout must be 0")
    norm_eps = mk.get("norm_eps", 1e-6)
    require(norm_eps == config.norm_eps, f"xlstm: the head norm eps {norm_eps} must equal norm_eps {config.norm_eps}")
    d, H = config.d_model, mk.get("n_heads", 4)
    hidden = config.block_setting("mlstm", "mlp_hidden") or round(config.block_setting("mlstm", "mlp_ratio") * d)
    require(
        mk.get("gate_soft_cap", 15.0) is not None and config.logit_softcap is not None,
        "xlstm: transformers' xLSTMConfig needs numbers for gate_soft_cap and output_logit_soft_cap (None refused)",
    )
    keep = dict((config.extra or {}).get("transformers", {}))
    factor, multiple = _ffn(d, hidden, keep)
    out = {
        "model_type": MODEL_TYPE,
        "architectures": [ARCHITECTURE],
        "vocab_size": config.vocab_size,
        "hidden_size": d,
        "embedding_dim": d,
        "num_hidden_layers": config.n_layers,
        "num_blocks": config.n_layers,
        "num_heads": H,
        "use_bias": False,
        "add_out_norm": True,
        "norm_eps": config.norm_eps,
        "qk_dim_factor": mk.get("qk_dim_factor", 0.5),
        "v_dim_factor": mk.get("v_dim_factor", 1.0),
        "chunk_size": mk.get("chunk_size", 64),
        "eps": mk.get("eps", 1e-6),
        "ffn_proj_factor": factor,
        "ffn_round_up_to_multiple_of": multiple,
        "gate_soft_cap": mk.get("gate_soft_cap", 15.0),
        "output_logit_soft_cap": config.logit_softcap,
        "weight_mode": "single",
        "tie_word_embeddings": config.tie_embeddings,
    }
    dqk, dv = _dims(out)[2:]
    require(
        round(d * out["qk_dim_factor"]) == dqk and round(d * out["v_dim_factor"]) == dv,
        "xlstm: d_model * qk_dim_factor and d_model * v_dim_factor must be ints (transformers truncates them)",
    )
    if dqk % 64 or dv % 64:
        warnings.warn(
            f"xlstm: transformers' xLSTMCache sizes its states with the q/k and v widths rounded up to 64 "
            f"(this model: {dqk} and {dv}); transformers runs it only with use_cache=False (no generate)",
            stacklevel=3,
        )
    out.update({k: v for k, v in keep.items() if k in TOKEN_IDS})
    return out


# ------------------------------------------------------------------------------------------------ weights
_LAYER = {"q": "q", "k": "k", "v": "v", "ogate": "ogate_preact", "out_proj": "out_proj"}
_GATES = {"igate": "igate_preact", "fgate": "fgate_preact"}
_FFN = {"up": "proj_up_gate", "gate": "proj_up", "down": "proj_down"}


def _rows(start: int, stop: int):
    def take(w: torch.Tensor) -> torch.Tensor:
        return w[start:stop]

    return take


def rules_from_hf(config: ModelConfig, cfg: dict[str, Any]) -> list[Rule]:
    """Rules building every seqzoo tensor from transformers names (single or fused layout)."""
    d, H, dqk, dv = _dims(cfg)
    fused = cfg.get("weight_mode", "single") == "fused"
    hidden = config.block_setting("mlstm", "mlp_hidden")
    rules = [Rule("embed.weight", ("backbone.embeddings.weight",)), Rule("norm.weight", ("backbone.out_norm.weight",))]
    if not config.tie_embeddings:
        rules.append(Rule("lm_head.weight", ("lm_head.weight",)))
    for i in range(config.n_layers):
        P, B = f"backbone.blocks.{i}.", f"blocks.{i}."
        X, M = P + "mlstm_layer.", B + "mixer."
        rules += [
            Rule(B + "norm1.weight", (P + "norm_mlstm.weight",)),
            Rule(B + "norm2.weight", (P + "norm_ffn.weight",)),
            Rule(M + "outnorm_weight", (X + "multihead_norm.weight",)),
        ]
        if not fused:
            rules += [Rule(M + f"{ours}.weight", (X + f"{theirs}.weight",)) for ours, theirs in _LAYER.items()]
            for ours, theirs in _GATES.items():
                rules += [Rule(M + f"{ours}.{p}", (X + f"{theirs}.{p}",)) for p in ("weight", "bias")]
            rules += [Rule(B + f"mlp.{ours}.weight", (P + f"ffn.{theirs}.weight",)) for ours, theirs in _FFN.items()]
            continue
        qkvo, cuts = X + "qkv_opreact.weight", [0, dqk, 2 * dqk, 2 * dqk + dv, 2 * dqk + 2 * dv]
        for j, ours in enumerate(("q", "k", "v", "ogate")):
            rules.append(Rule(M + f"{ours}.weight", (qkvo,), _rows(cuts[j], cuts[j + 1])))
        rules.append(Rule(M + "out_proj.weight", (X + "out_proj.weight",)))
        for p in ("weight", "bias"):
            rules.append(Rule(M + f"igate.{p}", (X + f"ifgate_preact.{p}",), _rows(0, H)))
            rules.append(Rule(M + f"fgate.{p}", (X + f"ifgate_preact.{p}",), _rows(H, 2 * H)))
        gz = P + "ffn.proj_up_gate_z.weight"
        rules += [
            Rule(B + "mlp.up.weight", (gz,), _rows(0, hidden)),
            Rule(B + "mlp.gate.weight", (gz,), _rows(hidden, 2 * hidden)),
        ]
        rules.append(Rule(B + "mlp.down.weight", (P + "ffn.proj_down.weight",)))
    return rules


def rules_to_hf(config: ModelConfig) -> list[Rule]:
    """The inverse rules (single layout): transformers tensors from seqzoo names, all as stored.

    transformers' ``xLSTMForCausalLM`` never ties its head (it declares no tied weights, whatever
    ``tie_word_embeddings`` says), so a tied seqzoo model writes its embedding a second time as ``lm_head``.
    """
    cfg = config_to_hf(config)
    rules = [Rule(r.srcs[0], (r.dst,)) for r in rules_from_hf(config, cfg)]
    if config.tie_embeddings:
        rules.append(Rule("lm_head.weight", ("embed.weight",)))
    return rules


def resolve_tie(config: ModelConfig, get, keys) -> ModelConfig:
    """``tie_word_embeddings`` is only a claim for transformers' xLSTM: the head it computes with is ``lm_head``.
    Keep the tie only when the stored head is absent or equal to the embedding."""
    if not config.tie_embeddings or "lm_head.weight" not in set(keys):
        return config
    if torch.equal(get("lm_head.weight"), get("backbone.embeddings.weight")):
        return config
    return config.replace(tie_embeddings=False)


def optional_hf_keys(config: ModelConfig) -> set[str]:
    return {"lm_head.weight"} if config.tie_embeddings else set()
