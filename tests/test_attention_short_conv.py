"""Attention with ``short_conv`` (seqzoo/mixers/attention.py): a depthwise causal convolution added to the input.

The registry-wide contract (tests/test_mixer_contract.py) builds mixers with zero-initialised convolution weights,
which would make these paths pass trivially; here the weights are random, in float64.
"""

import pytest
import torch
from helpers import assert_close

from seqzoo.errors import InputError
from seqzoo.mixers import build_mixer

D, B, T = 16, 2, 13


def make(name="attention", k=3, seed=0, **kw):
    torch.manual_seed(seed)
    m = build_mixer(name, d_model=D, n_heads=4, short_conv=k, **kw).double().eval()
    if k:
        torch.nn.init.normal_(m.conv_weight, std=0.5)
    return m


def x_in(seed=1, length=T):
    return torch.randn(B, length, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_zero_weights_are_plain_attention_and_random_ones_are_not():
    plain = build_mixer("attention", d_model=D, n_heads=4).double()
    conv = build_mixer("attention", d_model=D, n_heads=4, short_conv=3).double()
    conv.load_state_dict(plain.state_dict(), strict=False)
    x = x_in()
    assert torch.equal(conv(x)[0], plain(x)[0])  # zero-initialised: starts as plain attention
    torch.nn.init.normal_(conv.conv_weight)
    assert not torch.allclose(conv(x)[0], plain(x)[0])
    assert "short_conv=3" in repr(conv)


@pytest.mark.parametrize("name", ["attention", "local_attention"])
def test_causal_stream_contract(name):
    """Causality, prefill + one-token steps == one pass, a sequence split in two with its state == the whole,
    every mode equal."""
    kw = {"window": 5} if name == "local_attention" else {}
    m = make(name, **kw)
    x = x_in()
    ref, _ = m(x)
    for mode in m.modes[1:]:
        assert_close(m(x, mode=mode)[0], ref, 1e-10)
    x2 = x.clone()
    x2[:, 7:] += 1.0
    assert torch.equal(m(x2)[0][:, :7], ref[:, :7])  # the future does not leak through the convolution
    y1, st = m(x[:, :6])
    y2, _ = m(x[:, 6:], state=st)
    assert_close(torch.cat([y1, y2], 1), ref, 1e-10)
    outs, st = [], None
    y, st = m(x[:, :4])
    outs.append(y)
    for t in range(4, T):
        y, st = m(x[:, t : t + 1], state=st)
        outs.append(y)
    assert_close(torch.cat(outs, 1), ref, 1e-10)
    assert st.conv.shape == (B, 2, D)


def test_gradients_reach_the_convolution():
    m = make()
    x = x_in().requires_grad_()
    m(x)[0].square().sum().backward()
    assert m.conv_weight.grad is not None and m.conv_weight.grad.abs().sum() > 0
    assert x.grad.abs().sum() > 0


def test_taps_stop_at_document_starts():
    """Packed documents: the second document's outputs equal running it alone (attention and convolution)."""
    m = make()
    x = x_in()
    seg = torch.cat([torch.arange(5), torch.arange(T - 5)]).expand(B, T)
    packed, _ = m(x, segment_pos=seg)
    alone, _ = m(x[:, 5:])
    assert_close(packed[:, 5:], alone, 1e-10)


def test_encoder_attention_with_short_conv_is_bidirectional():
    m = make(causal=False)
    x = x_in()
    x2 = x.clone()
    x2[:, -1] += 1.0
    assert not torch.allclose(m(x2)[0][:, 0], m(x)[0][:, 0])  # the first position sees the last
    assert m(x)[1] is None


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_bad_short_conv_is_refused_by_name(bad):
    with pytest.raises(InputError, match="short_conv"):
        build_mixer("attention", d_model=D, n_heads=4, short_conv=bad)


def test_a_state_without_the_convolution_buffer_is_refused():
    plain, conv = make(k=0), make(k=3)
    _, st = plain(x_in())
    with pytest.raises(InputError, match=r"state.conv must have shape \(2, 2, 16\)"):
        conv(x_in(length=1), state=st)
