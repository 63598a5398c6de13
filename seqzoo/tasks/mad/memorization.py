"""MAD's memorization (Poli et al., arXiv:2403.17844; mad-lab's ``memorization``).

Vocabulary ``V``: the insert token ``V-1``; of the other ``s = V-1`` tokens, keys are ``[0, s/2)`` and values
``[s/2, s)``. One fixed key -> value map for the whole task, drawn from ``map_seed`` (MAD draws it from its config
seed): keys and values are each shuffled and paired in order, so every key gets a distinct value (one value is
left over when ``s`` is odd). A row of ``seq_len`` tokens is ``seq_len/2`` pairs ``k <insert>``, keys uniform with
repetition; the target at the insert token is the key's value, −100 at the keys. The map is the same in every
split and for every run seed, so the test set asks for the facts the training set taught.
"""

from __future__ import annotations

import torch

from ...errors import InputError
from ..base import IGNORE_INDEX, Task, register_task
from .common import check_int, check_train_size, is_training, torch_generator


def memorization_map(vocab_size: int, map_seed: int) -> torch.Tensor:
    """``(s // 2,)``: the value of each key (module docstring)."""
    s = vocab_size - 1
    g = torch.Generator().manual_seed(map_seed)
    keys = torch.randperm(s // 2, generator=g)
    values = torch.randperm(s - s // 2, generator=g) + s // 2
    table = torch.empty(s // 2, dtype=torch.long)
    table[keys] = values[: s // 2]
    return table


@register_task("mad-memorization")
class MadMemorization(Task):
    def __init__(self, vocab_size: int = 256, seq_len: int = 32, map_seed: int = 12345, train_size: int | None = 256):
        check_int(self.name, "vocab_size", vocab_size, 3)
        check_int(self.name, "seq_len", seq_len, 2)
        if seq_len % 2:
            raise InputError(f"{self.name}: seq_len must be even (key, insert-token pairs), got {seq_len}")
        check_int(self.name, "map_seed", map_seed, 0)
        check_train_size(self.name, train_size)
        self.vocab_size, self.seq_len, self.map_seed, self.train_size = vocab_size, seq_len, map_seed, train_size
        self.table = memorization_map(vocab_size, map_seed)

    def config(self):
        return {
            "vocab_size": self.vocab_size,
            "seq_len": self.seq_len,
            "map_seed": self.map_seed,
            "train_size": self.train_size,
        }

    def build(self, n: int, seed: int, split: str = "train"):
        is_training(split)
        g = torch_generator(seed, split)
        keys = torch.randint(0, self.table.numel(), (n, self.seq_len // 2), generator=g)
        inputs = torch.full((n, self.seq_len), self.vocab_size - 1, dtype=torch.long)
        inputs[:, 0::2] = keys
        targets = torch.full((n, self.seq_len), IGNORE_INDEX, dtype=torch.long)
        targets[:, 1::2] = self.table[keys]
        return inputs, targets
