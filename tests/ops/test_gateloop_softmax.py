"""GateLoop's softmax form without T×T scores (``ops/gateloop/softmax.py``) against the materialised scores and a
softmax (``attention.relative_scores``): outputs and the gradients of q, k, v, log|a| and the phases."""

from __future__ import annotations

import pytest
import torch
from helpers import TOL, assert_close

from seqzoo.errors import InputError
from seqzoo.mixers import build_mixer
from seqzoo.ops.gateloop.attention import relative_scores
from seqzoo.ops.gateloop.softmax import softmax_relative_attention


def _materialised(q, k, v, log_mag, phase):
    A, L, Phi = relative_scores(q, k, log_mag, phase, upper=float("-inf"))
    return torch.einsum("bhnm,bmhv->bnhv", A.softmax(-1), v), L, Phi


def _inputs(T, K, V, decay, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    B, H = 2, 3
    q, k = (torch.randn(B, T, H, K, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=g, dtype=torch.float64)
    log_mag = -torch.rand(B, T, H, K, generator=g, dtype=torch.float64) * decay
    phase = torch.randn(B, T, H, K, generator=g, dtype=torch.float64)
    return [t.to(dtype) for t in (q, k, v, log_mag, phase)]


CASES = [
    pytest.param(1, 4, 5, 0.1, 4, id="T1"),
    pytest.param(5, 4, 5, 0.1, 2, id="T5-base2"),
    pytest.param(37, 4, 5, 0.1, 4, id="T37-base4"),
    pytest.param(64, 4, 5, 0.1, 16, id="T64-base16"),
    # log|a| down to -40 per token: factors under e^-30 flushed, products that underflow
    pytest.param(130, 4, 5, 40.0, 8, id="T130-strong-base8"),
    pytest.param(100, 2, 9, 1.0, 4, id="T100-V-wider-than-2K"),
]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("T, K, V, decay, base", CASES)
def test_blocked_softmax_equals_materialised_scores(T, K, V, decay, base, dtype):
    ins = [t.requires_grad_() for t in _inputs(T, K, V, decay, dtype)]
    refs = [t.detach().double().requires_grad_() for t in ins]
    y, L, Phi = softmax_relative_attention(*ins, base=base)
    yr, Lr, Phir = _materialised(*refs)
    assert y.dtype == dtype and y.shape == yr.shape
    assert torch.equal(L, Lr) and torch.equal(Phi, Phir)  # float64 sums, the mixer's cache
    tol = 1e-12 if dtype == torch.float64 else TOL[torch.float32]
    assert_close(y, yr, tol, name="y")
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    got = torch.autograd.grad((y * w.to(dtype)).sum(), ins)
    want = torch.autograd.grad((yr * w).sum(), refs)
    for name, a, b in zip(("dq", "dk", "dv", "dlog_mag", "dphase"), got, want):
        assert_close(a, b, tol, scale=3.0, name=name)


def test_gradcheck_through_the_flash_levels():
    q, k, v, log_mag, phase = (t.requires_grad_() for t in _inputs(20, 2, 3, 0.5, torch.float64))
    assert torch.autograd.gradcheck(
        lambda *a: softmax_relative_attention(*a, base=4)[0], (q, k, v, log_mag, phase), fast_mode=True
    )


def test_bad_base_raises():
    ins = _inputs(8, 2, 2, 0.1, torch.float64)
    for base in (1, 3, 6.0):
        with pytest.raises(InputError, match="base"):
            softmax_relative_attention(*ins, base=base)


def test_mixer_full_pass_equals_prefill_then_steps_past_the_flash_levels():
    """A full pass of 200 tokens (the blocked form, levels of 32 to 128 tokens) against a prefill of 170 (blocked
    too) and single tokens from the cache (the materialised scores against cached keys)."""
    torch.manual_seed(0)
    m = build_mixer("gateloop_softmax", d_model=8, n_heads=2).double().requires_grad_(False)
    x = torch.randn(2, 200, 8, dtype=torch.float64)
    y, _ = m(x)
    y1, state = m(x[:, :170])
    steps = [y1]
    for t in range(170, 200):
        yt, state = m(x[:, t : t + 1], state=state)
        steps.append(yt)
    assert_close(torch.cat(steps, 1), y, 1e-12, name="y")
