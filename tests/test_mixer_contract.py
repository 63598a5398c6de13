"""Registry-wide mixer contract (ARCHITECTURE.md "The contracts", seqzoo/mixers/base.py): every mixer in MIXERS passes these, with no special cases.

A new mixer joins by registering itself and setting ``test_kwargs`` (tiny constructor arguments).
Checks run in float64 so that a genuine mismatch is never hidden by rounding.
"""

import pytest
import torch
from helpers import assert_close

from seqzoo.mixers import MIXERS, build_mixer

D = 16
NAMES = sorted(MIXERS)


def make(name, seed=0):
    torch.manual_seed(seed)
    cls = MIXERS[name]
    m = build_mixer(name, d_model=getattr(cls, "test_d_model", D), **cls.test_kwargs).double()
    return m.eval()


def inputs(m, B=2, T=13, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, m.d_model, generator=g, dtype=torch.float64)


TOL_MODES = 1e-6  # float64: modes of one mixer computed by different algorithms (relative to max(1, max |ref|))


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
