"""State-tracking probes from formal-language theory, trained short and tested longer.

Deletang et al., "Neural Networks and the Chomsky Hierarchy" (arXiv:2207.02098), the suite the xLSTM paper
uses for its formal-language study (Beck et al., arXiv:2405.04517, §4.1, Fig. 4): a regular language that
needs a finite state machine (parity, and modular sums in general) and a counter language that needs an
unbounded counter (majority). The xLSTM paper reports that the sLSTM's state tracking solves parity where
linear recurrences without memory mixing and attention fail to extrapolate.

Every position is scored (the running answer for the prefix ``x_1..x_t``), so one sample gives ``seq_len``
targets and evaluation at a longer ``seq_len`` measures length extrapolation position by position.

Ids: input symbols are ``0..n_symbols-1``; answers live in the same table (``vocab_size`` covers both), so
the tasks run on a causal LM without a separate head.
"""

from __future__ import annotations

import torch

from ..errors import require
from .base import IGNORE_INDEX, Task, register_task, split_seed


def _check_int(task: str, name: str, value, lo: int) -> None:
    require(
        isinstance(value, int) and not isinstance(value, bool) and value >= lo,
        f"{task}: {name} must be an int >= {lo}, got {value!r}",
    )


@register_task("modular_sum")
class ModularSum(Task):
    """Running sum of symbols modulo ``modulus`` (a regular language; "cycle navigation" / modular arithmetic).

    ``inputs[:, t]`` ∈ [0, modulus) and ``targets[:, t] = (Σ_{s≤t} inputs[:, s]) mod modulus``. A recurrence
    solves it exactly with ``modulus`` states; a model that averages its inputs (attention) must count
    precisely at every length.
    """

    def __init__(self, modulus: int = 5, seq_len: int = 32, train_size: int | None = None):
        _check_int(self.name, "modulus", modulus, 2)
        _check_int(self.name, "seq_len", seq_len, 1)
        require(
            train_size is None or (isinstance(train_size, int) and train_size > 0),
            f"{self.name}: train_size must be a positive int or None, got {train_size!r}",
        )
        self.modulus, self.seq_len, self.train_size = modulus, seq_len, train_size
        self.vocab_size = modulus

    def config(self):
        return {"modulus": self.modulus, "seq_len": self.seq_len, "train_size": self.train_size}

    def build(self, n: int, seed: int, split: str = "train"):
        _check_int(self.name, "n", n, 1)
        g = torch.Generator().manual_seed(split_seed(seed, split))
        x = torch.randint(0, self.modulus, (n, self.seq_len), generator=g)  # (n, T)
        return x, x.cumsum(1) % self.modulus


@register_task("parity")
class Parity(ModularSum):
    """Running parity of a bit string (``modular_sum`` with ``modulus=2``): target = XOR of the bits so far."""

    def __init__(self, seq_len: int = 32, train_size: int | None = None):
        super().__init__(modulus=2, seq_len=seq_len, train_size=train_size)

    def config(self):
        return {"seq_len": self.seq_len, "train_size": self.train_size}


@register_task("majority")
class Majority(Task):
    """Which of ``n_symbols`` symbols has occurred most often so far (a counter language).

    ``targets[:, t]`` = the symbol with the largest count in ``inputs[:, :t+1]``; positions where the largest
    count is tied are unscored (-100). Symbols are drawn with a per-sample bias so that the leader changes
    rarely but does change; solving it at lengths beyond training needs counters that do not saturate.
    """

    def __init__(self, n_symbols: int = 2, seq_len: int = 32, train_size: int | None = None):
        _check_int(self.name, "n_symbols", n_symbols, 2)
        _check_int(self.name, "seq_len", seq_len, 1)
        require(
            train_size is None or (isinstance(train_size, int) and train_size > 0),
            f"{self.name}: train_size must be a positive int or None, got {train_size!r}",
        )
        self.n_symbols, self.seq_len, self.train_size = n_symbols, seq_len, train_size
        self.vocab_size = n_symbols

    def config(self):
        return {"n_symbols": self.n_symbols, "seq_len": self.seq_len, "train_size": self.train_size}

    def build(self, n: int, seed: int, split: str = "train"):
        _check_int(self.name, "n", n, 1)
        g = torch.Generator().manual_seed(split_seed(seed, split))
        # per-sample symbol probabilities: Dirichlet(1) via normalised exponentials
        probs = -torch.rand(n, self.n_symbols, generator=g).log()
        probs = probs / probs.sum(-1, keepdim=True)  # (n, S)
        x = torch.multinomial(probs, self.seq_len, replacement=True, generator=g)  # (n, T)
        counts = torch.nn.functional.one_hot(x, self.n_symbols).cumsum(1)  # (n, T, S)
        top2 = counts.topk(2, dim=-1).values  # (n, T, 2)
        y = counts.argmax(-1)
        y[top2[..., 0] == top2[..., 1]] = IGNORE_INDEX  # a tie has no single answer
        return x, y
