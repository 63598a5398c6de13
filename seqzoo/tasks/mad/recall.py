"""MAD's multi-query in-context recall and noisy in-context recall (Poli et al., arXiv:2403.17844;
mad-lab's ``in-context-recall`` / ``noisy-in-context-recall`` with ``multi_query=True``, the benchmark's setting).

Vocabulary ``V`` split as: keys ``[0, s/2)``, values ``[s/2, s)`` with ``s = V - noise_vocab_size``, noise tokens
``[s, V)``. A sample of ``seq_len = T`` (even) tokens is ``P = T/2`` two-token slots:

* slots ``0 .. P-2``: with probability ``frac_noise`` two noise tokens (uniform over the noise vocabulary), else a
  key-value pair ``k v``: ``k`` uniform over the keys, ``v`` the value this sample assigned to ``k`` (uniform over
  the values the first time ``k`` appears, the same value every later time). One slot index, uniform in
  ``[0, P)``, is never noise (MAD's guarantee of one pair; it may fall on the last slot, which is a pair anyway);
* slot ``P-1`` is the final query: a key drawn uniformly from the distinct keys the sample presented, and its value.

MAD feeds the first ``T-1`` tokens and shifts the targets by one: rows are ``T-1`` tokens long. ``train`` split:
the target at every position is the next token (``inputs[1:]``; keys and noise included, as MAD trains).
``valid`` / ``test`` splits: only the positions where the next token is the value of a key presented earlier in
the sample (every repeated key, and the final query) are scored, −100 elsewhere, as MAD's test set scores them.
A row whose slots all came out noise (probability ``frac_noise^(P-1)/P``; mad-lab's generator fails there) gets a
pair in its first slot.
"""

from __future__ import annotations

import torch

from ...errors import InputError
from ..base import IGNORE_INDEX, Task, register_task
from .common import check_fraction, check_int, check_train_size, is_training, torch_generator


def recall_settings(task: str, vocab_size, seq_len, noise_vocab_size, frac_noise, train_size) -> None:
    """MAD's asserts (``seq_len`` even, ``0 <= frac_noise < 1``, a noise vocabulary when there is noise) and room
    for one key and one value, as :class:`InputError` naming the argument."""
    check_int(task, "seq_len", seq_len, 4)
    if seq_len % 2:
        raise InputError(f"{task}: seq_len must be even (key-value slots of 2 tokens), got {seq_len}")
    check_int(task, "noise_vocab_size", noise_vocab_size, 0)
    check_int(task, "vocab_size", vocab_size, noise_vocab_size + 2)
    check_fraction(task, "frac_noise", frac_noise)
    if frac_noise > 0 and noise_vocab_size == 0:
        raise InputError(f"{task}: noise_vocab_size must be >= 1 when frac_noise > 0, got 0")
    check_train_size(task, train_size)


def recall_batch(
    n: int, vocab_size: int, seq_len: int, noise_vocab_size: int, frac_noise: float, train: bool, g: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)`` of shape ``(n, seq_len - 1)`` (module docstring)."""
    s = vocab_size - noise_vocab_size
    n_keys, n_values, P = s // 2, s - s // 2, seq_len // 2
    slots = P - 1
    noise = torch.rand(n, slots, generator=g) < frac_noise if frac_noise > 0 else torch.zeros(n, slots, dtype=bool)
    kept = torch.randint(0, P, (n,), generator=g)
    noise[torch.arange(n)[kept < slots], kept[kept < slots]] = False
    noise[~(~noise).any(1), 0] = False  # every slot noise: see the module docstring
    keys = torch.randint(0, n_keys, (n, slots), generator=g)
    assigned = torch.randint(n_keys, n_keys + n_values, (n, n_keys), generator=g)  # the sample's key -> value map
    values = assigned.gather(1, keys)
    noise_tokens = torch.randint(s, max(vocab_size, s + 1), (n, slots, 2), generator=g)
    pair = ~noise
    # a pair's key was presented before when its first pair slot is an earlier one (noise slots never count);
    # the first slot per (row, key) keeps memory at n * (slots + keys), not n * slots * keys
    slot = torch.arange(slots).expand(n, slots)
    first = torch.full((n, n_keys), slots, dtype=torch.long)
    first.scatter_reduce_(1, keys, torch.where(pair, slot, slots), reduce="amin")
    seen_before = pair & (slot > first.gather(1, keys))
    presented = first < slots  # (n, n_keys)
    probe = torch.rand(n, n_keys, generator=g).masked_fill(~presented, -1.0).argmax(1)  # uniform presented key
    seq = torch.empty(n, seq_len, dtype=torch.long)
    seq[:, 0 : 2 * slots : 2] = torch.where(pair, keys, noise_tokens[..., 0])
    seq[:, 1 : 2 * slots : 2] = torch.where(pair, values, noise_tokens[..., 1])
    seq[:, -2], seq[:, -1] = probe, assigned.gather(1, probe[:, None])[:, 0]
    if train:
        return seq[:, :-1].clone(), seq[:, 1:].clone()
    scored = torch.full((n, seq_len), IGNORE_INDEX, dtype=torch.long)
    scored[:, 1 : 2 * slots : 2] = torch.where(pair & seen_before, values, IGNORE_INDEX)
    scored[:, -1] = seq[:, -1]
    return seq[:, :-1].clone(), scored[:, 1:].clone()


@register_task("mad-noisy-recall")
class MadNoisyRecall(Task):
    """MAD's noisy in-context recall: key-value pairs among noise-token slots; defaults: its benchmark baseline."""

    def __init__(
        self,
        vocab_size: int = 32,
        seq_len: int = 128,
        noise_vocab_size: int = 16,
        frac_noise: float = 0.2,
        train_size: int | None = 12_800,
    ):
        recall_settings(self.name, vocab_size, seq_len, noise_vocab_size, frac_noise, train_size)
        self.vocab_size, self.seq_len, self.train_size = vocab_size, seq_len, train_size
        self.noise_vocab_size, self.frac_noise = noise_vocab_size, float(frac_noise)

    def config(self):
        return {
            "vocab_size": self.vocab_size,
            "seq_len": self.seq_len,
            "noise_vocab_size": self.noise_vocab_size,
            "frac_noise": self.frac_noise,
            "train_size": self.train_size,
        }

    def build(self, n: int, seed: int, split: str = "train"):
        train = is_training(split)
        g = torch_generator(seed, split)
        return recall_batch(n, self.vocab_size, self.seq_len, self.noise_vocab_size, self.frac_noise, train, g)


@register_task("mad-recall")
class MadRecall(MadNoisyRecall):
    """MAD's multi-query in-context recall: key-value pairs, repeated keys recalled; defaults: its benchmark baseline."""

    def __init__(self, vocab_size: int = 16, seq_len: int = 128, train_size: int | None = 12_800):
        super().__init__(vocab_size, seq_len, 0, 0.0, train_size)

    def config(self):
        return {"vocab_size": self.vocab_size, "seq_len": self.seq_len, "train_size": self.train_size}
