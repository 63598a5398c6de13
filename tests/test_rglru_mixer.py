"""The "rglru" mixer (Griffin's recurrent block) and the document-masked causal conv (arXiv:2402.19427 §2.3-§2.4; docs/griffin.md)."""

import itertools
import math

import pytest
import torch

from seqzoo.mixers import build_mixer
from seqzoo.mixers.rglru import RGLRUState, init_a_param
from seqzoo.ops.causal_conv import causal_conv1d, causal_conv1d_naive
from seqzoo.ops.rglru import rglru_naive

f64 = torch.float64


def make(seed=0, **kw):
    torch.manual_seed(seed)
    kw = {"d_rnn": 24, "n_blocks": 4, **kw}
    m = build_mixer("rglru", d_model=16, **kw).double().eval()
    with torch.no_grad():  # non-trivial biases and conv, as a trained model would have
        for p in (m.linear_x.bias, m.linear_y.bias, m.conv.bias, m.rglru.input_gate.bias, m.rglru.a_gate.bias):
            p.normal_(0, 0.3)
        m.conv.weight.normal_(0, 0.5)
    return m


def packed_segment_pos(B, T, starts):
    sp = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        last = 0
        for t in range(T):
            if t in starts[b]:
                last = t
            sp[b, t] = t - last
    return sp


def maxerr(a, b):
    return float((a.detach() - b.detach()).abs().max())


SP_STARTS = [{0, 6, 7, 15}, {0, 11}]


def test_block_matches_hand_written_equations():
    m = make()
    x = torch.randn(2, 19, 16, dtype=f64)
    sp = packed_segment_pos(2, 19, SP_STARTS)
    y, state = m(x, segment_pos=sp, mode="recurrent")
    # by hand: branches, masked conv, RG-LRU loop, gate, output
    yb = torch.nn.functional.gelu(m.linear_y(x), approximate="tanh")
    u, _ = causal_conv1d_naive(m.linear_x(x), m.conv.weight.t(), m.conv.bias, segment_pos=sp)
    r = m.rglru
    h, hT = rglru_naive(u, r.input_gate(u), r.a_gate(u), r.a_param, sp == 0)
    ref = m.linear_out(h * yb)
    assert maxerr(y, ref) <= 1e-12 and maxerr(state.h, hT) <= 1e-12


@pytest.mark.parametrize("with_state", [False, True])
def test_scan_equals_recurrent_with_resets(with_state):
    m = make()
    x = torch.randn(2, 70, 16, dtype=f64)
    sp = packed_segment_pos(2, 70, [{0, 13, 14, 50}, {0, 33}])
    state = None
    if with_state:
        _, state = m(torch.randn(2, 5, 16, dtype=f64))
    y1, s1 = m(x, state=state, segment_pos=sp, mode="recurrent")
    y2, s2 = m(x, state=state, segment_pos=sp, mode="scan")
    assert maxerr(y1, y2) <= 1e-12 and maxerr(s1.h, s2.h) <= 1e-12 and maxerr(s1.conv, s2.conv) == 0


def test_split_at_every_t_with_segment_pos_equals_whole():
    m = make()
    T = 19
    x = torch.randn(2, T, 16, dtype=f64)
    sp = packed_segment_pos(2, T, SP_STARTS)
    for mode in m.modes:
        whole, s_whole = m(x, segment_pos=sp, mode=mode)
        for t in range(1, T):
            y1, s = m(x[:, :t], segment_pos=sp[:, :t], mode=mode)
            y2, s = m(x[:, t:], state=s, segment_pos=sp[:, t:], mode=mode)
            assert maxerr(torch.cat([y1, y2], 1), whole) <= 1e-12, (mode, t)
            assert maxerr(s.h, s_whole.h) <= 1e-12 and maxerr(s.conv, s_whole.conv) <= 1e-12


def test_random_multi_chunk_splits_and_token_steps():
    m = make(seed=1)
    T = 40
    x = torch.randn(2, T, 16, dtype=f64)
    sp = packed_segment_pos(2, T, [{0, 2, 3, 4, 21}, {0, 39}])
    whole, _ = m(x, segment_pos=sp)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        cuts = sorted(torch.randperm(T - 1, generator=g)[:5].add(1).tolist())
        bounds = [0, *cuts, T]
        outs, s = [], None
        for a, b in itertools.pairwise(bounds):
            y, s = m(x[:, a:b], state=s, segment_pos=sp[:, a:b])
            outs.append(y)
        assert maxerr(torch.cat(outs, 1), whole) <= 1e-12
    outs, s = [], None  # prefill 7 then one token per call (decode path)
    y, s = m(x[:, :7], segment_pos=sp[:, :7])
    outs.append(y)
    for t in range(7, T):
        y, s = m(x[:, t : t + 1], state=s, segment_pos=sp[:, t : t + 1])
        outs.append(y)
    assert maxerr(torch.cat(outs, 1), whole) <= 1e-12


def test_second_packed_document_equals_document_alone():
    m = make(seed=2).float()
    x = torch.randn(1, 30, 16)
    sp = packed_segment_pos(1, 30, [{0, 12}])
    for mode in m.modes:
        packed, _ = m(x, segment_pos=sp, mode=mode)
        alone, _ = m(x[:, 12:], segment_pos=sp[:, 12:], mode=mode)
        assert maxerr(packed[:, 12:], alone) <= 1e-6


def test_gradients_scan_equal_recurrent():
    grads = {}
    for mode in ("recurrent", "scan"):
        m = make(seed=3).train()
        x = torch.randn(2, 23, 16, dtype=f64, generator=torch.Generator().manual_seed(4)).requires_grad_(True)
        sp = packed_segment_pos(2, 23, [{0, 9}, {0}])
        _, s0 = m(torch.ones(2, 3, 16, dtype=f64))
        h0 = s0.h.detach().requires_grad_(True)
        y, s = m(x, state=RGLRUState(conv=s0.conv.detach(), h=h0), segment_pos=sp, mode=mode)
        (y.sin().sum() + s.h.square().sum()).backward()
        grads[mode] = {"x": x.grad, "h0": h0.grad, **{n: p.grad for n, p in m.named_parameters()}}
    for name, g in grads["recurrent"].items():
        assert maxerr(grads["scan"][name], g) <= 1e-10, name


def test_gradcheck_recurrent_block():
    torch.manual_seed(0)
    m = build_mixer("rglru", d_model=8, d_rnn=8, n_blocks=2).double()
    x = torch.randn(1, 6, 8, dtype=f64, requires_grad=True)
    sp = torch.tensor([[0, 1, 2, 0, 1, 2]])
    assert torch.autograd.gradcheck(lambda x: m(x, segment_pos=sp, mode="scan")[0], (x,))


def test_state_shapes_and_dtypes():
    m = make().float()
    y, s = m(torch.randn(3, 9, 16).bfloat16().float())
    assert isinstance(s, RGLRUState)
    assert s.conv.shape == (3, 3, 24) and s.h.shape == (3, 24) and s.h.dtype == torch.float32
    mb = make().to(torch.bfloat16)
    y, s = mb(torch.randn(2, 9, 16, dtype=torch.bfloat16))
    assert y.dtype == torch.bfloat16 and s.h.dtype == torch.float32 and s.conv.dtype == torch.bfloat16


def test_init_recipes():
    p = torch.empty(20000, dtype=f64)
    init_a_param(p, "code")
    assert -6.91 <= float(p.min()) and float(p.max()) <= -2.19
    a = torch.sigmoid(-p)
    assert 0.9 - 1e-9 <= float(a.min()) and float(a.max()) <= 0.999 + 1e-9
    a2 = a.square()  # uniform on [0.81, 0.998]: mean of the square ≈ midpoint
    assert abs(float(a2.mean()) - (0.81 + 0.998001) / 2) < 0.005
    init_a_param(p, "paper")
    assert -8.99 <= float(p.min()) and float(p.max()) <= -4.31
    w = torch.sigmoid(-p) ** 8
    assert abs(float(w.mean()) - 0.9495) < 0.005
    m = build_mixer("rglru", d_model=64, d_rnn=96, n_blocks=4)
    assert abs(float(m.rglru.input_gate.weight.detach().std()) - math.sqrt(1 / 24)) < 0.02
    assert abs(float(m.conv.weight.detach().std()) - 0.05) < 0.01
    assert float(m.rglru.a_gate.bias.detach().abs().max()) == 0.0


def test_default_mode_and_n_blocks():
    m = build_mixer("rglru", d_model=32, d_rnn=48)
    assert m.n_blocks == 16 and m.default_mode(torch.zeros(1, 1, 32), None) == "recurrent"
    assert m.default_mode(torch.zeros(1, 5, 32), None) == "scan"


def test_bad_configurations_raise():
    with pytest.raises(ValueError, match="n_blocks"):
        build_mixer("rglru", d_model=16, d_rnn=24, n_blocks=5)
    with pytest.raises(ValueError, match="d_rnn"):
        build_mixer("rglru", d_model=16, d_rnn=0)
    with pytest.raises(ValueError, match="a_init"):
        build_mixer("rglru", d_model=16, a_init="lecun")
    with pytest.raises(ValueError, match="conv_size"):
        build_mixer("rglru", d_model=16, conv_size=0)
    m = make()
    x = torch.randn(2, 5, 16, dtype=f64)
    with pytest.raises(ValueError, match="mode"):
        m(x, mode="parallel")
    with pytest.raises(TypeError, match="RGLRUState"):
        m(x, state=torch.zeros(2, 24))
    _, s = m(x)
    with pytest.raises(ValueError, match="state.h"):
        m(x, state=RGLRUState(conv=s.conv, h=s.h[:, :5]))
    with pytest.raises(ValueError, match="segment_pos"):
        m(x, segment_pos=torch.zeros(2, 4, dtype=torch.long))


# ------------------------------------------------------------------ conv with document masks
def test_masked_conv_matches_loop_and_token_steps():
    g = torch.Generator().manual_seed(0)
    B, T, C = 2, 23, 5
    x = torch.randn(B, T, C, generator=g, dtype=f64)
    w = torch.randn(C, 4, generator=g, dtype=f64)
    b = torch.randn(C, generator=g, dtype=f64)
    sp = packed_segment_pos(B, T, [{0, 1, 5, 6, 7, 20}, {0, 12}])
    y, s = causal_conv1d(x, w, b, segment_pos=sp)
    y_ref, s_ref = causal_conv1d_naive(x, w, b, segment_pos=sp)
    assert maxerr(y, y_ref) <= 1e-12 and maxerr(s, s_ref) <= 1e-12
    outs, st = [], None
    for t in range(T):
        yt, st = causal_conv1d(x[:, t : t + 1], w, b, state=st, segment_pos=sp[:, t : t + 1])
        outs.append(yt)
    assert maxerr(torch.cat(outs, 1), y) <= 1e-12 and maxerr(st, s) <= 1e-12
    # the tap rule: a document start at t drops every earlier input from y_t
    t0 = 12
    assert maxerr(y[1, t0], w[:, 3] * x[1, t0] + b) <= 1e-12
    # without any starts after position 0 it is the plain conv
    y_plain, _ = causal_conv1d(x, w, b)
    y_sp0, _ = causal_conv1d(x, w, b, segment_pos=torch.arange(T).expand(B, T))
    assert maxerr(y_plain, y_sp0) <= 1e-12
