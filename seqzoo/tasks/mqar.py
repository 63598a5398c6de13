"""Multi-query associative recall (MQAR; Arora et al., "Zoology", arXiv:2312.04927).

A sample is ``num_pairs`` key-value pairs ``k1 v1 k2 v2 ...`` followed by a query region of length
``seq_len - 2·num_pairs`` filled with the pad token 0, in which ``num_queries`` of the keys reappear at
random positions. At a query position the target is the value that followed that key; every other
position is unscored (-100). Keys come from ``[1, vocab_size/2)``, values from ``[vocab_size/2, vocab_size)``,
keys are distinct within a sample. ``query_at_end=True`` puts the queries at the end (single-query
associative recall as in Hyena/Orchid when ``num_queries=1``).
"""

from __future__ import annotations

import torch

from ..errors import InputError
from .base import IGNORE_INDEX, Task, register_task, split_seed


@register_task("mqar")
class MQAR(Task):
    def __init__(
        self,
        vocab_size: int = 64,
        num_pairs: int = 8,
        seq_len: int = 64,
        num_queries: int | None = None,
        query_at_end: bool = False,
        train_size: int | None = None,
    ):
        num_queries = num_pairs if num_queries is None else num_queries
        n_keys = vocab_size // 2 - 1
        if vocab_size < 4:
            raise InputError(f"vocab_size must be >= 4, got {vocab_size}")
        if not 1 <= num_pairs <= n_keys:
            raise InputError(f"num_pairs must be in [1, {n_keys}] for vocab_size={vocab_size}, got {num_pairs}")
        if not 1 <= num_queries <= num_pairs:
            raise InputError(f"num_queries must be in [1, num_pairs={num_pairs}], got {num_queries}")
        if seq_len < 2 * num_pairs + num_queries:
            raise InputError(
                f"seq_len must be >= 2*num_pairs + num_queries = {2 * num_pairs + num_queries}, got {seq_len}"
            )
        self.vocab_size, self.num_pairs, self.seq_len = vocab_size, num_pairs, seq_len
        self.num_queries, self.query_at_end, self.train_size = num_queries, query_at_end, train_size

    def config(self):
        return {
            "vocab_size": self.vocab_size,
            "num_pairs": self.num_pairs,
            "seq_len": self.seq_len,
            "num_queries": self.num_queries,
            "query_at_end": self.query_at_end,
            "train_size": self.train_size,
        }

    def build(self, n: int, seed: int, split: str = "train"):
        g = torch.Generator().manual_seed(split_seed(seed, split))
        P, Q, T, half = self.num_pairs, self.num_queries, self.seq_len, self.vocab_size // 2
        keys = torch.rand(n, half - 1, generator=g).argsort(-1)[:, :P] + 1  # (n, P) distinct keys in [1, half)
        values = torch.randint(half, self.vocab_size, (n, P), generator=g)  # (n, P)
        inputs = torch.zeros(n, T, dtype=torch.long)
        targets = torch.full((n, T), IGNORE_INDEX, dtype=torch.long)
        inputs[:, 0 : 2 * P : 2], inputs[:, 1 : 2 * P : 2] = keys, values
        which = torch.rand(n, P, generator=g).argsort(-1)[:, :Q]  # (n, Q) queried pair indices
        region = T - 2 * P
        if self.query_at_end:
            offsets = torch.arange(region - Q, region).expand(n, Q)
        else:
            offsets = torch.rand(n, region, generator=g).argsort(-1)[:, :Q]  # (n, Q) distinct slots
        pos = 2 * P + offsets
        rows = torch.arange(n)[:, None]
        inputs[rows, pos] = keys.gather(1, which)
        targets[rows, pos] = values.gather(1, which)
        return inputs, targets
