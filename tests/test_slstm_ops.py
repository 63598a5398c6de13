"""sLSTM cell ops (arXiv:2405.04517 §2.2): fast loops against the naive loop in float64; gradcheck; extreme gates."""

import pytest
import torch

from seqzoo.ops.slstm import slstm, slstm_compiled, slstm_fused, slstm_naive


def make(B=2, T=30, H=3, d=5, dtype=torch.float64, seed=0, scale=1.0, r_std=0.3):
    g = torch.Generator().manual_seed(seed)
    wx = scale * torch.randn(B, T, H, 4, d, generator=g, dtype=dtype)
    R = r_std * torch.randn(H, d, 4, d, generator=g, dtype=dtype)
    return wx, R


def maxerr(a, b):
    return float((a.detach() - b.detach()).abs().max())


def test_fused_equals_naive_outputs_states_grads():
    wx, R = make()
    w = torch.randn(2, 30, 3, 5, dtype=torch.float64)

    def run(fn):
        a, r = wx.clone().requires_grad_(True), R.clone().requires_grad_(True)
        h, st = fn(a, r)
        loss = (h * w).sum() + sum(s.square().sum() for s in st[:3]) * 1e-2
        return h.detach(), tuple(s.detach() for s in st), torch.autograd.grad(loss, [a, r])

    h0, s0, g0 = run(slstm_naive)
    h1, s1, g1 = run(slstm_fused)
    assert maxerr(h1, h0) <= 1e-12
    assert all(maxerr(a, b) <= 1e-12 * max(1.0, float(b.abs().max())) for a, b in zip(s1, s0))
    assert all(maxerr(a, b) <= 1e-12 * max(1.0, float(b.abs().max())) for a, b in zip(g1, g0))


@pytest.mark.parametrize("impl", ["naive", "fused"])
def test_split_with_state_equals_whole(impl):
    wx, R = make()
    h0, s0 = slstm(wx, R, impl=impl)
    for t in (1, 11, 29):
        h1, s1 = slstm(wx[:, :t], R, impl=impl)
        h2, s2 = slstm(wx[:, t:], R, s1, impl=impl)
        assert maxerr(torch.cat([h1, h2], 1), h0) <= 1e-12
        assert all(maxerr(a, b) <= 1e-12 * max(1.0, float(b.abs().max())) for a, b in zip(s2, s0))


def test_float32_matches_float64():
    wx, R = make()
    h64, _ = slstm_fused(wx, R)
    h32, s32 = slstm_fused(wx.float(), R.float())
    assert h32.dtype == torch.float32 and all(s.dtype == torch.float32 for s in s32)
    assert maxerr(h32.double(), h64) <= 1e-5


@pytest.mark.parametrize("impl", ["naive", "fused"])
def test_gradcheck(impl):
    wx, R = make(B=1, T=6, H=2, d=3)
    leaves = [wx.requires_grad_(True), R.requires_grad_(True)]
    assert torch.autograd.gradcheck(lambda a, r: slstm(a, r, impl=impl)[0], leaves, fast_mode=True)


@pytest.mark.parametrize("impl", ["naive", "fused"])
def test_extreme_gates_stay_finite(impl):
    wx, R = make(dtype=torch.float32)
    wx = 1e4 * torch.sign(wx)
    wx.requires_grad_(True)
    h, st = slstm(wx, R, impl=impl)
    assert torch.isfinite(h).all() and all(torch.isfinite(s).all() for s in st)
    h.sum().backward()
    assert torch.isfinite(wx.grad).all()


def test_normaliser_is_at_least_one_and_first_step_rule_is_elementwise():
    wx, R = make()
    _, (h, c, n, m) = slstm_fused(wx, R)
    assert float(n.min()) >= 1.0 - 1e-12
    # a state that is zero in some elements only: those elements take m = i on this step
    _, st = slstm_fused(wx[:, :3], R)
    st = list(st)
    for k in range(4):
        st[k] = st[k].clone()
        st[k][:, :4] = 0.0
    h_naive, s_naive = slstm_naive(wx[:, 3:], R, tuple(st))
    h_fused, s_fused = slstm_fused(wx[:, 3:], R, tuple(st))
    assert maxerr(h_fused, h_naive) <= 1e-12
    assert torch.isfinite(h_fused).all()


def test_bad_inputs():
    wx, R = make()
    with pytest.raises(ValueError, match="wx must have shape"):
        slstm(wx[..., 0, :], R)
    with pytest.raises(ValueError, match="R must have shape"):
        slstm(wx, R[:, :2])
    with pytest.raises(ValueError, match="impl"):
        slstm(wx, R, impl="cuda")
    with pytest.raises(ValueError, match="state h"):
        slstm(wx, R, state=tuple(torch.zeros(2, 7) for _ in range(4)))


@pytest.mark.slow
def test_compiled_equals_naive():
    """torch.compile of the pointwise step (first call compiles; slow on a busy CPU)."""
    wx, R = make(dtype=torch.float32)
    h0, s0 = slstm_naive(wx, R)
    with torch.no_grad():
        h1, s1 = slstm_compiled(wx, R)
    assert maxerr(h1, h0) <= 1e-5
    assert all(maxerr(a, b) <= 1e-5 * max(1.0, float(b.abs().max())) for a, b in zip(s1, s0))
