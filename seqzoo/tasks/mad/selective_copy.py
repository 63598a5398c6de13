"""MAD's selective copying (Poli et al., arXiv:2403.17844; mad-lab's ``selective-copying``).

Vocabulary ``V``: tokens to copy from ``[0, V-2)``, the blank ``V-2``, the copy token ``V-1``. A row of
``seq_len = T`` tokens holds ``N = num_tokens_to_copy`` tokens (uniform, with repetition) with ``B = T - 2N - 1``
blanks scattered among them, then the copy token, then ``N`` blanks. Each blank is placed independently into one of
the ``N`` gaps in front of the ``N`` tokens (uniform): the region before the copy token therefore always ends with the
last token to copy, as mad-lab's ``np.insert`` at indices drawn from ``[0, N)`` places them. The targets are the
``N`` tokens, in order, at the ``N`` blank positions after the copy token (no shift: the target at a position is
what the model outputs there), −100 elsewhere; the training and test splits score the same positions.
"""

from __future__ import annotations

import torch

from ...errors import InputError
from ..base import IGNORE_INDEX, Task, register_task
from .common import check_int, check_train_size, is_training, torch_generator


@register_task("mad-selective-copy")
class MadSelectiveCopy(Task):
    def __init__(
        self, vocab_size: int = 16, seq_len: int = 256, num_tokens_to_copy: int = 16, train_size: int | None = 12_800
    ):
        name = self.name
        check_int(name, "vocab_size", vocab_size, 3)
        check_int(name, "num_tokens_to_copy", num_tokens_to_copy, 1)
        check_int(name, "seq_len", seq_len, 1)
        if seq_len <= 2 * num_tokens_to_copy + 1:
            raise InputError(
                f"{name}: seq_len must be > 2*num_tokens_to_copy + 1 = {2 * num_tokens_to_copy + 1}, got {seq_len}"
            )
        check_train_size(name, train_size)
        self.vocab_size, self.seq_len, self.num_tokens_to_copy = vocab_size, seq_len, num_tokens_to_copy
        self.train_size = train_size

    def config(self):
        return {
            "vocab_size": self.vocab_size,
            "seq_len": self.seq_len,
            "num_tokens_to_copy": self.num_tokens_to_copy,
            "train_size": self.train_size,
        }

    def build(self, n: int, seed: int, split: str = "train"):
        is_training(split)  # the same layout in every split; refuses an unknown one
        g = torch_generator(seed, split)
        V, T, N = self.vocab_size, self.seq_len, self.num_tokens_to_copy
        blank, copy = V - 2, V - 1
        n_blank = T - 2 * N - 1
        tokens = torch.randint(0, V - 2, (n, N), generator=g)
        gaps = torch.randint(0, N, (n, n_blank), generator=g)
        in_front = torch.zeros(n, N, dtype=torch.long).scatter_add_(1, gaps, torch.ones_like(gaps))
        pos = torch.arange(N) + in_front.cumsum(1)  # token j follows j tokens and the blanks of gaps 0..j
        inputs = torch.full((n, T), blank, dtype=torch.long)
        inputs.scatter_(1, pos, tokens)
        inputs[:, T - N - 1] = copy
        targets = torch.full((n, T), IGNORE_INDEX, dtype=torch.long)
        targets[:, T - N :] = tokens
        return inputs, targets
