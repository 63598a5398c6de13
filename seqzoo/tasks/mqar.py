"""Multi-query associative recall (MQAR; Arora et al., "Zoology", arXiv:2312.04927).

A sample is ``num_pairs`` key-value pairs ``k1 v1 k2 v2 ...`` followed by a query region of length
``seq_len - 2·num_pairs`` filled with the pad token 0, in which ``num_queries`` of the keys reappear at
random positions. At a query position the target is the value that followed that key; every other
position is unscored (-100). Keys come from ``[1, vocab_size/2)``, values from ``[vocab_size/2, vocab_size)``,
keys are distinct within a sample. ``query_at_end=True`` puts the queries at the end (single-query
associative recall as in Hyena/Orchid when ``num_queries=1``). This is ``protocol="seqzoo"``, the default.

``protocol="zoology"`` draws Zoology's own distribution instead (``mqar_zoology.py``): distinct values too,
every key queried once at even offsets after the context with power-law gaps (``power_a``, default 0.01), random
filler in the query region (``random_filler``, default true; false pads with 0 as Zoology's Fig. 2 configurations
do), and Zoology's settings: ``seq_len`` even, ``vocab_size > seq_len``, ``4·num_pairs <= seq_len``. The
zoology-only arguments enter the configuration (and so a run's key) only with that protocol, so runs of the default
protocol keep their configuration.
"""

from __future__ import annotations

import torch

from ..errors import InputError
from .base import IGNORE_INDEX, Task, register_task, split_seed
from .mqar_zoology import DEFAULT_POWER_A, check_zoology_settings, zoology_mqar

PROTOCOLS = ("seqzoo", "zoology")


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
        protocol: str = "seqzoo",
        power_a: float | None = None,
        random_filler: bool | None = None,
    ):
        if protocol not in PROTOCOLS:
            raise InputError(f"mqar: protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        if protocol == "zoology":
            if query_at_end:
                raise InputError("mqar protocol='zoology': query_at_end must be false (queries follow power-law gaps)")
            if num_queries not in (None, num_pairs):
                raise InputError(
                    f"mqar protocol='zoology': num_queries must be num_pairs={num_pairs} (every key is queried once), "
                    f"got {num_queries}"
                )
            power_a = DEFAULT_POWER_A if power_a is None else power_a
            check_zoology_settings(vocab_size, num_pairs, seq_len, power_a)
            random_filler = True if random_filler is None else random_filler
            if not isinstance(random_filler, bool):
                raise InputError(f"mqar protocol='zoology': random_filler must be true or false, got {random_filler!r}")
        elif power_a is not None or random_filler is not None:
            raise InputError("mqar: power_a and random_filler apply only to protocol='zoology'")
        self.protocol, self.power_a, self.random_filler = protocol, power_a, random_filler
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
            # only when not the default: configurations (run keys) of seqzoo-protocol runs stay as they were
            **(
                {"protocol": "zoology", "power_a": self.power_a, "random_filler": self.random_filler}
                if self.protocol == "zoology"
                else {}
            ),
        }

    def build(self, n: int, seed: int, split: str = "train"):
        g = torch.Generator().manual_seed(split_seed(seed, split))
        if self.protocol == "zoology":
            return zoology_mqar(n, self.vocab_size, self.num_pairs, self.seq_len, self.power_a, self.random_filler, g)
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
