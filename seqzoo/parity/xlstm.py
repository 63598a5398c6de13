"""Weight, config and state maps from NX-AI's official ``xlstm`` package (v2.0.6) to seqzoo (docs/xlstm.md, "Parity").

Used by tests/test_xlstm_parity.py against stored fixtures (``fixtures/xlstm`` under ``tests/conftest.py``'s ``shared_dir()``; no install needed) and, when ``xlstm`` is
installed, against the live package at other configurations (``pytest -m parity``).

NeurIPS layers (``xlstm.mLSTMLayer`` / ``xlstm.sLSTMLayer``), official name -> seqzoo mixer name:

| official (mLSTMLayer)                       | seqzoo ``MLSTM``            | transform                                   |
|---------------------------------------------|-----------------------------|---------------------------------------------|
| ``proj_up.weight (2E, D)``                  | ``proj_up.weight``          | as is; rows [0:E] x_m branch, [E:2E] z      |
| ``conv1d.conv.weight (E, 1, k)``, ``.bias`` | ``conv_weight (E, k)``, ``conv_bias`` | squeeze the channel-in axis       |
| ``{q,k,v}_proj.weight (E/bs, bs, bs)``      | ``{q,k,v}_proj``            | as is: (block, out, in)                     |
| ``mlstm_cell.{igate,fgate}.{weight,bias}``  | ``{igate,fgate}.{weight,bias}`` | as is (Linear(3E -> H))                 |
| ``mlstm_cell.outnorm.weight (E)``           | ``outnorm_weight``          | 1 + theirs (their norms store w - 1)        |
| ``learnable_skip (E)``                      | ``skip``                    | as is                                       |
| ``proj_down.weight (D, E)``                 | ``proj_down.weight``        | as is                                       |

| official (sLSTMLayer)                       | seqzoo ``SLSTM``            | transform                                   |
|---------------------------------------------|-----------------------------|---------------------------------------------|
| ``conv1d.conv.weight``, ``.bias``           | ``conv_weight``, ``conv_bias`` | squeeze                                  |
| ``fgate.weight (H, d, d)``                  | ``W_i``                     | **names swapped**: their fgate makes i      |
| ``igate.weight``                            | ``W_f``                     | **names swapped**: their igate makes f      |
| ``zgate.weight``, ``ogate.weight``          | ``W_z``, ``W_o``            | as is: (head, out, in)                      |
| ``slstm_cell._recurrent_kernel_ (H, 4d, d)`` | ``R (H, d_in, 4, d_out)``  | vanilla raw: raw[h, g*d + l, j] = R[h, j, g, l] |
| ``slstm_cell._bias_ (4 H d)``               | ``bias (H, 4, d)``          | vanilla raw is gate-major (4, H, d)         |
| ``group_norm.weight (D)``                   | ``norm_weight``             | 1 + theirs                                  |

LM (``xLSTMLMModel``), with ``S = xlstm_block_stack.blocks.{i}.``: ``token_embedding`` -> ``embed``, ``lm_head`` ->
``lm_head``, ``S.xlstm_norm`` / ``S.ffn_norm`` / ``xlstm_block_stack.post_blocks_norm`` -> ``blocks.i.norm1`` /
``blocks.i.norm2`` / ``norm`` (1 + theirs), ``S.xlstm.*`` -> ``blocks.i.mixer.*`` (tables above), ``S.ffn.proj_up``
rows [0:U] (GeLU branch) / [U:2U] -> ``blocks.i.mlp.up`` / ``blocks.i.mlp.gate``, ``S.ffn.proj_down`` -> ``mlp.down``.

7B (``xlstm_large.model.xLSTMLarge``), every weight as stored (no +1), ``P = backbone.blocks.{i}.``: ``embedding`` ->
``embed``; ``P.norm_mlstm`` / ``P.norm_ffn`` / ``backbone.out_norm`` -> ``norm1`` / ``norm2`` / ``norm``;
``P.mlstm_layer.{q,k,v}`` -> ``mixer.{q,k,v}``, ``ogate_preact`` -> ``mixer.ogate``, ``{i,f}gate_preact`` ->
``mixer.{i,f}gate``, ``multihead_norm.weight`` -> ``mixer.outnorm_weight``, ``out_proj`` -> ``mixer.out_proj``;
``P.ffn.proj_up_gate`` (SiLU branch) / ``proj_up`` / ``proj_down`` -> ``mlp.up`` / ``mlp.gate`` / ``mlp.down``;
``lm_head`` -> ``lm_head``. The fused layout (``qkv_opreact`` rows [q; k; v; o], ``ifgate_preact`` [i; f],
``ffn.proj_up_gate_z`` [gate; up]) is split first.

States: NeurIPS scales k by 1/sqrt(DH), we scale q, so ``C_ours = sqrt(DH) C_neurips``, ``n_ours = sqrt(DH) n_neurips``,
m equal; the NeurIPS ``step()`` conv buffer holds the last 4 inputs, ours the last 3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..mixers.mlstm import MLSTMState
from ..mixers.slstm import SLSTMState
from ..models.config import ModelConfig
from ..models.presets.xlstm import xlstm7b_config, xlstm_config
from .fixtures import load_fixture as read_fixture


# ------------------------------------------------------------------------------------------------ fixtures
def load_fixture(path: str | Path) -> dict[str, Any]:
    """``<case>.safetensors`` -> ``{"official": state_dict, "input": {}, "output": {}, "state": {}, "inter": {},
    "view": {}, "fused": {}, "meta": json}`` (keys split at the first ':')."""
    return read_fixture(path, extra_kinds=("fused",))


# ------------------------------------------------------------------------------------------------- layers
def slstm_R_from_vanilla(raw: torch.Tensor) -> torch.Tensor:
    """Vanilla ``_recurrent_kernel_ (H, 4d, d)`` -> ``R (H, d_in, 4, d_out)`` with raw[h, g*d+l, j] = R[h, j, g, l]."""
    H, four_d, d = raw.shape
    return raw.reshape(H, 4, d, d).permute(0, 3, 1, 2).contiguous()  # (H, g, l, j) -> (H, j, g, l)


def slstm_bias_from_vanilla(raw: torch.Tensor, H: int) -> torch.Tensor:
    """Vanilla gate-major ``_bias_ (4*H*d)`` -> ``(H, 4, d)``."""
    return raw.reshape(4, H, -1).transpose(0, 1).contiguous()


def mlstm_layer_state_dict(sd: dict[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    """Official ``mLSTMLayer`` state_dict (keys under ``prefix``) -> seqzoo ``MLSTM`` (variant "neurips")."""
    p = prefix
    return {
        "proj_up.weight": sd[p + "proj_up.weight"],
        "conv_weight": sd[p + "conv1d.conv.weight"][:, 0, :],
        "conv_bias": sd[p + "conv1d.conv.bias"],
        "q_proj": sd[p + "q_proj.weight"],
        "k_proj": sd[p + "k_proj.weight"],
        "v_proj": sd[p + "v_proj.weight"],
        "igate.weight": sd[p + "mlstm_cell.igate.weight"],
        "igate.bias": sd[p + "mlstm_cell.igate.bias"],
        "fgate.weight": sd[p + "mlstm_cell.fgate.weight"],
        "fgate.bias": sd[p + "mlstm_cell.fgate.bias"],
        "outnorm_weight": 1.0 + sd[p + "mlstm_cell.outnorm.weight"],
        "skip": sd[p + "learnable_skip"],
        "proj_down.weight": sd[p + "proj_down.weight"],
    }


def slstm_layer_state_dict(
    sd: dict[str, torch.Tensor],
    num_heads: int,
    prefix: str = "",
    R: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Official ``sLSTMLayer`` state_dict -> seqzoo ``SLSTM``. ``R``/``bias`` may be given in the backend-independent
    view (the cell's ``recurrent_kernel`` / ``bias`` properties; they are ``ParameterProxy`` objects, read them with
    ``.clone()``: their ``.detach()`` is forwarded to the raw tensor); otherwise the vanilla raw layout is converted."""
    p = prefix
    if R is None:
        R = slstm_R_from_vanilla(sd[p + "slstm_cell._recurrent_kernel_"])
    if bias is None:
        bias = slstm_bias_from_vanilla(sd[p + "slstm_cell._bias_"], num_heads)
    return {
        "conv_weight": sd[p + "conv1d.conv.weight"][:, 0, :],
        "conv_bias": sd[p + "conv1d.conv.bias"],
        "W_i": sd[p + "fgate.weight"],  # swapped names: the official layer computes i from `fgate`
        "W_f": sd[p + "igate.weight"],  # ... and f from `igate`
        "W_z": sd[p + "zgate.weight"],
        "W_o": sd[p + "ogate.weight"],
        "R": R,
        "bias": bias,
        "norm_weight": 1.0 + sd[p + "group_norm.weight"],
    }


# ------------------------------------------------------------------------------------------------- models
def lm_config_from_official(cfg: dict[str, Any]) -> ModelConfig:
    """A dumped ``xLSTMLMModelConfig`` (fixture JSON ``config``, or ``dataclasses.asdict``) -> seqzoo config."""
    m = cfg["mlstm_block"]["mlstm"]
    s = cfg["slstm_block"]["slstm"]
    ff = cfg["slstm_block"]["feedforward"]
    config = xlstm_config(
        cfg["embedding_dim"],
        cfg["num_blocks"],
        cfg["slstm_at"],
        vocab_size=cfg["vocab_size"],
        mlstm_n_heads=m["num_heads"],
        slstm_n_heads=s["num_heads"],
        ffn_factor=ff["proj_factor"],
        conv_size=m["conv1d_kernel_size"],
        proj_factor=m["proj_factor"],
        qkv_blocksize=m["qkv_proj_blocksize"],
    )
    if cfg.get("tie_weights"):
        config = config.replace(tie_embeddings=True)
    return config


def lm_state_dict(sd: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Official ``xLSTMLMModel`` state_dict -> seqzoo ``LanguageModel`` (vanilla sLSTM backend layout)."""
    out = {
        "embed.weight": sd["token_embedding.weight"],
        "norm.weight": 1.0 + sd["xlstm_block_stack.post_blocks_norm.weight"],
    }
    if not config.tie_embeddings:
        out["lm_head.weight"] = sd["lm_head.weight"]
    slstm_n_heads = config.mixer_kwargs["slstm"]["n_heads"]
    for i, kind in enumerate(config.layer_mixers()):
        S = f"xlstm_block_stack.blocks.{i}."
        out[f"blocks.{i}.norm1.weight"] = 1.0 + sd[S + "xlstm_norm.weight"]
        layer = (
            mlstm_layer_state_dict(sd, S + "xlstm.")
            if kind == "mlstm"
            else slstm_layer_state_dict(sd, slstm_n_heads, S + "xlstm.")
        )
        out.update({f"blocks.{i}.mixer.{k}": v for k, v in layer.items()})
        if kind == "slstm":
            up = sd[S + "ffn.proj_up.weight"]
            U = up.shape[0] // 2
            out[f"blocks.{i}.norm2.weight"] = 1.0 + sd[S + "ffn_norm.weight"]
            out[f"blocks.{i}.mlp.up.weight"] = up[:U]  # GeLU branch
            out[f"blocks.{i}.mlp.gate.weight"] = up[U:]
            out[f"blocks.{i}.mlp.down.weight"] = sd[S + "ffn.proj_down.weight"]
    return out


def large_config_from_official(cfg: dict[str, Any]) -> ModelConfig:
    """A dumped ``xLSTMLargeConfig`` -> seqzoo 7B-style config."""
    return xlstm7b_config(
        d_model=cfg["embedding_dim"],
        n_layers=cfg["num_blocks"],
        n_heads=cfg["num_heads"],
        vocab_size=cfg["vocab_size"],
        chunk_size=cfg["chunk_size"],
        ffn_factor=cfg["ffn_proj_factor"],
        qk_dim_factor=cfg["qk_dim_factor"],
        v_dim_factor=cfg["v_dim_factor"],
        gate_soft_cap=cfg["gate_soft_cap"],
        logit_soft_cap=cfg["output_logit_soft_cap"],
    )


def _unfuse(sd: dict[str, torch.Tensor], n_layers: int) -> dict[str, torch.Tensor]:
    """Split the official fused layout (``weight_mode="fused"``) into the single layout."""
    sd = dict(sd)
    for i in range(n_layers):
        P = f"backbone.blocks.{i}."
        key = P + "mlstm_layer.qkv_opreact.weight"
        if key in sd:
            w = sd.pop(key)
            D = w.shape[1]
            dqk = (w.shape[0] - 2 * D) // 2  # rows [q (dqk); k (dqk); v (D); o (D)] for v_dim_factor 1
            dv = (w.shape[0] - 2 * dqk) // 2
            q, k, v, o = w.split([dqk, dqk, dv, dv], 0)
            sd.update(
                {
                    P + "mlstm_layer.q.weight": q,
                    P + "mlstm_layer.k.weight": k,
                    P + "mlstm_layer.v.weight": v,
                    P + "mlstm_layer.ogate_preact.weight": o,
                }
            )
        for kind in ("weight", "bias"):
            key = P + f"mlstm_layer.ifgate_preact.{kind}"
            if key in sd:
                ig, fg = sd.pop(key).chunk(2, 0)
                sd[P + f"mlstm_layer.igate_preact.{kind}"], sd[P + f"mlstm_layer.fgate_preact.{kind}"] = ig, fg
        key = P + "ffn.proj_up_gate_z.weight"
        if key in sd:
            g, u = sd.pop(key).chunk(2, 0)
            sd[P + "ffn.proj_up_gate.weight"], sd[P + "ffn.proj_up.weight"] = g, u
    return sd


def large_state_dict(sd: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Official ``xLSTMLarge`` state_dict (single or fused layout) -> seqzoo ``LanguageModel``."""
    sd = _unfuse(sd, config.n_layers)
    out = {
        "embed.weight": sd["embedding.weight"],
        "norm.weight": sd["backbone.out_norm.weight"],
        "lm_head.weight": sd["lm_head.weight"],
    }
    names = {
        "q": "q",
        "k": "k",
        "v": "v",
        "ogate": "ogate_preact",
        "igate": "igate_preact",
        "fgate": "fgate_preact",
        "out_proj": "out_proj",
    }
    for i in range(config.n_layers):
        P, Q = f"backbone.blocks.{i}.", f"blocks.{i}."
        out[Q + "norm1.weight"] = sd[P + "norm_mlstm.weight"]
        out[Q + "norm2.weight"] = sd[P + "norm_ffn.weight"]
        for ours, theirs in names.items():
            for kind in ("weight", "bias"):
                key = P + f"mlstm_layer.{theirs}.{kind}"
                if key in sd:
                    out[Q + f"mixer.{ours}.{kind}"] = sd[key]
        out[Q + "mixer.outnorm_weight"] = sd[P + "mlstm_layer.multihead_norm.weight"]
        out[Q + "mlp.up.weight"] = sd[P + "ffn.proj_up_gate.weight"]  # SiLU branch
        out[Q + "mlp.gate.weight"] = sd[P + "ffn.proj_up.weight"]
        out[Q + "mlp.down.weight"] = sd[P + "ffn.proj_down.weight"]
    return out


# ------------------------------------------------------------------------------------------------- states
def mlstm_state_to_neurips(state: MLSTMState) -> dict[str, torch.Tensor]:
    """Our q-scaled state -> the NeurIPS k-scaled shapes: ``C (B,H,K,K)/sqrt(K)``, ``n (B,H,K,1)/sqrt(K)``,
    ``m (B,H,1,1)``; the conv buffer stays ours (last k-1 inputs)."""
    K = state.C.shape[-2]
    return {
        "C": state.C / K**0.5,
        "n": (state.n / K**0.5)[..., None],
        "m": state.m[..., None, None],
        "conv": state.conv,
    }


def mlstm_state_from_neurips(C, n, m, conv) -> MLSTMState:
    """NeurIPS ``step()`` state (conv buffer of the last 4 inputs incl. the current) -> ``MLSTMState``."""
    K = C.shape[-2]
    return MLSTMState(C * K**0.5, n[..., 0] * K**0.5, m[..., 0, 0], conv[:, 1:])


def slstm_state_from_official(stacked: torch.Tensor, conv: torch.Tensor) -> SLSTMState:
    """``[h, c, n, m]`` stacked ``(4, B, D)`` and a conv buffer of 3 (or 4, step API) inputs -> ``SLSTMState``."""
    h, c, n, m = stacked.unbind(0)
    return SLSTMState(h, c, n, m, conv[:, -3:])
