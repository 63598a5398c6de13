"""Retrieval and copying probes: selective copying and induction heads.

Both are the synthetic tasks of Griffin (De et al., arXiv:2402.19427, §6, Fig. 6/Appendix), which trains at one
length and evaluates at longer ones to show that MQA and Griffin retrieve and copy where Hawk's fixed-size
state degrades. Selective copying follows Mamba (Gu & Dao, arXiv:2312.00752, §4.1.1); induction heads follow
Olsson et al. (2022).

Ids shared by both tasks: 0 = noise/blank, 1 = the marker (selective copy: "output here"; induction: the
trigger), data tokens are ``2..vocab_size-1``.
"""

from __future__ import annotations

import torch

from ..errors import require
from .base import IGNORE_INDEX, Task, register_task, split_seed

NOISE, MARKER, FIRST_DATA = 0, 1, 2


def _check(task: str, **values) -> None:
    for name, (value, lo) in values.items():
        require(
            isinstance(value, int) and not isinstance(value, bool) and value >= lo,
            f"{task}: {name} must be an int >= {lo}, got {value!r}",
        )


@register_task("selective_copy")
class SelectiveCopy(Task):
    """Copy the ``n_tokens`` data tokens scattered among blanks, in order, after the context.

    inputs  (N, seq_len + n_tokens) = [context of seq_len: n_tokens data tokens at random positions, 0 elsewhere]
                                      [n_tokens markers]
    targets: -100 over the context; the data tokens in order over the marker positions.

    Evaluating with a larger ``seq_len`` (same ``n_tokens``) spreads the same content over more noise.
    """

    def __init__(self, vocab_size: int = 16, seq_len: int = 64, n_tokens: int = 8, train_size: int | None = None):
        _check(self.name, vocab_size=(vocab_size, FIRST_DATA + 2), n_tokens=(n_tokens, 1), seq_len=(seq_len, 1))
        require(n_tokens <= seq_len, f"{self.name}: n_tokens must be <= seq_len={seq_len}, got {n_tokens}")
        require(
            train_size is None or (isinstance(train_size, int) and train_size > 0),
            f"{self.name}: train_size must be a positive int or None, got {train_size!r}",
        )
        self.vocab_size, self.context_len, self.n_tokens, self.train_size = vocab_size, seq_len, n_tokens, train_size
        self.seq_len = seq_len + n_tokens

    def config(self):
        return {
            "vocab_size": self.vocab_size,
            "seq_len": self.context_len,
            "n_tokens": self.n_tokens,
            "train_size": self.train_size,
        }

    def build(self, n: int, seed: int, split: str = "train"):
        _check(self.name, n=(n, 1))
        g = torch.Generator().manual_seed(split_seed(seed, split))
        L, K = self.context_len, self.n_tokens
        data = torch.randint(FIRST_DATA, self.vocab_size, (n, K), generator=g)  # (n, K)
        slots = torch.rand(n, L, generator=g).argsort(-1)[:, :K].sort(-1).values  # (n, K) increasing positions
        inputs = torch.full((n, L + K), NOISE, dtype=torch.long)
        inputs.scatter_(1, slots, data)
        inputs[:, L:] = MARKER
        targets = torch.full((n, L + K), IGNORE_INDEX, dtype=torch.long)
        targets[:, L:] = data
        return inputs, targets


@register_task("induction_heads")
class InductionHeads(Task):
    """After ``trigger X ... trigger`` predict ``X``: retrieve the token that followed the earlier trigger.

    A sample is ``seq_len`` random data tokens with the trigger (id 1) at one random position ``p < seq_len - 2``
    followed by the answer ``X``, and the trigger again as the last token; only the last position is scored
    (target ``X``). Chance accuracy is ``1 / (vocab_size - 2)``.
    """

    def __init__(self, vocab_size: int = 16, seq_len: int = 64, train_size: int | None = None):
        _check(self.name, vocab_size=(vocab_size, FIRST_DATA + 2), seq_len=(seq_len, 4))
        require(
            train_size is None or (isinstance(train_size, int) and train_size > 0),
            f"{self.name}: train_size must be a positive int or None, got {train_size!r}",
        )
        self.vocab_size, self.seq_len, self.train_size = vocab_size, seq_len, train_size

    def config(self):
        return {"vocab_size": self.vocab_size, "seq_len": self.seq_len, "train_size": self.train_size}

    def build(self, n: int, seed: int, split: str = "train"):
        _check(self.name, n=(n, 1))
        g = torch.Generator().manual_seed(split_seed(seed, split))
        T = self.seq_len
        inputs = torch.randint(FIRST_DATA, self.vocab_size, (n, T), generator=g)  # (n, T)
        p = torch.randint(0, T - 2, (n, 1), generator=g)  # (n, 1): first trigger position
        rows = torch.arange(n)[:, None]
        inputs[rows, p] = MARKER
        inputs[:, -1] = MARKER
        targets = torch.full((n, T), IGNORE_INDEX, dtype=torch.long)
        targets[:, -1:] = inputs.gather(1, p + 1)
        return inputs, targets
