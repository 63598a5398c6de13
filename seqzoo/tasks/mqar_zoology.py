"""Zoology's MQAR distribution (Arora et al., "Zoology", arXiv:2312.04927, §3 and App. E; its ``multiquery_ar``).

For ``P`` pairs, length ``T`` and vocabulary ``V``, with ``h = V // 2``:

* keys: ``P`` distinct tokens from ``[1, h)``; values: ``P`` distinct tokens from ``[h, V)``; the context is
  ``k1 v1 k2 v2 ... kP vP`` (positions ``0 .. 2P-1``);
* every key is queried exactly once. The query region (positions ``2P .. T-1``) has ``s = (T - 2P) / 2`` even slots;
  gaps ``g_1, ..., g_P`` are drawn one after the other without replacement from ``{0, ..., s-1}`` with
  probability ``p(g) ∝ a·(g+1)^(a-1)`` (``a = power_a``, 0.01 in the paper: close to ``1/(g+1)``, so queries
  cluster right after the context), and key ``k_i`` is written at position ``2P + 2·g_i``. Because the gaps are
  drawn in the order of the pairs, the first pairs tend to get the smaller gaps (zoology's sampling does the same);
* the target at the position of ``k_i`` is ``v_i`` (zoology puts ``v_i`` as the label one step after the query
  and shifts the labels by one, which is the same); every other position is unscored;
* every other position of the query region is filler: a token uniform in ``[0, V)`` (``random_filler``, the
  generator's default; context keys then reappear unscored) or 0 (the setting of the Fig. 2 configurations).

Ordered sampling without replacement proportional to ``w`` is drawn with exponential races: ``E_j / w_j`` for
i.i.d. ``E_j ~ Exp(1)``, sorted ascending; the order of the sorted items is distributed exactly as successive
draws that each pick ``j`` with probability ``w_j / Σ_remaining w`` (the first is the minimum of independent
exponentials with rates ``w_j``, and memorylessness repeats the argument for the rest).
"""

from __future__ import annotations

import math

import torch

from ..errors import InputError
from .base import IGNORE_INDEX

DEFAULT_POWER_A = 0.01  # zoology's train_power_a / test_power_a, the paper's setting


def check_zoology_settings(vocab_size: int, num_pairs: int, seq_len: int, power_a: float) -> None:
    """Zoology's asserts (``input_seq_len`` even, ``vocab_size > input_seq_len``, ``4·num_kv_pairs <=
    input_seq_len``) and enough distinct values, as :class:`InputError` naming the argument."""
    if seq_len % 2:
        raise InputError(f"mqar protocol='zoology': seq_len must be even, got {seq_len}")
    if vocab_size <= seq_len:
        raise InputError(f"mqar protocol='zoology': vocab_size must be > seq_len={seq_len}, got {vocab_size}")
    if 4 * num_pairs > seq_len:
        raise InputError(
            f"mqar protocol='zoology': num_pairs must be in [1, seq_len/4 = {seq_len // 4}] for seq_len={seq_len}, "
            f"got {num_pairs}"
        )
    if num_pairs > vocab_size - vocab_size // 2:
        raise InputError(
            f"mqar protocol='zoology': num_pairs must be <= {vocab_size - vocab_size // 2} distinct values for "
            f"vocab_size={vocab_size}, got {num_pairs}"
        )
    if isinstance(power_a, bool) or not isinstance(power_a, (int, float)) or not (0 < power_a < math.inf):
        raise InputError(f"mqar protocol='zoology': power_a must be a finite number > 0, got {power_a!r}")


def distinct_tokens(n: int, low: int, high: int, count: int, g: torch.Generator) -> torch.Tensor:
    """``(n, count)`` tokens, distinct within a row, uniform over ordered draws from ``[low, high)``."""
    # the `count` smallest of uniform draws, in order: argsort(-1)[:, :count] without sorting the whole row
    return torch.rand(n, high - low, generator=g).topk(count, -1, largest=False, sorted=True).indices + low


def power_law_gaps(n: int, slots: int, count: int, power_a: float, g: torch.Generator) -> torch.Tensor:
    """``(n, count)`` gaps in ``[0, slots)``: successive draws without replacement, ``p(j) ∝ (j+1)^(power_a-1)``
    (the constant factor ``power_a`` cancels), column i the i-th draw."""
    weights = torch.arange(1, slots + 1, dtype=torch.float64) ** (power_a - 1.0)
    races = torch.empty(n, slots, dtype=torch.float64).exponential_(generator=g) / weights
    return races.topk(count, -1, largest=False, sorted=True).indices


def zoology_mqar(
    n: int, vocab_size: int, num_pairs: int, seq_len: int, power_a: float, random_filler: bool, g: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)`` of shape ``(n, seq_len)`` drawn from zoology's distribution (module docstring)."""
    P, T, V, half = num_pairs, seq_len, vocab_size, vocab_size // 2
    keys = distinct_tokens(n, 1, half, P, g)
    values = distinct_tokens(n, half, V, P, g)
    gaps = power_law_gaps(n, (T - 2 * P) // 2, P, power_a, g)
    if random_filler:
        inputs = torch.randint(0, V, (n, T), generator=g)
    else:
        inputs = torch.zeros(n, T, dtype=torch.long)
    targets = torch.full((n, T), IGNORE_INDEX, dtype=torch.long)
    inputs[:, 0 : 2 * P : 2], inputs[:, 1 : 2 * P : 2] = keys, values
    pos = 2 * P + 2 * gaps
    inputs.scatter_(1, pos, keys)
    targets.scatter_(1, pos, values)
    return inputs, targets
