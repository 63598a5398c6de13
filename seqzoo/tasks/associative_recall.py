"""Single-query associative recall, Hyena's generator (Poli et al., arXiv:2302.10866; Orchid, arXiv:2402.18508, §4.1).

Why not ``mqar`` with ``num_queries=1``: MQAR draws *distinct* keys from ``vocab/2 - 1`` ids, so it cannot
write T/2 pairs over a small vocabulary (V = 30, T = 64 needs 32 pairs from 14 keys), whereas Hyena's
generator draws keys with replacement from a per-sample key -> value map; the Orchid paper follows Hyena.

Vocabulary ``V`` counts two special tokens: ``=>`` (id V-2, the query marker) and ``.`` (id V-1, unused
no-op). Of the other V-2 ids the first ``(V-2)//2`` are keys, the rest values. A sample draws its own
key -> value map (values may repeat), writes ``T/2`` pairs ``k v`` with keys uniform with replacement (a
recurring key carries the same value), then ``=>`` and a key present in the context:

    inputs  (N, T+2) = k_1 v_1 ... k_{T/2} v_{T/2} => q
    targets (N, T+2) = -100 everywhere except the last position, which holds map[q]

Only the final position is scored, and the answer is never in the input, so non-causal models (Orchid,
an encoder) cannot read it off. Chance accuracy is ``1 / n_values``.

``num_queries = n > 1`` (a zoo setting, not the paper's) asks n keys of the context after one ``=>``:
``k_1 v_1 ... => q_1 ... q_n`` (length T+1+n), each query position scored with its own value. The answers are
still never in the input, so an encoder cannot read them off; n = 1 is the layout and the samples above. Why: with
one scored position per sample the training signal is 1/n as large, and at V = 10 a model that guesses by how often
each value occurs in the context already scores 0.57 (the "frequency plateau"; docs/zoo.md).
"""

from __future__ import annotations

import torch

from ..errors import InputError
from .base import IGNORE_INDEX, Task, register_task, split_seed


@register_task("associative_recall")
class AssociativeRecall(Task):
    def __init__(self, vocab_size: int = 30, seq_len: int = 64, train_size: int | None = None, num_queries: int = 1):
        if not isinstance(vocab_size, int) or vocab_size < 6:
            raise InputError(f"vocab_size must be an int >= 6 (2 special tokens + keys + values), got {vocab_size!r}")
        if not isinstance(seq_len, int) or seq_len < 2 or seq_len % 2:
            raise InputError(f"seq_len (the context of T/2 key-value pairs) must be an even int >= 2, got {seq_len!r}")
        if not isinstance(num_queries, int) or isinstance(num_queries, bool) or num_queries < 1:
            raise InputError(f"num_queries must be an int >= 1 (query keys after '=>'), got {num_queries!r}")
        self.vocab_size, self.context_len, self.train_size = vocab_size, seq_len, train_size
        self.num_queries = num_queries
        self.seq_len = seq_len + 1 + num_queries  # model input length: pairs, "=>", query keys
        self.n_keys = (vocab_size - 2) // 2
        self.n_values = vocab_size - 2 - self.n_keys
        self.query_token, self.noop_token = vocab_size - 2, vocab_size - 1

    def config(self):
        cfg = {"vocab_size": self.vocab_size, "seq_len": self.context_len, "train_size": self.train_size}
        return {**cfg, "num_queries": self.num_queries} if self.num_queries > 1 else cfg

    def build(self, n: int, seed: int, split: str = "train"):
        g = torch.Generator().manual_seed(split_seed(seed, split))
        P, Q = self.context_len // 2, self.num_queries
        mapping = torch.randint(0, self.n_values, (n, self.n_keys), generator=g) + self.n_keys  # (n, K) value ids
        keys = torch.randint(0, self.n_keys, (n, P), generator=g)  # (n, P), with replacement
        values = mapping.gather(1, keys)  # (n, P)
        which = torch.randint(0, P, (n, Q), generator=g)  # (n, Q): pairs whose keys are queried
        query = keys.gather(1, which)  # (n, Q)
        inputs = torch.empty(n, self.seq_len, dtype=torch.long)
        inputs[:, 0 : 2 * P : 2], inputs[:, 1 : 2 * P : 2] = keys, values
        inputs[:, 2 * P] = self.query_token
        inputs[:, -Q:] = query
        targets = torch.full((n, self.seq_len), IGNORE_INDEX, dtype=torch.long)
        targets[:, -Q:] = mapping.gather(1, query)
        return inputs, targets
