"""Registry-wide mixer contract (ARCHITECTURE.md "The contracts", seqzoo/mixers/base.py): every mixer in MIXERS passes these, with no special cases.

A new mixer joins by registering itself and setting ``test_kwargs`` (tiny constructor arguments).
Checks run in float64 so that a genuine mismatch is never hidden by rounding.
"""

import itertools

import pytest
import torch
from helpers import assert_close
from mixer_helpers import TOL_MODES, D, inputs, make

from seqzoo.errors import InputError
from seqzoo.mixers import MIXERS, build_mixer

NAMES = sorted(MIXERS)


def test_registry_has_the_baselines():
    assert {"attention", "local_attention"} <= set(MIXERS)


@pytest.mark.parametrize("name", NAMES)
def test_declares_contract(name):
    m = make(name)
    assert isinstance(m.modes, tuple) and m.modes and all(isinstance(s, str) for s in m.modes)
    assert isinstance(m.causal, bool)
    x = inputs(m)
    y, _ = m(x)
    assert y.shape == x.shape and y.dtype == x.dtype


@pytest.mark.parametrize("name", NAMES)
def test_all_modes_agree(name):
    m = make(name)
    x = inputs(m)
    ref, _ = m(x, mode=m.modes[0])
    for mode in m.modes[1:]:
        y, _ = m(x, mode=mode)
        assert_close(y, ref, TOL_MODES)


@pytest.mark.parametrize("name", NAMES)
def test_causality(name):
    m = make(name)
    x = inputs(m)
    t = 6
    x2 = x.clone()
    x2[:, t + 1 :] = torch.randn_like(x2[:, t + 1 :])
    for mode in m.modes:
        y1, _ = m(x, mode=mode)
        y2, _ = m(x2, mode=mode)
        if m.causal:
            assert_close(y2[:, : t + 1], y1[:, : t + 1], 1e-10)
        else:  # a non-causal mixer must actually look ahead, and must refuse state
            assert not torch.allclose(y2[:, : t + 1], y1[:, : t + 1])
    if not m.causal:
        _, state = m(x)
        assert state is None


@pytest.mark.parametrize("name", NAMES)
def test_split_with_state_equals_whole(name):
    m = make(name)
    if not m.causal:
        pytest.skip("non-causal mixers carry no state (contract)")
    x = inputs(m, T=17)
    for mode in m.modes:
        whole, _ = m(x, mode=mode)
        for t in (1, 6, 11, 16):
            y1, s = m(x[:, :t], mode=mode)
            y2, _ = m(x[:, t:], state=s, mode=mode)
            assert_close(torch.cat([y1, y2], 1), whole, TOL_MODES)
        # three pieces, carrying state twice
        y1, s = m(x[:, :4], mode=mode)
        y2, s = m(x[:, 4:9], state=s, mode=mode)
        y3, _ = m(x[:, 9:], state=s, mode=mode)
        assert_close(torch.cat([y1, y2, y3], 1), whole, TOL_MODES)


@pytest.mark.parametrize("name", NAMES)
def test_prefill_then_steps_equals_full(name):
    m = make(name)
    if not m.causal:
        pytest.skip("non-causal mixers carry no state (contract)")
    x = inputs(m, T=15)
    whole, _ = m(x)
    P = 5
    y, s = m(x[:, :P])
    outs = [y]
    for t in range(P, x.shape[1]):
        y, s = m(x[:, t : t + 1], state=s)
        outs.append(y)
    assert_close(torch.cat(outs, 1), whole, TOL_MODES)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_flow(name):
    m = make(name).train()
    x = inputs(m).requires_grad_(True)
    y, _ = m(x)
    (y.square().mean()).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for pname, p in m.named_parameters():
        if p.requires_grad:
            assert p.grad is not None, f"no gradient reached {pname}"
            assert torch.isfinite(p.grad).all(), f"non-finite gradient in {pname}"


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_raises_clear_errors(name):
    m = make(name)
    x = inputs(m)
    with pytest.raises(ValueError, match="shape"):
        m(x[0])  # missing batch dim
    with pytest.raises(ValueError, match="d_model"):
        m(torch.randn(2, 5, m.d_model + 1, dtype=torch.float64))
    with pytest.raises(TypeError, match="floating"):
        m(torch.ones(2, 5, m.d_model, dtype=torch.long))
    with pytest.raises(ValueError, match="mode"):
        m(x, mode="no-such-mode")
    with pytest.raises(ValueError, match="unknown mixer"):
        build_mixer(name + "-typo", d_model=D)


@pytest.mark.parametrize("name", NAMES)
def test_float32_runs_and_matches_float64(name):
    m64 = make(name)
    m32 = make(name).float()
    x = inputs(m64)
    y64, _ = m64(x)
    y32, _ = m32(x.float())
    assert y32.dtype == torch.float32
    assert_close(y32.double(), y64, 1e-3)


@pytest.mark.parametrize("name", NAMES)
def test_every_mode_trains_under_bf16_autocast(name):
    """Mixed precision as training uses it (``--precision bf16``; ``auto`` on a CUDA GPU): float32 weights, the
    matmuls autocast to bf16. Every mode runs forward and backward without a dtype error, returns the input's dtype,
    and stays near the float32 result; every gradient is finite. (The mLSTM's q/k/v map and its chunk-state op
    failed here with float32 / bf16 operands, first seen in ``seqzoo train --device cuda``.)"""
    m = make(name).float().train()
    x = inputs(m).float()
    for mode in m.modes:
        ref, _ = m(x, mode=mode)
        m.zero_grad()
        xg = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, _ = m(xg, mode=mode)
        assert y.dtype in (torch.float32, torch.bfloat16), (mode, y.dtype)
        assert_close(y.double(), ref.detach().double(), 5e-2)
        y.float().square().mean().backward()
        assert torch.isfinite(xg.grad).all(), mode
        for pname, p in m.named_parameters():
            if p.requires_grad and p.grad is not None:
                assert torch.isfinite(p.grad).all(), f"{mode}: non-finite gradient in {pname}"


# ---------------------------------------------------------------- packed documents (segment_pos), issue #43
# Every causal mixer that declares ``supports_segment_pos`` must equal its documents run alone as fresh streams
# (outputs, the final state of the last document, every gradient); every other mixer must refuse segment_pos.
CAUSAL = [n for n in NAMES if MIXERS[n].causal]
T_PACKED = 17
# row 0: a start at 0, at 4 and 12 (chunk edges for chunks of 4), inside chunks at 6 and 7 (documents of 2 and 1
# tokens: shorter than a width-4 conv); row 1: continues the carried stream up to its first start at 3, then starts
# at 8 (a chunk edge) and 9, and a one-token last document at 16
PACKED_STARTS = [[0, 4, 6, 7, 12], [3, 8, 9, 16]]
TOL_GRAD = 3 * TOL_MODES


def segment_positions(starts, T, carried=0):
    """``(B, T)`` long: the position inside the current document (0 at a start); before a row's first start the
    positions continue a document of ``carried`` tokens held by the state carried in from an earlier call."""
    sp = torch.zeros(len(starts), T, dtype=torch.long)
    for b, row in enumerate(starts):
        last = -carried
        for t in range(T):
            last = t if t in row else last
            sp[b, t] = t - last
    return sp


def documents(starts, T):
    """Per row, the (begin, end) spans of its documents in the packed row (the first may continue the stream)."""
    out = []
    for row in starts:
        cuts = sorted({0, *row, T})
        out.append(list(itertools.pairwise(cuts)))
    return out


def packed_run(m, mode, prefix, x, sp, x_next):
    """The packed call after a prefix call (its state carried in), then a continuation from the final state."""
    _, s = m(prefix, mode=mode)
    y, s = m(x, state=s, mode=mode, segment_pos=sp)
    y_next, _ = m(x_next, state=s, mode=mode)
    return y, y_next


def separate_run(m, mode, prefix, x, x_next, starts):
    """Each document of each row alone: a fresh stream, except a row's first document when it continues the
    prefix (then prefix + document run as one stream); the continuation from the last document's state."""
    ys, nexts = [], []
    for b, spans in enumerate(documents(starts, x.shape[1])):
        row = []
        for a, e in spans:
            doc = x[b : b + 1, a:e]
            if a == 0 and 0 not in starts[b]:
                y, s = m(torch.cat([prefix[b : b + 1], doc], 1), mode=mode)
                y = y[:, prefix.shape[1] :]
            else:
                y, s = m(doc, mode=mode)
            row.append(y)
        ys.append(torch.cat(row, 1))
        nexts.append(m(x_next[b : b + 1], state=s, mode=mode)[0])
    return torch.cat(ys), torch.cat(nexts)


def loss_and_grads(m, run, leaves):
    """``run()`` -> (y, y_next); the gradients of a fixed random projection of both w.r.t. ``leaves`` and every
    parameter (summed over the documents' runs for the separate side, as a packed batch sums them)."""
    m.zero_grad()
    y, y_next = run()
    g = torch.Generator().manual_seed(5)
    loss = (y * torch.randn(y.shape, generator=g, dtype=y.dtype)).sum()
    loss = loss + (y_next * torch.randn(y_next.shape, generator=g, dtype=y.dtype)).sum()
    loss.backward()
    params = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
    return y, y_next, [t.grad.clone() for t in leaves], params


@pytest.mark.parametrize("name", CAUSAL)
def test_packed_equals_separate(name):
    """Packed = separate in every mode, float64, batch 2 with different starts per row, a carried-in state: the
    outputs, the final state of each row's last document (through a 3-token continuation from it) and the
    gradients of the inputs, the carried-in stream and every parameter (wrong conv weight gradients with several
    documents per row and batch > 1 would show here)."""
    m = make(name)
    prefix, x, x_next = inputs(m, T=5, seed=3), inputs(m, T=T_PACKED, seed=2), inputs(m, T=3, seed=4)
    sp = segment_positions(PACKED_STARTS, T_PACKED, carried=prefix.shape[1])
    if not m.supports_segment_pos:
        for mode in m.modes:
            with pytest.raises(InputError, match="segment_pos"):
                m(x, mode=mode, segment_pos=sp)
        return
    for mode in m.modes:
        a = [t.clone().requires_grad_(True) for t in (prefix, x, x_next)]
        b = [t.clone().requires_grad_(True) for t in (prefix, x, x_next)]
        got = loss_and_grads(m, lambda: packed_run(m, mode, a[0], a[1], sp, a[2]), a)
        ref = loss_and_grads(m, lambda: separate_run(m, mode, b[0], b[1], b[2], PACKED_STARTS), b)
        assert_close(got[0], ref[0], TOL_MODES, name=f"{mode}: y")
        assert_close(got[1], ref[1], TOL_MODES, name=f"{mode}: continuation from the final state")
        for what, gg, gr in zip(("prefix", "x", "x_next"), got[2], ref[2], strict=True):
            assert_close(gg, gr, TOL_GRAD, name=f"{mode}: d{what}")
        assert got[3].keys() == ref[3].keys(), mode
        for pname in ref[3]:
            assert_close(got[3][pname], ref[3][pname], TOL_GRAD, name=f"{mode}: d{pname}")


@pytest.mark.parametrize("name", CAUSAL)
def test_start_at_zero_ignores_the_carried_state(name):
    """A call whose first position starts a document behaves like a call without state (every mode)."""
    m = make(name)
    if not m.supports_segment_pos:
        pytest.skip("refusal checked in test_packed_equals_separate")
    x = inputs(m, T=9, seed=6)
    sp = segment_positions([[0, 5], [0, 2, 3]], 9)
    for mode in m.modes:
        _, s = m(inputs(m, T=4, seed=7), mode=mode)
        fresh, _ = m(x, mode=mode, segment_pos=sp)
        carried, _ = m(x, state=s, mode=mode, segment_pos=sp)
        assert_close(carried, fresh, TOL_MODES, name=mode)


@pytest.mark.parametrize("name", CAUSAL)
def test_packed_prefill_then_steps_across_starts(name):
    """A packed prefill, then one token at a time with each token's segment_pos (the default mode of each call),
    crossing document starts (at different steps in the two rows, and in both rows at once): equal to the whole
    packed call."""
    m = make(name)
    if not m.supports_segment_pos:
        pytest.skip("refusal checked in test_packed_equals_separate")
    T, P = 15, 5
    x = inputs(m, T=T, seed=8)
    sp = segment_positions([[0, 3, 6, 7, 11], [0, 4, 9, 11, 12]], T)
    whole, _ = m(x, segment_pos=sp)
    y, s = m(x[:, :P], segment_pos=sp[:, :P])
    outs = [y]
    for t in range(P, T):
        y, s = m(x[:, t : t + 1], state=s, segment_pos=sp[:, t : t + 1])
        outs.append(y)
    assert_close(torch.cat(outs, 1), whole, TOL_MODES)
