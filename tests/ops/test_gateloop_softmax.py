"""GateLoop's softmax form without T×T scores (``ops/gateloop/softmax.py``) against the materialised scores and a
softmax (``attention.relative_scores``): outputs and the gradients of q, k, v, log|a| and the phases."""

from __future__ import annotations

import pytest
import torch
from helpers import TOL, assert_close
from native_libs import require_built

import seqzoo.ops.gateloop.softmax as softmax_op
from seqzoo.errors import InputError
from seqzoo.mixers import build_mixer
from seqzoo.ops.gateloop import levels_native
from seqzoo.ops.gateloop.attention import relative_scores
from seqzoo.ops.gateloop.softmax import softmax_relative_attention


@pytest.fixture(params=[True, False], ids=["C-levels", "torch-levels"])
def levels_path(request, monkeypatch):
    """Both ways of running the levels' passes: the C loops of levels_native.py and the PyTorch passes."""
    if request.param:
        require_built(levels_native._LIB)
    monkeypatch.setattr(softmax_op, "_NATIVE_LEVELS", request.param)
    return request.param


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
def test_blocked_softmax_equals_materialised_scores(T, K, V, decay, base, dtype, levels_path):
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


def test_gradcheck_through_the_flash_levels(levels_path):
    q, k, v, log_mag, phase = (t.requires_grad_() for t in _inputs(20, 2, 3, 0.5, torch.float64))
    assert torch.autograd.gradcheck(
        lambda *a: softmax_relative_attention(*a, base=4)[0], (q, k, v, log_mag, phase), fast_mode=True
    )


def test_c_levels_give_the_torch_levels_numbers_on_one_and_two_threads(monkeypatch):
    """The C loops against the PyTorch passes on the same inputs (float32, strong decays: flushed factors), and
    split over two threads against one."""
    require_built(levels_native._LIB)
    ins = _inputs(256, 8, 8, 8.0, torch.float32, seed=3)
    w = torch.randn(2, 256, 3, 8, generator=torch.Generator().manual_seed(4))
    results = {}
    threads = torch.get_num_threads()
    try:
        for native, n_threads in ((False, 1), (True, 1), (True, 2)):
            monkeypatch.setattr(softmax_op, "_NATIVE_LEVELS", native)
            torch.set_num_threads(n_threads)
            xs = [t.clone().requires_grad_() for t in ins]
            y = softmax_relative_attention(*xs, base=8)[0]
            results[native, n_threads] = [y, *torch.autograd.grad((y * w).sum(), xs)]
    finally:
        torch.set_num_threads(threads)
    for a, b, name in zip(results[True, 1], results[False, 1], ("y", "dq", "dk", "dv", "dlog_mag", "dphase")):
        assert_close(a, b, TOL[torch.float32], scale=3.0, name=name)
    for a, b in zip(results[True, 1], results[True, 2]):
        assert torch.equal(a, b)  # rows are split across threads, each row's arithmetic unchanged


def test_levels_fall_back_to_torch_without_the_library_and_under_autocast(monkeypatch):
    ins = _inputs(100, 4, 5, 1.0, torch.float32)
    assert not levels_native.fits(ins[0].half(), *ins[1:])  # one dtype, float32 / float64 only
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not levels_native.fits(*ins)
    seen = []
    real = levels_native.operands
    monkeypatch.setattr(levels_native, "operands", lambda *a: seen.append(1) or real(*a))
    y_c = softmax_relative_attention(*ins, base=8)[0]
    assert seen or (levels_native.library() is None and levels_native._LIB.build_error() is None)  # C where it builds
    seen.clear()
    monkeypatch.setattr(levels_native._LIB, "library", lambda: None)
    y_torch = softmax_relative_attention(*ins, base=8)[0]
    assert not seen  # no C call without the library
    assert_close(y_c, y_torch, TOL[torch.float32], name="y")


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
