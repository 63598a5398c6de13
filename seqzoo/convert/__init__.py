"""Convert published RecurrentGemma and xLSTM checkpoints (transformers format) to seqzoo models, and back.

    from_transformers(path_or_model)     transformers folder / model, or an official-package model -> LanguageModel
    to_transformers(model_or_path, out)  seqzoo model or folder -> a folder transformers loads with its own class
    convert(src, out)                    folder -> folder in either direction, lazily (``seqzoo convert``)
    from_official(state_dict, cfg, kind) the official ``recurrentgemma`` / ``xlstm`` packages' weights (parity maps)

Weight maps: ``recurrent_gemma.py`` (``RecurrentGemmaForCausalLM``), ``xlstm.py`` (``xLSTMForCausalLM``); the
folder conversions read tensors memory-mapped one at a time and write bounded shards (``safetensors_io.py``).
docs/convert.md has the commands, the memory each published model needs and what was verified.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..errors import InputError, require
from ..models.base import model_kind, saved_model_type
from ..models.config import ModelConfig
from ..models.lm import LanguageModel
from . import recurrent_gemma, xlstm
from .plan import Rule, check_keys, run_plan
from .safetensors_io import DEFAULT_SHARD_BYTES, CheckpointReader, ShardedWriter

FAMILIES = {recurrent_gemma.MODEL_TYPE: recurrent_gemma, xlstm.MODEL_TYPE: xlstm}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
OFFICIAL_KINDS = ("recurrentgemma", "xlstm", "xlstm_large")

__all__ = ["DTYPES", "FAMILIES", "convert", "from_official", "from_transformers", "to_transformers"]


# ------------------------------------------------------------------------------------------------ helpers
def _dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    require(dtype in DTYPES, f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def read_config(folder: str | Path) -> dict[str, Any]:
    folder = Path(folder)
    require(folder.is_dir(), f"{folder} is not a folder (expected config.json + safetensors weights)")
    path = folder / "config.json"
    require(path.is_file(), f"{folder} has no config.json")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InputError(f"{path} is not valid JSON: {e}") from None
    require(isinstance(cfg, dict), f"{path} must hold a JSON object")
    return cfg


def family_of_hf(cfg: dict[str, Any]):
    model_type = cfg.get("model_type")
    if model_type not in FAMILIES:
        raise InputError(
            f"model_type {model_type!r} is not supported: seqzoo converts {sorted(FAMILIES)} checkpoints "
            "(RecurrentGemmaForCausalLM, xLSTMForCausalLM)"
        )
    return FAMILIES[model_type]


def family_of(config: ModelConfig):
    mixers = set(config.layer_mixers())
    if mixers <= {"rglru", "local_attention"}:
        return recurrent_gemma
    if mixers == {"mlstm"}:
        return xlstm
    raise InputError(
        f"this model's mixers {sorted(mixers)} have no transformers class: to_transformers handles Griffin / "
        "RecurrentGemma (rglru + local_attention) and the xLSTM-7B stack (mlstm variant '7b')"
    )


def seqzoo_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter shape of ``LanguageModel(config)``, built on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        model = LanguageModel(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _seqzoo_config_json(config: ModelConfig) -> str:
    return (
        json.dumps(
            {"model_type": saved_model_type(LanguageModel.model_type), **config.to_dict()}, indent=2, sort_keys=True
        )
        + "\n"
    )


def _build(config: ModelConfig, state: dict[str, torch.Tensor]) -> LanguageModel:
    """A ``LanguageModel`` holding ``state`` (built on meta, then the tensors assigned: no random init)."""
    with torch.device("meta"):
        model = LanguageModel(config)
    if config.tie_embeddings:
        state = {**state, "lm_head.weight": state["embed.weight"]}
    model.load_state_dict(state, strict=True, assign=True)
    if config.tie_embeddings:
        model.lm_head.weight = model.embed.weight
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise RuntimeError(f"internal: tensors {left} were not loaded")
    return model.eval()


# ------------------------------------------------------------------------------------------------ transformers -> seqzoo
def _hf_plan(cfg: dict[str, Any], get, keys, what: str):
    """Family, seqzoo config and rules for a transformers checkpoint; its tensor names checked against the rules."""
    fam = family_of_hf(cfg)
    keys = list(keys)
    config = fam.config_from_hf(cfg)
    config = fam.resolve_tie(config, get, keys)
    rules = fam.rules_from_hf(config, cfg)
    check_keys(rules, keys, what, optional=fam.optional_hf_keys(config))
    return fam, config, rules


def from_transformers(path_or_model: Any, dtype: str | torch.dtype | None = None) -> LanguageModel:
    """A transformers ``RecurrentGemmaForCausalLM`` / ``xLSTMForCausalLM`` (folder or in-memory model), or an
    official-package model (``recurrentgemma.torch.Griffin``, ``xlstm.xLSTMLMModel``, ``xLSTMLarge``) -> seqzoo.

    Folders are read lazily; the result keeps the checkpoint's dtype unless ``dtype`` is given.
    """
    dt = _dtype(dtype)
    if isinstance(path_or_model, (str, Path)):
        src = Path(path_or_model)
        cfg = read_config(src)
        family_of_hf(cfg)
        reader = CheckpointReader(src)
        get = reader.get
        fam, config, rules = _hf_plan(cfg, get, reader.keys(), str(src))
    elif isinstance(path_or_model, torch.nn.Module) and type(path_or_model).__name__ in _OFFICIAL_CLASSES:
        model = path_or_model
        import dataclasses

        kind = _OFFICIAL_CLASSES[type(model).__name__]
        return from_official(model.state_dict(), dataclasses.asdict(model.config), kind, dtype=dt)
    elif isinstance(path_or_model, torch.nn.Module) and hasattr(path_or_model, "config"):
        cfg = path_or_model.config.to_dict()
        sd = path_or_model.state_dict()
        get = sd.__getitem__
        fam, config, rules = _hf_plan(cfg, get, sd.keys(), type(path_or_model).__name__)
    else:
        raise InputError(
            f"path_or_model must be a checkpoint folder or a transformers / official model, got {type(path_or_model).__name__}"
        )
    state: dict[str, torch.Tensor] = {}
    run_plan(rules, get, state.__setitem__, cfg["model_type"], dst_shapes=seqzoo_shapes(config), dtype=dt)
    return _build(config, state)


_OFFICIAL_CLASSES = {"Griffin": "recurrentgemma", "xLSTMLMModel": "xlstm", "xLSTMLarge": "xlstm_large"}


def from_official(
    state_dict: dict[str, torch.Tensor], config: dict[str, Any], kind: str, dtype: str | torch.dtype | None = None
) -> LanguageModel:
    """The official packages' weights -> seqzoo, through the parity maps (``seqzoo/parity/``).

    ``kind``: ``"recurrentgemma"`` (``recurrentgemma.torch.Griffin``, ``config`` = its ``GriffinConfig`` as a
    dict), ``"xlstm"`` (``xlstm.xLSTMLMModel``, ``xLSTMLMModelConfig``) or ``"xlstm_large"``
    (``xlstm.xlstm_large.model.xLSTMLarge``, ``xLSTMLargeConfig``; single or fused layout).
    """
    require(kind in OFFICIAL_KINDS, f"kind must be one of {OFFICIAL_KINDS}, got {kind!r}")
    if kind == "recurrentgemma":
        from ..parity.recurrentgemma import griffin_state_dict, model_config_from_griffin

        cfg = model_config_from_griffin(config)
        sd = griffin_state_dict(state_dict, cfg.n_layers)
    elif kind == "xlstm":
        from ..parity.xlstm import lm_config_from_official, lm_state_dict

        cfg = lm_config_from_official(config)
        sd = lm_state_dict(state_dict, cfg)
    else:
        from ..parity.xlstm import large_config_from_official, large_state_dict

        cfg = large_config_from_official(config)
        sd = large_state_dict(state_dict, cfg)
    shapes = seqzoo_shapes(cfg)
    if cfg.tie_embeddings:
        sd.pop("lm_head.weight", None)  # the parity maps spell the tied head out; _build re-ties it
    rules = [Rule(k, (k,)) for k in shapes if not (cfg.tie_embeddings and k == "lm_head.weight")]
    check_keys(rules, sd.keys(), kind)
    state: dict[str, torch.Tensor] = {}
    run_plan(rules, sd.__getitem__, state.__setitem__, kind, dst_shapes=shapes, dtype=_dtype(dtype))
    return _build(cfg, state)


# ------------------------------------------------------------------------------------------------ seqzoo -> transformers
def to_transformers(
    model_or_path: LanguageModel | str | Path,
    out_dir: str | Path,
    dtype: str | torch.dtype | None = None,
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
    progress: bool = False,
) -> dict[str, Any]:
    """Write a seqzoo Griffin or xLSTM-7B-style model (in memory or a seqzoo folder) as a transformers folder.

    The folder (``config.json`` + ``model.safetensors`` or shards with an index) loads with
    ``RecurrentGemmaForCausalLM`` / ``xLSTMForCausalLM``. Returns the stats of ``convert``.
    """
    if isinstance(model_or_path, (str, Path)):
        return convert(model_or_path, out_dir, dtype=dtype, max_shard_bytes=max_shard_bytes, progress=progress)
    require(isinstance(model_or_path, LanguageModel), "model_or_path must be a seqzoo LanguageModel or a folder")
    sd = model_or_path.state_dict()
    return _write_hf(model_or_path.config, sd.__getitem__, None, out_dir, dtype, max_shard_bytes, progress)


def _write_hf(config, get, keys, out_dir, dtype, max_shard_bytes, progress, reader=None) -> dict[str, Any]:
    fam = family_of(config)
    hf_cfg = fam.config_to_hf(config)
    rules = fam.rules_to_hf(config)
    if keys is not None:
        check_keys(rules, keys, "seqzoo checkpoint", optional={"lm_head.weight"} if config.tie_embeddings else ())
    dt = _dtype(dtype)
    writer = ShardedWriter(out_dir, max_shard_bytes)
    run_plan(rules, get, writer.add, fam.MODEL_TYPE, src_shapes=seqzoo_shapes(config), dtype=dt, progress=progress)
    files = writer.close()
    hf_cfg["dtype"] = str(dt or get("embed.weight").dtype).removeprefix("torch.")
    (Path(out_dir) / "config.json").write_text(json.dumps(hf_cfg, indent=2) + "\n")
    return _stats(out_dir, files, writer, reader)


def _stats(out_dir, files, writer, reader) -> dict[str, Any]:
    return {
        "out": Path(out_dir),
        "files": [Path(f).name for f in files],
        "total_bytes": writer.total_bytes,
        "peak_shard_bytes": writer.peak_pending_bytes,
        "peak_read_bytes": None if reader is None else reader.peak_live_bytes,
        "read_bytes": None if reader is None else reader.bytes_read,
    }


# ------------------------------------------------------------------------------------------------ folder -> folder
def convert(
    src: str | Path,
    out: str | Path,
    dtype: str | torch.dtype | None = None,
    max_shard_bytes: int = DEFAULT_SHARD_BYTES,
    progress: bool = False,
) -> dict[str, Any]:
    """Folder -> folder, direction from ``config.json``'s ``model_type``: ``recurrent_gemma`` / ``xlstm`` become
    seqzoo's format (``config.json`` + ``model.safetensors`` or shards + index), seqzoo ``lm`` becomes transformers'.

    Returns ``{"out", "files", "total_bytes", "peak_shard_bytes", "peak_read_bytes", "read_bytes"}``: the last three
    are the instrumentation that shows memory stays bounded (largest buffered shard, most bytes alive at once).
    """
    src, out = Path(src), Path(out)
    cfg = read_config(src)
    require(src.resolve() != out.resolve(), "--out must differ from the source folder")
    if model_kind(str(cfg.get("model_type"))) == LanguageModel.model_type:  # "seqzoo-lm", or "lm" as written before
        meta = dict(cfg)
        meta.pop("model_type")
        try:
            config = ModelConfig.from_dict(meta)
        except (TypeError, ValueError) as e:
            raise InputError(f"{src}/config.json is not a seqzoo ModelConfig: {e}") from None
        reader = CheckpointReader(src)
        return _write_hf(config, reader.get, reader.keys(), out, dtype, max_shard_bytes, progress, reader)
    family_of_hf(cfg)  # refuse another model type before touching its weights
    reader = CheckpointReader(src)
    fam, config, rules = _hf_plan(cfg, reader.get, reader.keys(), str(src))
    writer = ShardedWriter(out, max_shard_bytes, metadata={"model_type": saved_model_type(LanguageModel.model_type)})
    run_plan(
        rules,
        reader.get,
        writer.add,
        fam.MODEL_TYPE,
        dst_shapes=seqzoo_shapes(config),
        dtype=_dtype(dtype),
        progress=progress,
    )
    files = writer.close()
    (out / "config.json").write_text(_seqzoo_config_json(config))
    return _stats(out, files, writer, reader)
