"""sLSTM cell ops (arXiv:2405.04517 §2.2): every implementation (the fused loop; its loops in C; the
torch.compile'd step, slow) against the naive loop in float64: outputs, final states (h, c, n, m), gradients;
gradcheck; extreme gates. Closeness: ``tests/helpers.py``."""

import os
import shutil
import subprocess
import sys

import pytest
import torch
from helpers import assert_close, check_against_reference

from seqzoo.ops.slstm import MODES, native, slstm, slstm_compiled, slstm_fused, slstm_naive

# the C loops need a C compiler: without one on PATH their tests skip; with one, the build must succeed
HAS_CC = shutil.which(os.environ.get("CC", "cc")) is not None
FAST = ["fused", pytest.param("native", marks=pytest.mark.skipif(not HAS_CC, reason="no C compiler"))]


def make(B=2, T=30, H=3, d=5, dtype=torch.float64, seed=0, scale=1.0, r_std=0.3):
    g = torch.Generator().manual_seed(seed)
    wx = scale * torch.randn(B, T, H, 4, d, generator=g, dtype=dtype)
    R = r_std * torch.randn(H, d, 4, d, generator=g, dtype=dtype)
    return wx, R


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
    assert_close(h1, h0, atol=1e-12)
    for a, b in zip(s1, s0):
        assert_close(a, b, 1e-12)
    for a, b in zip(g1, g0):
        assert_close(a, b, 1e-12)


@pytest.mark.parametrize(
    "impl",
    [
        pytest.param(i, marks=pytest.mark.slow)
        if i == "compiled"
        else pytest.param(i, marks=pytest.mark.skipif(i == "native" and not HAS_CC, reason="no C compiler"))
        for i in MODES
        if i not in ("auto", "naive", "triton")  # triton: float32 kernels, tests/ops/test_slstm_triton.py
    ],
)
@pytest.mark.parametrize("with_state", [True, False])
def test_every_impl_matches_naive(impl, with_state):
    """Each implementation in ``MODES`` against ``slstm_naive`` in fp64: h, the final (h, c, n, m) and the
    gradients of wx, R and the initial state."""
    wx, R = make(T=11, seed=4)
    g = torch.Generator().manual_seed(5)
    state = [torch.randn(2, 15, generator=g, dtype=torch.float64) for _ in range(4)] if with_state else [None] * 4
    if with_state:
        state[2] = state[2].abs() + 1  # the normaliser n >= 1

    def cell(fn):
        def run(wx, R, h0, c0, n0, m0):
            h, st = fn(wx, R, None if h0 is None else (h0, c0, n0, m0))
            return (h, *st)

        return run

    check_against_reference(
        cell(lambda wx, R, st: slstm(wx, R, st, mode=impl)),
        cell(slstm_naive),
        [wx, R, *state],
        dtype=torch.float64,
        out_names=["h", "h_T", "c_T", "n_T", "m_T"],
        in_names=["wx", "R", "h0", "c0", "n0", "m0"],
        grad_outputs=[True, True, True, True, False],  # m is piecewise constant
    )


@pytest.mark.parametrize("impl", ["naive", *FAST])
def test_split_with_state_equals_whole(impl):
    wx, R = make()
    h0, s0 = slstm(wx, R, mode=impl)
    for t in (1, 11, 29):
        h1, s1 = slstm(wx[:, :t], R, mode=impl)
        h2, s2 = slstm(wx[:, t:], R, s1, mode=impl)
        assert_close(torch.cat([h1, h2], 1), h0, atol=1e-12)
        for a, b in zip(s2, s0):
            assert_close(a, b, 1e-12)


def test_float32_matches_float64():
    wx, R = make()
    h64, _ = slstm_fused(wx, R)
    h32, s32 = slstm_fused(wx.float(), R.float())
    assert h32.dtype == torch.float32 and all(s.dtype == torch.float32 for s in s32)
    assert_close(h32.double(), h64, atol=1e-5)


@pytest.mark.parametrize("impl", ["naive", *FAST])
def test_gradcheck(impl):
    wx, R = make(B=1, T=6, H=2, d=3)
    leaves = [wx.requires_grad_(True), R.requires_grad_(True)]
    assert torch.autograd.gradcheck(lambda a, r: slstm(a, r, mode=impl)[0], leaves, fast_mode=True)


@pytest.mark.parametrize("impl", ["naive", *FAST])
def test_extreme_gates_stay_finite(impl):
    wx, R = make(dtype=torch.float32)
    wx = 1e4 * torch.sign(wx)
    wx.requires_grad_(True)
    h, st = slstm(wx, R, mode=impl)
    assert torch.isfinite(h).all() and all(torch.isfinite(s).all() for s in st)
    h.sum().backward()
    assert torch.isfinite(wx.grad).all()


@pytest.mark.parametrize("impl", FAST)
def test_normaliser_is_at_least_one_and_first_step_rule_is_elementwise(impl):
    wx, R = make()
    _, (h, c, n, m) = slstm(wx, R, mode=impl)
    assert float(n.min()) >= 1.0 - 1e-12
    # a state that is zero in some elements only: those elements take m = i on this step
    _, st = slstm(wx[:, :3], R, mode=impl)
    st = list(st)
    for k in range(4):
        st[k] = st[k].clone()
        st[k][:, :4] = 0.0
    h_naive, s_naive = slstm_naive(wx[:, 3:], R, tuple(st))
    h_fast, s_fast = slstm(wx[:, 3:], R, tuple(st), mode=impl)
    assert_close(h_fast, h_naive, atol=1e-12)
    for a, b in zip(s_fast, s_naive):
        assert_close(a, b, atol=1e-12)
    assert torch.isfinite(h_fast).all()


@pytest.mark.skipif(not HAS_CC, reason="no C compiler")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_native_inference_and_training_equal_the_fused_loop(dtype):
    """The C loops against the PyTorch loops they replace, without grad (inference) and with (both loops), with
    batch > 1 and several heads (the C code indexes heads and batch rows itself)."""
    wx, R = make(B=3, T=40, H=4, d=6, dtype=dtype, seed=7)
    st = tuple(torch.rand(3, 24, dtype=dtype) + 0.5 for _ in range(4))
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    with torch.no_grad():
        h0, s0 = slstm(wx, R, st, mode="fused")
        h1, s1 = slstm(wx, R, st, mode="native")
    assert_close(h1, h0, atol=tol)
    for a, b in zip(s1, s0):
        assert_close(a, b, atol=tol)

    def grads(mode):
        leaves = [wx.clone().requires_grad_(), R.clone().requires_grad_(), *(s.clone().requires_grad_() for s in st)]
        h, fin = slstm(leaves[0], leaves[1], tuple(leaves[2:]), mode=mode)
        loss = (h * torch.linspace(-1, 1, h.numel(), dtype=dtype).view_as(h)).sum() + sum(f.sum() for f in fin[:3])
        return torch.autograd.grad(loss, leaves)

    for a, b in zip(grads("native"), grads("fused")):
        assert_close(a, b, atol=tol * 10)


def _run_isolated(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


def test_native_off_or_unbuildable_auto_takes_the_pytorch_loop_and_native_says_why(tmp_path):
    code = (
        "import logging, torch; logging.basicConfig(level=logging.INFO, format='%(message)s')\n"
        "from seqzoo.ops.slstm import slstm, native\n"
        "wx, R = torch.randn(1, 5, 2, 4, 3), torch.randn(2, 3, 4, 3)\n"
        "h, _ = slstm(wx, R)\n"
        "print('auto ok', tuple(h.shape), native.unavailable())\n"
        "slstm(wx, R, mode='native')\n"
    )
    off = _run_isolated(code, SEQZOO_NATIVE="0")
    assert "auto ok (1, 5, 2, 3) turned off by SEQZOO_NATIVE=0" in off.stdout
    assert "slstm runs the PyTorch loop implementation on cpu tensors" in off.stderr
    assert off.returncode != 0 and "mode='native' needs its C loops built: turned off by SEQZOO_NATIVE=0" in off.stderr
    bad = _run_isolated(code, CC=str(tmp_path / "no-such-cc"), SEQZOO_CACHE=str(tmp_path / "cache"))
    assert "auto ok" in bad.stdout and "cannot run the C compiler" in bad.stdout
    assert not list((tmp_path / "cache").glob("native/*.so"))  # nothing half-written left behind


@pytest.mark.skipif(not HAS_CC, reason="no C compiler")
def test_native_library_is_built_once_into_the_cache(tmp_path):
    code = "from seqzoo.ops.slstm import native; print(native.unavailable()); print(len(list(native.cache_dir().glob('*.so'))))"
    first = _run_isolated(code, SEQZOO_CACHE=str(tmp_path))
    assert first.stdout.split() == ["None", "1"], first.stderr
    lib = next((tmp_path / "native").glob("slstm-*.so"))
    mtime = lib.stat().st_mtime_ns
    assert _run_isolated(code, SEQZOO_CACHE=str(tmp_path)).stdout.split() == ["None", "1"]
    assert lib.stat().st_mtime_ns == mtime  # loaded, not rebuilt
    assert native.SOURCE.exists()


def test_bad_inputs():
    wx, R = make()
    with pytest.raises(ValueError, match="wx must have shape"):
        slstm(wx[..., 0, :], R)
    with pytest.raises(ValueError, match="R must have shape"):
        slstm(wx, R[:, :2])
    with pytest.raises(ValueError, match="mode"):
        slstm(wx, R, mode="cuda")
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="mode='native' runs on CPU tensors"):
            slstm(wx.cuda(), R.cuda(), mode="native")
    with pytest.raises(ValueError, match="state h"):
        slstm(wx, R, state=tuple(torch.zeros(2, 7) for _ in range(4)))


@pytest.mark.slow
def test_compiled_equals_naive():
    """torch.compile of the pointwise step (first call compiles; slow on a busy CPU)."""
    wx, R = make(dtype=torch.float32)
    h0, s0 = slstm_naive(wx, R)
    with torch.no_grad():
        h1, s1 = slstm_compiled(wx, R)
    assert_close(h1, h0, atol=1e-5)
    for a, b in zip(s1, s0):
        assert_close(a, b, 1e-5)
