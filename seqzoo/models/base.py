"""What the causal LM and the encoder share: the block stack, save/load, optimiser overrides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model, save_model
from torch import nn

from ..blocks import BLOCKS, make_norm
from ..errors import InputError, MissingFileError
from ..mixers.base import collect_optim_overrides
from ..ops.context_parallel import group_rank_size
from .config import ModelConfig, drop_unused_mixer_settings
from .context_parallel import context_parallel_refusal

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"
SAVED_TYPE_PREFIX = "seqzoo-"
"""``config.json`` names a model ``"seqzoo-<kind>"`` (``"seqzoo-lm"``, ``"seqzoo-encoder"``, ``"seqzoo-vision"``):
a ``model_type`` no other library uses, so transformers' ``AutoConfig`` can map it to seqzoo's classes."""


def saved_model_type(kind: str) -> str:
    """The ``model_type`` written into ``config.json`` for a model kind (``"lm"`` -> ``"seqzoo-lm"``)."""
    return SAVED_TYPE_PREFIX + kind


def model_kind(saved: str) -> str:
    """The model kind (a key of ``MODEL_TYPES``) of a ``config.json`` ``model_type``: ``"seqzoo-lm"`` -> ``"lm"``;
    the bare kind that folders written before the prefix hold (``"lm"``) is read as itself."""
    return saved[len(SAVED_TYPE_PREFIX) :] if saved.startswith(SAVED_TYPE_PREFIX) else saved


# ModelConfig fields that only the bidirectional Encoder reads; a causal model refuses them instead of ignoring them.
ENCODER_ONLY_FIELDS = ("max_positions", "type_vocab_size", "embed_norm", "readd_positions", "mlm_transform", "pooler")


class SeqzooModel(nn.Module):
    """Base of ``LanguageModel`` and ``Encoder``: embedding, blocks from the pattern, final norm."""

    model_type = "base"
    causal_stack = True

    def __init__(self, config: ModelConfig):
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise InputError(f"config must be a seqzoo.ModelConfig, got {type(config).__name__}")
        if config.block not in BLOCKS:
            raise InputError(f"unknown block {config.block!r}; registered blocks: {sorted(BLOCKS)}")
        self.config = config
        if self.causal_stack:
            bert_only = [k for k in ENCODER_ONLY_FIELDS if getattr(config, k)]
            if bert_only:
                raise InputError(
                    f"ModelConfig fields {bert_only} are for the bidirectional Encoder only "
                    f"({type(self).__name__} is causal)"
                )
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        nn.init.normal_(self.embed.weight, std=config.embed_init_std)
        causal = None if self.causal_stack else False
        self.blocks = nn.ModuleList(BLOCKS[config.block](config, m, causal) for m in config.layer_mixers())
        self.norm = make_norm(config.final_norm or config.norm, config.d_model, config.norm_eps)

    # ------------------------------------------------------------------ trunk
    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        if not isinstance(input_ids, torch.Tensor) or input_ids.dtype not in (
            torch.long,
            torch.int,
            torch.int16,
            torch.uint8,
        ):
            raise InputError(
                f"input_ids must be an integer tensor of shape (B, T), got {getattr(input_ids, 'dtype', type(input_ids))}"
            )
        if input_ids.dim() != 2:
            raise InputError(f"input_ids must have shape (B, T), got {tuple(input_ids.shape)}")
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= self.config.vocab_size):
            raise InputError(
                f"input_ids must lie in [0, vocab_size={self.config.vocab_size}), got range "
                f"[{int(input_ids.min())}, {int(input_ids.max())}]"
            )
        x = self.embed(input_ids.long())
        if self.config.embed_scale is not None:
            x = x * self.config.embed_scale
        return x

    def trunk(
        self,
        input_ids=None,
        inputs_embeds=None,
        states=None,
        mode=None,
        segment_pos=None,
        after_layer=None,
        context_parallel=None,
        return_states: bool = True,
    ):
        """Blocks over the embedded input; returns the final-normed hidden states and the new states (None with
        ``return_states=False``, where under context parallelism the layers skip gathering their final states).

        ``after_layer`` (a tensor broadcastable to ``(B, T, D)``) is added to the output of every block: M2-BERT
        re-adds its position embeddings this way. ``context_parallel``: a process group over which the sequence is
        split along time; the input is this rank's block (docs/context-parallel.md). A model with a layer that
        cannot split is refused before any work, naming the layer.
        """
        if context_parallel is not None and group_rank_size(context_parallel)[1] > 1:
            why = context_parallel_refusal(self)
            if why:
                raise InputError(f"context_parallel: {why}")
        if (input_ids is None) == (inputs_embeds is None):
            raise InputError("pass exactly one of input_ids (B, T) or inputs_embeds (B, T, d_model)")
        if inputs_embeds is None:
            x = self.embed_tokens(input_ids)
        else:
            if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != self.config.d_model:
                raise InputError(
                    f"inputs_embeds must have shape (B, T, d_model={self.config.d_model}), "
                    f"got {tuple(inputs_embeds.shape)}"
                )
            x = inputs_embeds
        if states is not None and len(states) != len(self.blocks):
            raise InputError(f"states must hold one entry per layer ({len(self.blocks)}), got {len(states)}")
        extra = {} if segment_pos is None else {"segment_pos": segment_pos}
        if context_parallel is not None:
            extra["context_parallel"] = context_parallel
            if not return_states:  # only a split pays for the final states (a collective per recurrent layer)
                extra["return_state"] = False
        modes = self.layer_modes(mode)
        new_states = []
        for i, block in enumerate(self.blocks):
            x, s = block(x, state=None if states is None else states[i], mode=modes[i], **extra)
            if after_layer is not None:
                x = x + after_layer
            new_states.append(s)
        return self.norm(x), new_states if return_states else None

    def layer_modes(self, mode: str | dict[str, str] | None) -> list[str | None]:
        """Per-layer mode: a dict maps mixer name -> mode; a string applies to every layer whose mixer has it.

        A mixed stack (xLSTM[7:1], Griffin) can then run ``mode="parallel"`` on its mLSTM layers while the
        sLSTM layers keep their own default; a string no layer knows is an error, not a silent no-op.
        """
        mixers = [b.mixer for b in self.blocks]
        if mode is None:
            return [None] * len(mixers)
        if isinstance(mode, dict):
            unknown = set(mode) - {m.name for m in mixers}
            if unknown:
                raise InputError(f"mode names mixers {sorted(unknown)} that this model does not use")
            return [mode.get(m.name) for m in mixers]
        if not any(mode in m.modes for m in mixers):
            raise InputError(f"no layer has mode {mode!r}; modes per mixer: { {m.name: m.modes for m in mixers} }")
        return [mode if mode in m.modes else None for m in mixers]

    # ---------------------------------------------------------------- helpers
    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        seen, n = set(), 0
        for name, p in self.named_parameters():
            if id(p) in seen or (exclude_embeddings and name.startswith("embed.")):
                continue
            seen.add(id(p))
            n += p.numel()
        return n

    def optim_overrides(self) -> dict[str, dict[str, float]]:
        """Collect the mixers' per-parameter optimiser overrides under their full parameter names."""
        return collect_optim_overrides(self)

    # ------------------------------------------------------------- save / load
    def save_pretrained(self, directory: str | Path) -> Path:
        """Write ``config.json`` and ``model.safetensors`` (tied weights stored once)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        saved_type = saved_model_type(self.model_type)
        meta = {"model_type": saved_type, **self.config.to_dict()}
        (directory / CONFIG_NAME).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        save_model(self, str(directory / WEIGHTS_NAME), metadata={"format": "pt", "model_type": saved_type})
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path, map_location: str | torch.device = "cpu", **overrides: Any):
        directory = Path(directory)
        cfg_path, w_path = directory / CONFIG_NAME, directory / WEIGHTS_NAME
        index_path = directory / INDEX_NAME  # big models (seqzoo convert) are sharded like transformers'
        if not cfg_path.is_file() or not (w_path.is_file() or index_path.is_file()):
            raise MissingFileError(f"{directory} must contain {CONFIG_NAME} and {WEIGHTS_NAME} (or {INDEX_NAME})")
        meta = json.loads(cfg_path.read_text())
        saved_type = str(meta.pop("model_type", cls.model_type))
        model_type = model_kind(saved_type)
        if cls.model_type != "base" and model_type != cls.model_type:
            raise InputError(f"{directory} holds a {model_type!r} model, not a {cls.model_type!r}")
        if model_type not in MODEL_TYPES:
            raise InputError(
                f"{cfg_path}: model_type must be one of {sorted(map(saved_model_type, MODEL_TYPES))}, got {saved_type!r}"
            )
        target = cls if cls.model_type != "base" else MODEL_TYPES[model_type]
        model = target(ModelConfig.from_dict(drop_unused_mixer_settings({**meta, **overrides}, str(cfg_path))))
        if w_path.is_file():
            load_model(model, str(w_path), strict=True, device=str(map_location))
        else:
            _load_shards(model, directory, index_path, str(map_location))
        return model.to(map_location)


def _load_shards(model: nn.Module, directory: Path, index_path: Path, device: str) -> None:
    """Load the shards listed in ``model.safetensors.index.json`` one at a time (strict; a tied head may be absent)."""
    shards = sorted(set(json.loads(index_path.read_text())["weight_map"].values()))
    seen: set[str] = set()
    for shard in shards:
        part = load_file(str(directory / shard), device=device)
        unexpected = set(model.load_state_dict(part, strict=False).unexpected_keys)
        if unexpected:
            raise InputError(f"{directory / shard}: unexpected tensors {sorted(unexpected)}")
        seen |= set(part)
        del part
    every = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    tied = every - {n for n, _ in model.named_parameters()}  # second names of shared parameters
    missing = set(model.state_dict()) - seen - tied
    if missing:
        raise InputError(f"{index_path}: missing tensors {sorted(missing)}")


MODEL_TYPES: dict[str, type[SeqzooModel]] = {}
