"""Packed documents as properties (issue #43): hypothesis draws document lengths, a batch of two rows packed
differently, a mode and a split point; packed = separate and split anywhere = whole.

* every registered causal mixer that supports ``segment_pos``, float64, through the mixer contract;
* the mLSTM cell op at a drawn chunk size against the naive step loop run per document (final states too).

Derandomised and small (a few dozen tokens), so the default suite stays fast and every run draws the same cases.
"""

import itertools

import pytest
import torch
from helpers import assert_close
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mixer_helpers import TOL_MODES, inputs, make

from seqzoo.mixers import MIXERS
from seqzoo.ops.mlstm import mlstm, mlstm_naive_recurrent

PROPERTY = settings(
    max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow], database=None
)
PACKING = sorted(n for n, cls in MIXERS.items() if cls.causal and cls.supports_segment_pos)

# a row: documents of 1..6 tokens, 2..5 of them (T from 2 to 30)
row_lengths = st.lists(st.integers(1, 6), min_size=2, max_size=5)


def fit(rows):
    """Two rows of document lengths trimmed / padded (a last document) to one length T: ``(T, per-row cuts)``."""
    T = max(sum(r) for r in rows)
    cuts = []
    for r in rows:
        bounds = [0, *itertools.accumulate(r)]
        if bounds[-1] < T:
            bounds.append(T)
        cuts.append(bounds)
    return T, cuts


def positions(cuts, T):
    sp = torch.zeros(len(cuts), T, dtype=torch.long)
    for b, bounds in enumerate(cuts):
        for a, e in itertools.pairwise(bounds):
            sp[b, a:e] = torch.arange(e - a)
    return sp


def check_mixer(name, rows, mode_index, split):
    m = make(name)
    mode = m.modes[mode_index % len(m.modes)]
    T, cuts = fit(rows)
    x = inputs(m, T=T, seed=sum(rows[0]))
    sp = positions(cuts, T)
    whole, _ = m(x, mode=mode, segment_pos=sp)
    separate = torch.cat(
        [
            torch.cat([m(x[b : b + 1, a:e], mode=mode)[0] for a, e in itertools.pairwise(bounds)], 1)
            for b, bounds in enumerate(cuts)
        ]
    )
    assert_close(whole, separate, TOL_MODES, name=f"{mode}: packed vs separate")
    t = 1 + split % (T - 1)
    y1, s = m(x[:, :t], mode=mode, segment_pos=sp[:, :t])
    y2, _ = m(x[:, t:], state=s, mode=mode, segment_pos=sp[:, t:])
    assert_close(torch.cat([y1, y2], 1), whole, TOL_MODES, name=f"{mode}: split at {t}")


def test_some_mixer_packs():
    assert "mlstm" in PACKING and "rglru" in PACKING  # the property below is not vacuous


@pytest.mark.parametrize("name", PACKING)
def test_mixers_packed_equals_separate_and_split_equals_whole(name):
    @settings(PROPERTY, max_examples=8)
    @given(rows=st.lists(row_lengths, min_size=2, max_size=2), mode_index=st.integers(0, 5), split=st.integers(0, 100))
    def check(rows, mode_index, split):
        check_mixer(name, rows, mode_index, split)

    check()


def naive_per_document(inputs, cuts):
    """Each document of each row run alone by the naive loop (eps = 0): h and the last documents' states."""
    hs, finals = [], []
    for b, bounds in enumerate(cuts):
        row = []
        for a, e in itertools.pairwise(bounds):
            h, s = mlstm_naive_recurrent(*(t[b : b + 1, a:e] for t in inputs), eps=0.0)
            row.append(h)
        hs.append(torch.cat(row, 1))
        finals.append(s)
    return torch.cat(hs), [torch.cat(parts) for parts in zip(*finals, strict=True)]


@settings(PROPERTY, max_examples=25)
@given(
    rows=st.lists(row_lengths, min_size=2, max_size=2),
    mode=st.sampled_from(["recurrent", "parallel", "chunkwise"]),
    chunk_size=st.sampled_from([1, 2, 3, 4, 8, 64]),
    split=st.integers(0, 100),
)
def test_mlstm_op_packed_equals_separate_and_split_equals_whole(rows, mode, chunk_size, split):
    T, cuts = fit(rows)
    g = torch.Generator().manual_seed(T)
    q, k = (torch.randn(2, T, 2, 4, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, T, 2, 3, generator=g, dtype=torch.float64)
    i = 2 * torch.randn(2, T, 2, generator=g, dtype=torch.float64)
    f = 1 + 2 * torch.randn(2, T, 2, generator=g, dtype=torch.float64)
    reset = positions(cuts, T) == 0
    ins = (q, k, v, i, f)
    h, state = mlstm(*ins, mode=mode, chunk_size=chunk_size, eps=0.0, reset=reset)
    h_ref, state_ref = naive_per_document(ins, cuts)
    assert_close(h, h_ref, 1e-12, name="h")
    for a, b in zip(state, state_ref, strict=True):
        assert_close(a, b, 1e-12, name="state")
    t = 1 + split % (T - 1)
    h1, s1 = mlstm(*(x[:, :t] for x in ins), mode=mode, chunk_size=chunk_size, eps=0.0, reset=reset[:, :t])
    h2, s2 = mlstm(*(x[:, t:] for x in ins), s1, mode=mode, chunk_size=chunk_size, eps=0.0, reset=reset[:, t:])
    assert_close(torch.cat([h1, h2], 1), h, 1e-12, name=f"h split at {t}")
    for a, b in zip(s2, state, strict=True):
        assert_close(a, b, 1e-12, name=f"state split at {t}")
