"""MAD's compression (Poli et al., arXiv:2403.17844; mad-lab's ``compression``).

Vocabulary ``V``: ``seq_len - 1`` tokens uniform over ``[0, V-1)`` followed by the compression token ``V-1``; the
target at every position is the input token there, all ``seq_len`` positions scored. MAD trains this task with an
encoder-decoder, not a language model: the sequence model reads the row, its output at the last position (the
compression token) is the code, and a small MLP decodes each position's token from the code plus a position
embedding (``experiments/mad_models.py: CompressionAutoEncoder``). A causal language model would only have to copy
its own input, so ``needs_autoencoder`` tells an experiment which model this task takes.
"""

from __future__ import annotations

import torch

from ..base import Task, register_task
from .common import check_int, check_train_size, is_training, torch_generator


@register_task("mad-compression")
class MadCompression(Task):
    needs_autoencoder = True

    def __init__(self, vocab_size: int = 16, seq_len: int = 32, train_size: int | None = 12_800):
        check_int(self.name, "vocab_size", vocab_size, 2)
        check_int(self.name, "seq_len", seq_len, 2)
        check_train_size(self.name, train_size)
        self.vocab_size, self.seq_len, self.train_size = vocab_size, seq_len, train_size

    def config(self):
        return {"vocab_size": self.vocab_size, "seq_len": self.seq_len, "train_size": self.train_size}

    def build(self, n: int, seed: int, split: str = "train"):
        is_training(split)
        g = torch_generator(seed, split)
        inputs = torch.randint(0, self.vocab_size - 1, (n, self.seq_len), generator=g)
        inputs[:, -1] = self.vocab_size - 1
        return inputs, inputs.clone()
