"""GateLoop's rotating frame (``ops/gateloop/common.py: rotating_frame``): q̂ = [q cos Θ, q sin Θ], k̂ alike, and the
final angle, through the C pass of ``rotation_native.py`` and through the PyTorch formulas: values against the
naive float64 cumulative sum, gradcheck of the written-out backward (the final angle's gradient included), the two
paths against each other on one and two threads."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import TOL, assert_close
from native_libs import require_built

from seqzoo.ops.gateloop import rotation_native
from seqzoo.ops.gateloop.common import rotating_frame, wrap_phase


@pytest.fixture(params=[True, False], ids=["C", "torch"])
def native(request, monkeypatch):
    if request.param:
        require_built(rotation_native._LIB)
    else:
        monkeypatch.setattr(rotation_native, "fits", lambda *a: False)
    return request.param


def _inputs(lead, T, K, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*lead, T, K, generator=g, dtype=torch.float64).to(dtype) for _ in range(3)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
def test_rotation_matches_the_naive_angles(native, dtype):
    q, k, phase = _inputs((2, 3), 70, 5, dtype)  # 70 tokens: a second, partial chunk of angle sums
    qh, kh, theta_T = rotating_frame(q, k, phase)
    theta = phase.double().cumsum(-2)
    rot = torch.stack([theta.cos(), theta.sin()], -2)
    tol = 1e-12 if dtype == torch.float64 else TOL[torch.float32]
    assert qh.shape == (2, 3, 70, 2, 5) and qh.dtype == dtype
    assert_close(qh, q.double()[..., None, :] * rot, tol, name="q̂")
    assert_close(kh, k.double()[..., None, :] * rot, tol, name="k̂")
    assert_close(theta_T, wrap_phase(theta[..., -1, :]), tol, name="Θ_T")


def test_rotation_gradcheck(native):
    q, k, phase = (t.requires_grad_() for t in _inputs((2,), 67, 3, torch.float64, seed=1))
    # the final angle is wrapped into [-π, π): keep the test's angles away from the wrap's jump
    with torch.no_grad():
        phase.mul_(0.3 * math.pi / 67)
    assert torch.autograd.gradcheck(lambda *a: rotating_frame(*a), (q, k, phase), fast_mode=True)


def test_c_rotation_equals_torch_formulas_on_one_and_two_threads(monkeypatch):
    require_built(rotation_native._LIB)
    ins = _inputs((3, 2), 130, 16, torch.float32, seed=2)
    g = torch.Generator().manual_seed(3)
    w = [torch.randn(3, 2, 130, 2, 16, generator=g) for _ in range(2)] + [torch.randn(3, 2, 16, generator=g)]
    threads = torch.get_num_threads()
    results = {}
    try:
        for path, n_threads in (("torch", 1), ("C", 1), ("C", 2)):
            with monkeypatch.context() as m:
                if path == "torch":
                    m.setattr(rotation_native, "fits", lambda *a: False)
                torch.set_num_threads(n_threads)
                xs = [t.clone().requires_grad_() for t in ins]
                outs = rotating_frame(*xs)
                loss = sum((o * wi).sum() for o, wi in zip(outs, w))
                results[path, n_threads] = [*outs, *torch.autograd.grad(loss, xs)]
    finally:
        torch.set_num_threads(threads)
    for a, b, name in zip(results["C", 1], results["torch", 1], ("q̂", "k̂", "Θ_T", "dq", "dk", "dθ")):
        assert_close(a, b, TOL[torch.float32], scale=3.0, name=name)
    for a, b in zip(results["C", 1], results["C", 2]):
        assert torch.equal(a, b)
