"""Masked language modelling over local text (BERT / M2-BERT pre-training objective; Orchid, arXiv:2402.18508, §4.2).

Windows of T tokens come from the ``text`` task's memory-mapped corpus. A fraction ``mask_prob`` of the
positions is chosen (M2-BERT uses 0.30, BERT 0.15); of those, 80 % become ``[MASK]``, 10 % a random token and
10 % stay unchanged. The targets hold the original token at the chosen positions and ``-100`` elsewhere, so
the loss and accuracy are over the chosen positions only. ``[MASK]`` is a new id appended to the tokenizer's
vocabulary (``vocab_size = tokenizer.vocab_size + 1``); random replacements never draw it.

Everything is drawn from the (seed, split) generator, so a batch is exactly reproducible.
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import InputError
from .base import IGNORE_INDEX, register_task, split_seed
from .text import TextLM


@register_task("mlm")
class MaskedLM(TextLM):
    def __init__(
        self,
        path: str | list = "",
        seq_len: int = 128,
        tokenizer: str = "byte",
        bpe_dir: str | None = None,
        valid_fraction: float = 0.1,
        test_path: str | list | None = None,
        cache_dir: str | None = None,
        mask_prob: float = 0.3,
    ):
        if not 0.0 < mask_prob < 1.0:
            raise InputError(f"mask_prob must be in (0, 1), got {mask_prob}")
        # masked LM reads whole windows bidirectionally: no packed documents (rows and config as before)
        super().__init__(path, seq_len, tokenizer, bpe_dir, valid_fraction, test_path, cache_dir, packed=False)
        self.mask_prob = mask_prob
        self.n_text_tokens = self.tokenizer.vocab_size
        self.mask_token = self.n_text_tokens  # appended id
        self.vocab_size = self.n_text_tokens + 1

    def config(self) -> dict[str, Any]:
        return {**super().config(), "mask_prob": self.mask_prob}

    def mask(self, tokens: torch.Tensor, seed: int, split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        """``(inputs, targets)`` for a ``(N, T)`` block of token ids, deterministic in (seed, split)."""
        g = torch.Generator().manual_seed(split_seed(seed, split) + 7_919)
        chosen = torch.rand(tokens.shape, generator=g) < self.mask_prob
        action = torch.rand(tokens.shape, generator=g)  # < 0.8 mask, < 0.9 random, else keep
        random_ids = torch.randint(0, self.n_text_tokens, tokens.shape, generator=g)
        inputs = torch.where(chosen & (action < 0.8), torch.full_like(tokens, self.mask_token), tokens)
        inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
        targets = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE_INDEX))
        return inputs, targets

    def build(self, n: int, seed: int, split: str = "train", seq_len: int | None = None):
        tokens, _ = super().build(n, seed, split, seq_len)
        return self.mask(tokens, seed, split)

    def windows(self, split: str = "valid", seq_len: int | None = None, max_windows: int | None = None):
        tokens, _ = super().windows(split, seq_len, max_windows)
        return self.mask(tokens, 0, split)
