"""MAD's fuzzy in-context recall (Poli et al., arXiv:2403.17844; mad-lab's ``fuzzy-in-context-recall``
with ``multi_query=True``, the benchmark's setting): keys and values are runs of 1 to ``k_motif_size`` /
``v_motif_size`` adjacent tokens.

Vocabulary ``V``: the pad token ``V-1``; of the other ``s = V-1`` tokens (less ``noise_vocab_size`` noise tokens at
the top), keys are ``[0, s/2)`` and values ``[s/2, s)``. A key of size ``m`` is an ordered run of ``m`` distinct key
tokens, uniform over all such runs (mad-lab draws uniformly from the list of permutations); values alike. Per sample:

1. the probe: a key size (uniform over ``1 .. k_motif_size`` in training samples; ``k_motif_size`` in test samples,
   where every key has the largest size), a value size (uniform over ``1 .. v_motif_size``), a key and a value of those
   sizes, and an insertion index uniform in ``[0, T - 2·(probe length))``;
2. pairs are appended while the row is shorter than ``T - (probe length) - (k_motif_size + v_motif_size)``: once the
   row is at least as long as the insertion index, the probe pair itself (unscored); otherwise, with probability
   ``frac_noise``, as many noise tokens as a pair of freshly drawn sizes; otherwise a key of a drawn size and its value
   in this sample (the probe's value when the key is the probe's key; else the value given to that key before, or a new
   one of a drawn size). A pair whose key appeared before in the sample has its value tokens as targets;
3. the probe's key and value again at the end (the value is the target), then pad tokens in front up to ``T + 1``.

When the insertion index lies beyond the point where appending stops, the probe pair is never inserted and the final
query asks for a value the row never showed, as in mad-lab (it happens for short probes; the test accuracy's ceiling
is therefore below 1). Rows are ``T`` tokens (``T + 1`` shifted by one): the ``train`` split's targets are the next
token everywhere (pad included, as MAD trains), the ``valid`` / ``test`` splits' targets the scored value tokens only.
"""

from __future__ import annotations

import random

import torch

from ...errors import InputError
from ..base import IGNORE_INDEX, Task, register_task
from .common import check_fraction, check_int, check_train_size, is_training, python_rng


def fuzzy_sample(
    rng: random.Random, V: int, T: int, K: int, Vm: int, noise_vocab_size: int, frac_noise: float, train: bool
) -> tuple[list[int], list[int]]:
    """One ``(inputs, targets)`` pair of ``T`` tokens each (module docstring)."""
    pad = V - 1
    s = V - 1 - noise_vocab_size
    key_vocab, value_vocab = range(s // 2), range(s // 2, s)
    noise_vocab = range(s, s + noise_vocab_size)
    key_sizes = list(range(1, K + 1)) if train else [K]
    value_sizes = list(range(1, Vm + 1))

    def run(vocab, size):
        return tuple(rng.sample(vocab, size))

    kp_size, vp_size = rng.choice(key_sizes), rng.choice(value_sizes)
    k_probe, v_probe = run(key_vocab, kp_size), run(value_vocab, vp_size)
    probe_len = kp_size + vp_size
    insert_at = rng.randrange(T - 2 * probe_len)
    inserted = False
    value_of: dict[tuple, tuple] = {}  # keys of different sizes never compare equal, so one map serves all sizes
    presented: set[tuple] = set()
    inputs: list[int] = []
    targets: list[int] = []
    while len(inputs) < T - probe_len - (K + Vm):
        k_size, v_size = rng.choice(key_sizes), rng.choice(value_sizes)
        if len(inputs) >= insert_at and not inserted:
            inputs += [*k_probe, *v_probe]
            targets += [IGNORE_INDEX] * probe_len
            value_of[k_probe] = v_probe
            presented.add(k_probe)
            inserted = True
            continue
        if frac_noise > 0 and rng.random() < frac_noise:
            inputs += [rng.choice(noise_vocab) for _ in range(k_size + v_size)]
            targets += [IGNORE_INDEX] * (k_size + v_size)
            continue
        k = run(key_vocab, k_size)
        if k == k_probe:
            v = v_probe
            inserted = True  # mad-lab counts a chance draw of the probe's key as its insertion
        else:
            v = value_of.setdefault(k, run(value_vocab, v_size))
        inputs += [*k, *v]
        targets += [IGNORE_INDEX] * k_size + (list(v) if k in presented else [IGNORE_INDEX] * len(v))
        presented.add(k)
    inputs += [*k_probe, *v_probe]
    targets += [IGNORE_INDEX] * kp_size + list(v_probe)
    n_pad = T + 1 - len(inputs)
    inputs = [pad] * n_pad + inputs
    targets = [IGNORE_INDEX] * n_pad + targets
    return inputs[:-1], (inputs if train else targets)[1:]


@register_task("mad-fuzzy-recall")
class MadFuzzyRecall(Task):
    def __init__(
        self,
        vocab_size: int = 16,
        seq_len: int = 128,
        k_motif_size: int = 3,
        v_motif_size: int = 3,
        noise_vocab_size: int = 0,
        frac_noise: float = 0.0,
        train_size: int | None = 12_800,
    ):
        name = self.name
        check_int(name, "k_motif_size", k_motif_size, 1)
        check_int(name, "v_motif_size", v_motif_size, 1)
        check_int(name, "noise_vocab_size", noise_vocab_size, 0)
        s = vocab_size - 1 - noise_vocab_size if isinstance(vocab_size, int) else 0
        need = 1 + noise_vocab_size + 2 * max(k_motif_size, v_motif_size)
        check_int(name, "vocab_size", vocab_size, need)  # runs of the largest size need that many distinct tokens
        if s // 2 < k_motif_size or s - s // 2 < v_motif_size:
            raise InputError(f"{name}: vocab_size={vocab_size} leaves too few key or value tokens for the motif sizes")
        check_int(name, "seq_len", seq_len, 4 * (k_motif_size + v_motif_size) + 1)
        check_fraction(name, "frac_noise", frac_noise)
        if frac_noise > 0 and noise_vocab_size == 0:
            raise InputError(f"{name}: noise_vocab_size must be >= 1 when frac_noise > 0, got 0")
        check_train_size(name, train_size)
        self.vocab_size, self.seq_len, self.train_size = vocab_size, seq_len, train_size
        self.k_motif_size, self.v_motif_size = k_motif_size, v_motif_size
        self.noise_vocab_size, self.frac_noise = noise_vocab_size, float(frac_noise)

    def config(self):
        return {
            "vocab_size": self.vocab_size,
            "seq_len": self.seq_len,
            "k_motif_size": self.k_motif_size,
            "v_motif_size": self.v_motif_size,
            "noise_vocab_size": self.noise_vocab_size,
            "frac_noise": self.frac_noise,
            "train_size": self.train_size,
        }

    def build(self, n: int, seed: int, split: str = "train"):
        train = is_training(split)
        rng = python_rng(seed, split)
        rows = [
            fuzzy_sample(
                rng,
                self.vocab_size,
                self.seq_len,
                self.k_motif_size,
                self.v_motif_size,
                self.noise_vocab_size,
                self.frac_noise,
                train,
            )
            for _ in range(n)
        ]
        return torch.tensor([r[0] for r in rows], dtype=torch.long), torch.tensor(
            [r[1] for r in rows], dtype=torch.long
        )
