"""sLSTM cell ops on packed documents (``segment_pos``, 0 where a document starts), every mode, float64.

Packed = separate: a row packing several documents gives each document the outputs, and the row the final state,
that each document run alone as a fresh stream gives (the part before the first start continues the carried
state), and every gradient (wx, R, the initial state) of a loss on both equals the gradient of the same loss
summed over the separate runs. Cases: starts at t = 0 and inside, one-token documents, batch 2 with different
starts per row, a split call, a prefill continued step by step across a start, and a property test (drawn document
lengths, continued or fresh first pieces, split points). The reference for the separate runs is the naive loop without ``segment_pos`` (tests/ops/test_slstm.py holds every mode equal to it).
"""

import itertools
import os
import shutil

import pytest
import torch
from helpers import assert_close
from hypothesis import given, settings
from hypothesis import strategies as st

from seqzoo.errors import InputError
from seqzoo.ops.slstm import slstm, slstm_naive

HAS_CC = shutil.which(os.environ.get("CC", "cc")) is not None
MODES = [
    "naive",
    "fused",
    pytest.param("native", marks=pytest.mark.skipif(not HAS_CC, reason="no C compiler")),
    pytest.param("compiled", marks=pytest.mark.slow),
]
H, d = 2, 3

# per row: the lengths of the pieces; a row's first piece continues the carried state unless starts_at_0
ROWS = {
    "two rows, different starts": ([[3, 1, 4, 2], [5, 5]], [False, True]),
    "one-token documents": ([[1, 1, 2, 1, 1], [1, 3, 1, 1]], [True, False]),
    "start at 0 only": ([[6], [2, 4]], [True, True]),
}


def segment_pos_of(lengths, starts_at_0):
    """``(T,)`` positions inside each piece; the first piece counts on from 7 when it continues a document."""
    parts = [torch.arange(n) + (0 if i or starts_at_0 else 7) for i, n in enumerate(lengths)]
    return torch.cat(parts)


def make(rows, seed=0, with_state=True):
    lengths, starts_at_0 = rows
    T = sum(lengths[0])
    g = torch.Generator().manual_seed(seed)
    wx = torch.randn(len(lengths), T, H, 4, d, generator=g, dtype=torch.float64)
    R = 0.4 * torch.randn(H, d, 4, d, generator=g, dtype=torch.float64)
    state = None
    if with_state:
        state = [torch.randn(len(lengths), H * d, generator=g, dtype=torch.float64) for _ in range(4)]
        state[2] = state[2].abs() + 1  # n >= 1
    pos = torch.stack([segment_pos_of(n, s) for n, s in zip(lengths, starts_at_0)])
    w_h = torch.randn(len(lengths), T, H, d, generator=g, dtype=torch.float64)
    w_s = torch.randn(4, len(lengths), H * d, generator=g, dtype=torch.float64)
    return wx, R, state, pos, w_h, w_s


def leaves(wx, R, state):
    out = [wx.clone().requires_grad_(True), R.clone().requires_grad_(True)]
    return out + ([s.clone().requires_grad_(True) for s in state] if state is not None else [])


def loss_of(h, final, w_h, w_s):
    return (h * w_h).sum() + sum((s * w).sum() for s, w in zip(final, w_s))


def packed(mode, wx, R, state, pos, w_h, w_s):
    xs = leaves(wx, R, state)
    h, final = slstm(xs[0], xs[1], None if state is None else tuple(xs[2:]), mode=mode, segment_pos=pos)
    grads = torch.autograd.grad(loss_of(h, final, w_h, w_s), xs)
    return h.detach(), [s.detach() for s in final], grads


def separate(wx, R, state, pos, w_h, w_s):
    """Each document of each row alone through the naive loop; the loss summed over them, so the gradients add."""
    xs = leaves(wx, R, state)
    wx_l, R_l, st_l = xs[0], xs[1], xs[2:]
    B, T = pos.shape
    hs, finals, loss = [], [], 0.0
    for b in range(B):
        starts = [t for t in range(T) if pos[b, t] == 0]
        bounds = sorted({0, *starts, T})
        row_h, s = [], None
        for lo, hi in itertools.pairwise(bounds):
            carried = None
            if lo == 0 and pos[b, 0] != 0 and state is not None:
                carried = tuple(x[b : b + 1] for x in st_l)
            h, s = slstm_naive(wx_l[b : b + 1, lo:hi], R_l, carried)
            row_h.append(h)
        h = torch.cat(row_h, 1)
        loss = loss + (h * w_h[b : b + 1]).sum() + sum((x * w[b : b + 1]).sum() for x, w in zip(s, w_s))
        hs.append(h)
        finals.append(s)
    grads = torch.autograd.grad(loss, xs, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for g, x in zip(grads, xs)]
    final = [torch.cat([f[i] for f in finals]).detach() for i in range(4)]
    return torch.cat(hs).detach(), final, grads


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(ROWS))
@pytest.mark.parametrize("with_state", [True, False])
def test_packed_equals_separate(mode, case, with_state):
    """Outputs, the final state of each row's last document, and the gradients of wx, R and the initial state."""
    args = make(ROWS[case], with_state=with_state)
    h0, s0, g0 = separate(*args)
    h1, s1, g1 = packed(mode, *args)
    assert_close(h1, h0, dtype=torch.float64)
    for name, a, b in zip("hcnm", s1, s0):
        assert_close(a, b, dtype=torch.float64), name
    names = ["wx", "R", "h0", "c0", "n0", "m0"]
    for name, a, b in zip(names, g1, g0):
        assert_close(a, b, dtype=torch.float64, scale=3.0), name


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_equals_the_naive_loop_with_starts(mode):
    """The C (and fused / compiled) loops against the naive loop, both given ``segment_pos``."""
    args = make(ROWS["two rows, different starts"], seed=3)
    h0, s0, g0 = packed("naive", *args)
    h1, s1, g1 = packed(mode, *args)
    for a, b in zip([h1, *s1, *g1], [h0, *s0, *g0]):
        assert_close(a, b, dtype=torch.float64, scale=3.0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cut", [1, 3, 4, 8])
def test_split_anywhere_equals_whole(mode, cut):
    """Two calls carrying the state (cut before, at and after document starts) equal one call."""
    wx, R, state, pos, _, _ = make(ROWS["two rows, different starts"], seed=5)
    st = tuple(state)
    h, final = slstm(wx, R, st, mode=mode, segment_pos=pos)
    h1, s1 = slstm(wx[:, :cut], R, st, mode=mode, segment_pos=pos[:, :cut])
    h2, s2 = slstm(wx[:, cut:], R, s1, mode=mode, segment_pos=pos[:, cut:])
    assert_close(torch.cat([h1, h2], 1), h, dtype=torch.float64)
    for a, b in zip(s2, final):
        assert_close(a, b, dtype=torch.float64)


@pytest.mark.parametrize("mode", MODES)
def test_prefill_then_steps_across_a_start(mode):
    """A packed prefill, then one token per call with its segment_pos (a document starts during the steps)."""
    wx, R, state, pos, _, _ = make(ROWS["two rows, different starts"], seed=6)
    h, final = slstm(wx, R, None, mode=mode, segment_pos=pos)
    T, pre = wx.shape[1], 3
    out, s = slstm(wx[:, :pre], R, None, mode=mode, segment_pos=pos[:, :pre])
    outs = [out]
    for t in range(pre, T):
        o, s = slstm(wx[:, t : t + 1], R, s, mode=mode, segment_pos=pos[:, t : t + 1])
        outs.append(o)
    assert_close(torch.cat(outs, 1), h, dtype=torch.float64)
    for a, b in zip(s, final):
        assert_close(a, b, dtype=torch.float64)


def test_a_start_at_t0_ignores_the_carried_state():
    """A call whose first position is 0 behaves like a call without state (and no gradient reaches the state)."""
    wx, R, state, _, _, _ = make(ROWS["start at 0 only"], seed=7)
    pos = torch.arange(wx.shape[1]).expand(wx.shape[0], -1)
    st = [s.clone().requires_grad_(True) for s in state]
    h, final = slstm(wx, R, tuple(st), mode="fused", segment_pos=pos)
    h_fresh, _ = slstm(wx, R, None, mode="fused")
    assert_close(h, h_fresh, dtype=torch.float64)
    grads = torch.autograd.grad(h.sum() + final[0].sum(), st)
    assert all(float(g.abs().max()) == 0 for g in grads)


@pytest.mark.parametrize("mode", ["fused", pytest.param("native", marks=pytest.mark.skipif(not HAS_CC, reason="cc"))])
def test_gradcheck_with_starts(mode):
    g = torch.Generator().manual_seed(8)
    wx = torch.randn(2, 5, 1, 4, 2, generator=g, dtype=torch.float64, requires_grad=True)
    R = (0.3 * torch.randn(1, 2, 4, 2, generator=g, dtype=torch.float64)).requires_grad_(True)
    pos = torch.tensor([[4, 0, 1, 0, 1], [0, 1, 2, 0, 0]])
    h0 = [torch.randn(2, 2, generator=g, dtype=torch.float64) for _ in range(4)]
    h0[2] = h0[2].abs() + 1
    h0 = [s.requires_grad_(True) for s in h0]

    def fn(wx, R, *st):
        h, final = slstm(wx, R, st, mode=mode, segment_pos=pos)
        return (h, *final)

    assert torch.autograd.gradcheck(fn, (wx, R, *h0))


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.zeros(2, 4, dtype=torch.long), r"shape \(2, 5\)"),
        (torch.zeros(2, 5), "integer tensor"),
        (torch.zeros(1, 5, dtype=torch.long), r"shape \(2, 5\)"),
    ],
)
def test_bad_segment_pos_is_refused(bad, match):
    wx = torch.randn(2, 5, 1, 4, 2)
    R = torch.zeros(1, 2, 4, 2)
    with pytest.raises(InputError, match=match):
        slstm(wx, R, segment_pos=bad)


@st.composite
def packed_rows(draw):
    """Two rows of drawn document lengths (1..5 tokens, same total T), whether each row's first piece continues a
    carried document, and a split point."""
    T = draw(st.integers(1, 12))

    def row():
        lengths, left = [], T
        while left:
            n = draw(st.integers(1, min(5, left)))
            lengths.append(n)
            left -= n
        return lengths

    rows = [row(), row()]
    return (rows, [draw(st.booleans()), draw(st.booleans())]), draw(st.integers(0, T))


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(case=packed_rows(), mode=st.sampled_from(["fused", "native"] if HAS_CC else ["fused"]))
def test_property_packed_equals_separate_and_split_anywhere_equals_whole(case, mode):
    rows, cut = case
    args = make(rows, seed=len(rows[0][0]) + 10 * cut)
    h0, s0, g0 = separate(*args)
    h1, s1, g1 = packed(mode, *args)
    for a, b in zip([h1, *s1, *g1], [h0, *s0, *g0]):
        assert_close(a, b, dtype=torch.float64, scale=3.0)
    if 0 < cut < h1.shape[1]:
        wx, R, state, pos, _, _ = args
        ha, sa = slstm(wx[:, :cut], R, tuple(state), mode=mode, segment_pos=pos[:, :cut])
        hb, sb = slstm(wx[:, cut:], R, sa, mode=mode, segment_pos=pos[:, cut:])
        assert_close(torch.cat([ha, hb], 1), h1, dtype=torch.float64)
        for a, b in zip(sb, s1):
            assert_close(a, b, dtype=torch.float64)
