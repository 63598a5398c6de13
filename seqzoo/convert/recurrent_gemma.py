"""transformers' ``RecurrentGemmaForCausalLM`` (model_type ``recurrent_gemma``) <-> seqzoo Griffin ``LanguageModel``.

RecurrentGemma: Botev et al., arXiv:2404.07839; Griffin: De et al., arXiv:2402.19427 (§2). The official ``recurrentgemma``
package's weights go through ``seqzoo/parity/recurrentgemma.py``; this file maps the transformers layout
(``transformers/models/recurrent_gemma/modeling_recurrent_gemma.py``), ``L = model.layers.{i}.``:

| transformers                                         | seqzoo (``B = blocks.{i}.``)            | transform                 |
|------------------------------------------------------|-----------------------------------------|---------------------------|
| ``model.embed_tokens.weight``                        | ``embed.weight`` (= tied ``lm_head``)   | as is                     |
| ``L.temporal_pre_norm`` / ``L.channel_pre_norm`` / ``model.final_norm`` | ``B.norm1`` / ``B.norm2`` / ``norm`` | γ = 1 + w (theirs stores w) |
| ``L.temporal_block.linear_{x,y,out}``                | ``B.mixer.linear_{x,y,out}``            | as is                     |
| ``L.temporal_block.conv_1d.weight (R, 1, k)``        | ``B.mixer.conv.weight (k, R)``          | ``w[:, 0, :].T``          |
| ``L.temporal_block.rg_lru.recurrent_param``          | ``B.mixer.rglru.a_param``               | as is                     |
| ``L.temporal_block.rg_lru.{input,recurrent}_gate_{weight,bias}`` | ``B.mixer.rglru.{input,a}_gate.{weight,bias}`` | as is ((nb, in, out)) |
| ``L.temporal_block.{q,k,v,o}_proj``                  | ``B.mixer.{q,k,v,o}_proj``              | as is                     |
| ``L.mlp_block.gate_proj`` (GeLU branch) / ``up_proj`` / ``down_proj`` | ``B.mlp.up`` / ``B.mlp.gate`` / ``B.mlp.down`` | as is |
| ``lm_head.weight`` (only when untied)                | ``lm_head.weight``                      | as is                     |

Semantics that differ and are handled here: transformers' sliding window of ``attention_window_size`` keys
*includes* the query (seqzoo ``window`` counts the keys before it, so ``window = attention_window_size - 1``);
its MLP width is ``intermediate_size // 2``; the embedding is scaled by √D rounded to bf16 and logits are soft-capped
(always); the RG-LRU resets at position 0 (seqzoo: ``segment_pos == 0``). Norm weights round-trip exactly
seqzoo -> transformers -> seqzoo for γ ≥ 0.5 (``(γ - 1) + 1 == γ`` in floating point there), but not the other way
for every w (``1 + w`` rounds).
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import InputError, require
from ..models.config import ModelConfig
from ..models.presets.griffin import bf16_sqrt, griffin_config
from .plan import Rule

MODEL_TYPE = "recurrent_gemma"
ARCHITECTURE = "RecurrentGemmaForCausalLM"
# token ids do not change the computation; they are kept in ModelConfig.extra for the way back
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def _rope(cfg: dict[str, Any]) -> tuple[float, float]:
    """(rope_theta, partial_rotary_factor) from a 5.x ``rope_parameters`` dict or the older top-level fields."""
    rp = cfg.get("rope_parameters") or {}
    rope_type = rp.get("rope_type") or (cfg.get("rope_scaling") or {}).get("rope_type") or "default"
    require(
        rope_type == "default",
        f"recurrent_gemma: rope_parameters.rope_type={rope_type!r} is not supported (only 'default')",
    )
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    frac = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.5))
    return float(theta), float(frac)


def config_from_hf(cfg: dict[str, Any]) -> ModelConfig:
    """A ``RecurrentGemmaConfig`` dict (config.json) -> the ``ModelConfig`` that computes the same function."""
    require(cfg.get("model_type") == MODEL_TYPE, f"config.json: model_type must be {MODEL_TYPE!r}")
    act = cfg.get("hidden_activation", "gelu_pytorch_tanh")
    require(
        act == "gelu_pytorch_tanh", f"recurrent_gemma: hidden_activation={act!r} is not supported (gelu_pytorch_tanh)"
    )
    width, heads, n_layers = int(cfg["hidden_size"]), int(cfg["num_attention_heads"]), int(cfg["num_hidden_layers"])
    require(width % heads == 0, f"recurrent_gemma: num_attention_heads={heads} must divide hidden_size={width}")
    lru = int(cfg.get("lru_width") or width)
    require(lru % heads == 0, f"recurrent_gemma: num_attention_heads={heads} must divide lru_width={lru}")
    window = int(cfg.get("attention_window_size", 2048))
    require(window >= 2, f"recurrent_gemma: attention_window_size must be >= 2 (keys incl. the query), got {window}")
    kv = int(cfg.get("num_key_value_heads") or heads)
    cap = cfg.get("logits_soft_cap", 30.0)
    require(
        isinstance(cap, (int, float)) and cap > 0,
        f"recurrent_gemma: logits_soft_cap must be a positive number, got {cap}",
    )
    inter = int(cfg.get("intermediate_size", 3 * width))
    require(inter >= 2, f"recurrent_gemma: intermediate_size must be >= 2, got {inter}")
    types = list(cfg.get("block_types") or ["recurrent", "recurrent", "attention"])
    bad = sorted({t for t in types if t not in ("recurrent", "attention")})
    require(not bad, f"recurrent_gemma: block_types {bad} are not supported (recurrent / attention)")
    theta, frac = _rope(cfg)
    names = {"recurrent": "rglru", "attention": "local_attention"}
    pattern = [names[types[i % len(types)]] for i in range(n_layers)]
    config = griffin_config(
        "griffin",
        int(cfg["vocab_size"]),
        width,
        lru,
        n_layers,
        heads,
        head_dim=width // heads,
        n_blocks=heads,
        window=window - 1,  # transformers' window counts the query itself
        mlp_hidden=inter // 2,
        embed_scale=bf16_sqrt(width),
        logit_softcap=float(cap),
        rope_fraction=frac,
    )
    mk = {k: dict(v) for k, v in config.mixer_kwargs.items()}
    mk["rglru"]["conv_size"] = int(cfg.get("conv1d_width", 4))
    mk["local_attention"].update(n_kv_heads=kv, rope_base=theta, qkv_bias=bool(cfg.get("attention_bias", False)))
    mk = {name: kw for name, kw in mk.items() if name in pattern}  # all "recurrent" (a Hawk): no attention settings
    extra = {"family": "griffin", "transformers": {k: cfg[k] for k in TOKEN_IDS if k in cfg}}
    return config.replace(
        pattern=pattern,
        mixer_kwargs=mk,
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        extra=extra,
    )


def _shared(values: list, what: str, problems: list[str]):
    """The one value every layer has for ``what`` (None when there are none); a problem when they differ."""
    vals = {repr(v) for v in values}
    if len(vals) > 1:
        problems.append(f"every layer must share {what}, got {sorted(vals)}")
    return values[0] if values else None


def config_to_hf(config: ModelConfig) -> dict[str, Any]:
    """A Griffin-style ``ModelConfig`` -> ``RecurrentGemmaConfig`` fields; refuses what transformers cannot express,
    naming every such setting in one ``InputError`` (not one per attempt).

    transformers' RecurrentGemma always multiplies the embeddings by √D rounded to bf16 and always soft-caps the
    logits, so a model without ``embed_scale`` or ``logit_softcap`` (the ``griffin-tiny`` / ``hawk-tiny`` presets) is
    refused: no setting turns the cap off, the scale could be undone only by an untied embedding divided by it (not
    exact in floating point), and writing the two settings anyway would change the function. ``griffin_config(..., embed_scale=bf16_sqrt(d), logit_softcap=30.0)`` builds one
    that converts."""
    problems: list[str] = []

    def need(ok: bool, problem: str) -> None:
        if not ok:
            problems.append(problem)

    mixers = config.layer_mixers()
    bad = sorted(set(mixers) - {"rglru", "local_attention"})
    need(not bad, f"mixers {bad} have no transformers equivalent (rglru / local_attention)")
    need(config.block in ("griffin", "residual"), f"block {config.block!r} is not supported (griffin / residual)")
    for mixer in sorted(set(mixers)):
        for key, want in (("norm", "rmsnorm"), ("mlp", "gelu_tanh_gated"), ("mlp_bias", True)):
            got = config.block_setting(mixer, key)
            need(got == want, f"{key}={got!r} for {mixer} layers, transformers needs {want!r}")
    need((config.final_norm or config.norm) == "rmsnorm", "the final norm must be 'rmsnorm'")
    d = config.d_model
    need(
        config.embed_scale == bf16_sqrt(d),
        f"embed_scale={config.embed_scale}: transformers always scales embeddings by sqrt(d_model) rounded to bf16, "
        f"so embed_scale must be {bf16_sqrt(d)}",
    )
    need(
        config.logit_softcap is not None,
        "logit_softcap=None: transformers always soft-caps the logits, so logit_softcap must be a number (e.g. 30.0)",
    )
    hidden = _shared([config.block_setting(m, "mlp_hidden") for m in sorted(set(mixers))], "mlp_hidden", problems)
    need(hidden is not None, "mlp_hidden must be set")
    rg = dict(config.mixer_kwargs.get("rglru", {}))
    la = dict(config.mixer_kwargs.get("local_attention", {}))
    heads = (la.get("n_heads") if "local_attention" in mixers else None) or rg.get("n_blocks")
    need(heads is not None, "set local_attention.n_heads or rglru.n_blocks (the head count)")
    if heads is not None:
        need(d % heads == 0, f"the head count {heads} must divide d_model={d}")
    lru = rg.get("d_rnn") or d
    if "rglru" in mixers:
        need(rg.get("n_blocks") == heads, f"rglru.n_blocks must equal the head count {heads}")
        need(rg.get("c", 8.0) == 8.0, "rglru.c must be 8 (transformers hard-codes it)")
    if "local_attention" in mixers and heads:
        need(la.get("head_dim", d // heads) == d // heads, "head_dim must be d_model / n_heads")
        need(la.get("out_bias") is True, "local_attention.out_bias must be True")
        need("window" in la, "local_attention.window must be set")
    if problems:
        raise InputError(
            f"recurrent_gemma: this model cannot be written as transformers' {ARCHITECTURE}: " + "; ".join(problems)
        )
    out = {
        "model_type": MODEL_TYPE,
        "architectures": [ARCHITECTURE],
        "vocab_size": config.vocab_size,
        "hidden_size": d,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": heads,
        "lru_width": lru,
        "intermediate_size": 2 * hidden,
        "conv1d_width": rg.get("conv_size", 4),
        "logits_soft_cap": config.logit_softcap,
        "rms_norm_eps": config.norm_eps,
        "hidden_activation": "gelu_pytorch_tanh",
        "block_types": ["recurrent" if m == "rglru" else "attention" for m in mixers],
        "tie_word_embeddings": config.tie_embeddings,
        "attention_window_size": 2048,
        "num_key_value_heads": 1,
        "attention_bias": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    }
    if "local_attention" in mixers:
        out.update(
            attention_window_size=la["window"] + 1,
            num_key_value_heads=la.get("n_kv_heads") or heads,
            attention_bias=bool(la.get("qkv_bias", False)),
        )
        out["rope_parameters"].update(
            rope_theta=float(la.get("rope_base", 10000.0)), partial_rotary_factor=float(la.get("rope_fraction", 1.0))
        )
    out.update((config.extra or {}).get("transformers", {}))
    return out


# ------------------------------------------------------------------------------------------------ weights
def _plus_one(w: torch.Tensor) -> torch.Tensor:
    return 1.0 + w


def _minus_one(g: torch.Tensor) -> torch.Tensor:
    return g - 1.0


def _conv_in(w: torch.Tensor) -> torch.Tensor:
    return w[:, 0, :].t()


def _conv_out(w: torch.Tensor) -> torch.Tensor:
    return w.t()[:, None, :]


def rules_from_hf(config: ModelConfig, cfg: dict[str, Any]) -> list[Rule]:
    """Rules building every seqzoo tensor from transformers names (fwd) — see the module table."""
    qkv_bias = bool(cfg.get("attention_bias", False))
    rules = [
        Rule("embed.weight", ("model.embed_tokens.weight",)),
        Rule("norm.weight", ("model.final_norm.weight",), _plus_one),
    ]
    if not config.tie_embeddings:
        rules.append(Rule("lm_head.weight", ("lm_head.weight",)))
    for i, mixer in enumerate(config.layer_mixers()):
        L, B = f"model.layers.{i}.", f"blocks.{i}."
        T, M = L + "temporal_block.", B + "mixer."
        rules += [
            Rule(B + "norm1.weight", (L + "temporal_pre_norm.weight",), _plus_one),
            Rule(B + "norm2.weight", (L + "channel_pre_norm.weight",), _plus_one),
        ]
        if mixer == "rglru":
            for name in ("linear_x", "linear_y", "linear_out"):
                rules += [Rule(M + f"{name}.{p}", (T + f"{name}.{p}",)) for p in ("weight", "bias")]
            rules += [
                Rule(M + "conv.weight", (T + "conv_1d.weight",), _conv_in),
                Rule(M + "conv.bias", (T + "conv_1d.bias",)),
                Rule(M + "rglru.a_param", (T + "rg_lru.recurrent_param",)),
            ]
            for ours, theirs in (("input_gate", "input_gate"), ("a_gate", "recurrent_gate")):
                rules += [Rule(M + f"rglru.{ours}.{p}", (T + f"rg_lru.{theirs}_{p}",)) for p in ("weight", "bias")]
        else:
            for name in ("q_proj", "k_proj", "v_proj"):
                rules.append(Rule(M + f"{name}.weight", (T + f"{name}.weight",)))
                if qkv_bias:
                    rules.append(Rule(M + f"{name}.bias", (T + f"{name}.bias",)))
            rules += [Rule(M + f"o_proj.{p}", (T + f"o_proj.{p}",)) for p in ("weight", "bias")]
        for ours, theirs in (("up", "gate_proj"), ("gate", "up_proj"), ("down", "down_proj")):
            rules += [Rule(B + f"mlp.{ours}.{p}", (L + f"mlp_block.{theirs}.{p}",)) for p in ("weight", "bias")]
    return rules


def rules_to_hf(config: ModelConfig) -> list[Rule]:
    """The inverse rules: transformers tensors from seqzoo names."""
    inverse = {_plus_one: _minus_one, _conv_in: _conv_out, None: None}
    hf = config_to_hf(config)
    out = []
    for r in rules_from_hf(config, hf):
        require(len(r.srcs) == 1, "internal: RecurrentGemma rules are one-to-one")
        out.append(Rule(r.srcs[0], (r.dst,), inverse[r.fn]))
    return out


def resolve_tie(config: ModelConfig, get, keys) -> ModelConfig:
    """transformers ties RecurrentGemma's head to the embedding whenever ``tie_word_embeddings`` is set."""
    return config


def optional_hf_keys(config: ModelConfig) -> set[str]:
    """Names a transformers checkpoint may or may not hold: the tied head is usually dropped, sometimes kept."""
    return {"lm_head.weight"} if config.tie_embeddings else set()
