"""Shared pieces of the registry-wide mixer tests (``tests/test_mixer_contract.py``, ``tests/test_packed_properties.py``):
a registered mixer built from its ``test_kwargs`` in float64, its inputs, and the tolerance between modes. Test files
import from here, never from each other.
"""

from __future__ import annotations

import torch

from seqzoo.mixers import MIXERS, build_mixer

D = 16
TOL_MODES = 1e-6  # float64: modes of one mixer computed by different algorithms (relative to max(1, max |ref|))


def make(name, seed=0):
    torch.manual_seed(seed)
    cls = MIXERS[name]
    m = build_mixer(name, d_model=getattr(cls, "test_d_model", D), **cls.test_kwargs).double()
    return m.eval()


def inputs(m, B=2, T=13, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, m.d_model, generator=g, dtype=torch.float64)
