"""Memory Horizon (GateLoop paper, Katsch arXiv:2311.01927, §5.1, appendix A, Table 2).

Inputs are numbers in [0, max_input] (id = value) and a reset token (id = max_input + 1) placed at ``n_resets``
distinct uniform positions. At every position t the target compresses the numbers since the last reset
(exclusive) or the sequence start: pair the list's ends inwards, add the first product, subtract the next,
alternating; an odd list's middle element gets the current sign; reduce modulo ``modulus`` (floor modulo).
Appending one number re-pairs the whole list, so the model must hold every number since the reset. All
positions are scored, with no shift (``targets[:, t]`` is a function of ``inputs[:, :t+1]``). Output classes are
0..max_output (``max_output + 1`` classes; with modulus = max_output the last class never occurs).
``spans[:, t]`` = numbers since the last reset = the memory span the target needs (Fig. 7's x-axis).
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import InputError
from .base import Task, register_task, split_seed


@register_task("memory_horizon")
class MemoryHorizon(Task):
    def __init__(
        self,
        seq_len: int = 1024,
        n_resets: int = 3,
        max_input: int = 4,
        max_output: int = 50,
        modulus: int | None = None,
        train_size: int | None = 2000,
        test_size: int = 500,
    ):
        for name, val, lo in (
            ("seq_len", seq_len, 1),
            ("n_resets", n_resets, 0),
            ("max_input", max_input, 0),
            ("max_output", max_output, 1),
            ("test_size", test_size, 1),
        ):
            if not isinstance(val, int) or isinstance(val, bool) or val < lo:
                raise InputError(f"memory_horizon: {name} must be an int >= {lo}, got {val!r}")
        if n_resets > seq_len:
            raise InputError(f"memory_horizon: n_resets must be <= seq_len={seq_len}, got {n_resets}")
        modulus = max_output if modulus is None else modulus
        if not isinstance(modulus, int) or not 1 <= modulus <= max_output + 1:
            raise InputError(
                f"memory_horizon: modulus must be an int in [1, max_output + 1 = {max_output + 1}], got {modulus!r}"
            )
        if train_size is not None and (not isinstance(train_size, int) or train_size <= 0):
            raise InputError(f"memory_horizon: train_size must be a positive int or None, got {train_size!r}")
        self.seq_len, self.n_resets, self.max_input, self.max_output = seq_len, n_resets, max_input, max_output
        self.modulus, self.train_size, self.test_size = modulus, train_size, test_size
        self.reset_id = max_input + 1
        self.input_vocab = max_input + 2  # numbers + reset
        self.n_classes = max_output + 1
        self.vocab_size = max(self.input_vocab, self.n_classes)  # one table for a shared LM vocabulary

    def config(self):
        return {
            "seq_len": self.seq_len,
            "n_resets": self.n_resets,
            "max_input": self.max_input,
            "max_output": self.max_output,
            "modulus": self.modulus,
            "train_size": self.train_size,
            "test_size": self.test_size,
        }

    def build(self, n: int, seed: int, split: str = "train") -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets, _ = self.build_with_spans(n, seed, split)
        return inputs, targets

    def build_with_spans(self, n: int, seed: int, split: str = "train"):
        """``(inputs, targets, spans)``, each ``(n, seq_len)`` long; deterministic in (seed, split)."""
        if not isinstance(n, int) or n <= 0:
            raise InputError(f"memory_horizon: n must be a positive int, got {n!r}")
        g = torch.Generator().manual_seed(split_seed(seed, split))
        L = self.seq_len
        x = torch.randint(0, self.max_input + 1, (n, L), generator=g)  # (n, L) numbers
        if self.n_resets:
            pos = torch.rand(n, L, generator=g).argsort(-1)[:, : self.n_resets]  # (n, R) distinct positions
            x.scatter_(1, pos, self.reset_id)
        y, span = self._targets(x)
        return x, y, span

    def _targets(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Closed form of the rule, vectorised over samples and positions (a loop over the pair index r).

        For the list a_0..a_{m-1} since the last reset, with p = ⌊m/2⌋:
        s = Σ_{r<p} (-1)^r a_r a_{m-1-r} + [m odd]·(-1)^p·a_p,   target = s mod modulus (floor modulo).
        NumPy (single-threaded), which is much faster than small torch ops on a busy machine.
        """
        if x.shape[0] > 32:  # blocks of samples: small temporaries stay in cache
            parts = [self._targets(x[i : i + 32]) for i in range(0, x.shape[0], 32)]
            return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        xn = x.numpy()
        n_s, L = xn.shape
        t = np.broadcast_to(np.arange(L), (n_s, L))  # (n, L) position
        is_reset = xn == self.reset_id
        # r0 = first position of the current list = (last reset at or before t) + 1, or 0
        r0 = np.maximum.accumulate(np.where(is_reset, t + 1, 0), axis=1)  # (n, L)
        span = t - r0 + 1  # (n, L): numbers since the reset (0 at a reset)
        val = np.where(is_reset, 0, xn)  # resets are never read (they lie outside every list)
        p = span // 2
        rows = np.arange(n_s)[:, None] * L
        flat = np.concatenate([val.ravel(), np.zeros(L, dtype=val.dtype)])  # padded: indices past the end read 0
        i_left, i_right = rows + r0, rows + t  # flat indices of a_0 and a_{m-1}
        s = np.zeros((n_s, L), dtype=np.int64)
        for r in range(int(p.max()) if p.size else 0):
            prod = flat[i_left + r] * flat[i_right - r]  # a_r a_{m-1-r} (garbage where r >= p, masked below)
            s += np.where(r < p, prod, 0) * (1 if r % 2 == 0 else -1)
        middle = flat[i_left + p] * (1 - 2 * (p % 2))  # (-1)^p a_p
        s += np.where(span % 2 == 1, middle, 0)
        y = np.mod(s, self.modulus)  # floor modulo: -14 -> 36
        return torch.from_numpy(y).long(), torch.from_numpy(np.ascontiguousarray(span)).long()

    def fixed_splits(self, seed: int = 0):
        """The paper's fixed sets: ``train_size`` samples (split "train") and ``test_size`` (split "test")."""
        return self.build_with_spans(self.train_size or 2000, seed, "train"), self.build_with_spans(
            self.test_size, seed, "test"
        )
