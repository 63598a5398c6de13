"""``SeqzooCache``: the per-layer seqzoo mixer states behind transformers' ``Cache`` interface.

seqzoo mixers return their state instead of storing it (a ``KVCache`` for attention / sliding-window attention,
tensors, tuples or small dataclasses of tensors for the recurrent families, conv buffers included). transformers
5.x generation passes ``past_key_values`` from one forward call to the next and reorders it for beam search.
``SeqzooCache`` holds the list of per-layer states as one opaque object and implements the ``Cache`` methods
generation uses: ``get_seq_length``, ``reorder_cache`` (beam search), ``batch_repeat_interleave`` /
``batch_select_indices``, ``reset``. Every state tensor is batch-first (seqzoo's tensor convention), which is
what the batch operations rely on. States cannot be rolled back (``crop`` only accepts 0): recurrent states
forget the past, so assisted / speculative decoding is not supported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from transformers.cache_utils import Cache

from ..errors import InputError


def map_state_tensors(state: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply ``fn`` to every tensor of a seqzoo state (tensor, tuple/list, dict, dataclass, None), keeping its structure.

    Tensors of dimension 0 (no batch axis) are left as they are.
    """
    if state is None or isinstance(state, (bool, int, float, str)):
        return state
    if isinstance(state, torch.Tensor):
        return fn(state) if state.dim() > 0 else state
    if isinstance(state, tuple) and hasattr(state, "_fields"):  # namedtuple
        return type(state)(*(map_state_tensors(s, fn) for s in state))
    if isinstance(state, (tuple, list)):
        return type(state)(map_state_tensors(s, fn) for s in state)
    if isinstance(state, dict):
        return {k: map_state_tensors(v, fn) for k, v in state.items()}
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        changes = {f.name: map_state_tensors(getattr(state, f.name), fn) for f in dataclasses.fields(state) if f.init}
        return dataclasses.replace(state, **changes)
    raise InputError(
        f"cannot map over a mixer state of type {type(state).__name__}; seqzoo states must be tensors, "
        f"tuples, lists, dicts or dataclasses of tensors"
    )


def _first_tensor(state: Any) -> torch.Tensor | None:
    found: list[torch.Tensor] = []

    def grab(t: torch.Tensor) -> torch.Tensor:
        found.append(t)
        return t

    map_state_tensors(state, grab)
    return found[0] if found else None


class SeqzooCache(Cache):
    """The carried per-layer states of a seqzoo ``LanguageModel`` plus the number of tokens seen.

    The model's forward replaces ``states`` in place and returns the same object, as transformers' caches do.
    ``SeqzooCache(num_layers)`` is empty (no token seen); ``SeqzooCache.from_states(states, seen_tokens)`` wraps
    states returned by ``seqzoo.LanguageModel.forward``.
    """

    is_compileable = False  # states are python objects of variable structure
    is_croppable = False

    def __init__(self, num_layers: int | None = None):
        # ``Cache.__init__`` builds transformers' own per-layer objects; this cache keeps seqzoo's states instead
        if num_layers is not None and (not isinstance(num_layers, int) or num_layers <= 0):
            raise InputError(f"num_layers must be a positive int, got {num_layers!r}")
        self.layers = []  # transformers' per-layer objects: none (the base-class loops over them are no-ops)
        self.layer_class_to_replicate = None
        self.offloading = False
        self.num_layers = num_layers
        self.states: list[Any] | None = None
        self.seen_tokens = 0

    @classmethod
    def from_states(cls, states: list[Any], seen_tokens: int) -> SeqzooCache:
        """Wrap the per-layer states returned by seqzoo after ``seen_tokens`` tokens."""
        if not isinstance(states, (list, tuple)):
            raise InputError(f"states must be a list with one mixer state per layer, got {type(states).__name__}")
        cache = cls(len(states))
        cache.update_states(list(states), seen_tokens)
        return cache

    # ------------------------------------------------------------ seqzoo side
    def update_states(self, states: list[Any], new_tokens: int) -> None:
        """Replace the states with those returned after ``new_tokens`` more tokens."""
        if self.num_layers is not None and len(states) != self.num_layers:
            raise InputError(f"this cache holds {self.num_layers} layers, got states for {len(states)}")
        self.num_layers = len(states)
        self.states = list(states)
        self.seen_tokens += int(new_tokens)

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        if self.states is not None:
            self.states = [map_state_tensors(s, fn) for s in self.states]

    # ------------------------------------------------------- transformers side
    def __len__(self) -> int:
        return self.num_layers or 0

    def __repr__(self) -> str:
        return f"SeqzooCache(layers={self.num_layers}, seen_tokens={self.seen_tokens})"

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens the states have absorbed (the same for every layer)."""
        return self.seen_tokens

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1  # no fixed maximum (recurrent states are constant-size, KV caches grow or slide)

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return self.seen_tokens

    @property
    def is_initialized(self) -> bool:
        return self.states is not None

    @property
    def batch_size(self) -> int:
        first = _first_tensor(self.states)
        return -1 if first is None else int(first.shape[0])

    @property
    def is_sliding(self) -> list[bool]:
        return [False] * len(self)

    @property
    def is_linear(self) -> list[bool]:
        return [False] * len(self)

    @property
    def is_dummy(self) -> list[bool]:
        return [False] * len(self)

    def reset(self) -> None:
        self.states = None
        self.seen_tokens = 0

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: keep batch rows ``beam_idx`` of every state tensor."""
        self._map(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._map(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._map(lambda t: t[indices.to(t.device) if isinstance(indices, torch.Tensor) else indices])

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove:
            raise NotImplementedError(
                "seqzoo states cannot be rolled back (recurrent states forget the past): "
                "assisted / speculative decoding is not supported"
            )

    def activate_past_recording(self) -> None:
        pass  # nothing to record: crop(0) is the only roll-back ever asked of this cache

    def is_recording_past(self, layer_idx: int) -> bool:
        return False

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        raise NotImplementedError(
            "SeqzooCache holds whole seqzoo mixer states; it is updated by the seqzoo model's "
            "forward, not per layer with keys and values"
        )


__all__ = ["SeqzooCache", "map_state_tensors"]
