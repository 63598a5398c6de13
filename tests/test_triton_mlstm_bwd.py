"""Triton backward of the chunkwise mLSTM (seqzoo/ops/mlstm/triton.py, ``backward="triton"``, the default).

Gradients of q, k, v, both gates and the initial state (C0, n0, m0), given gradients of h and of the final state
(C, n and, in one case, m), against the fp64 per-token reference ``ops.mlstm.mlstm_naive_recurrent`` computed
from the same (rounded) inputs, and against ``backward="torch"`` (the PyTorch chunkwise recompute). Without CUDA
the kernels run in Triton's CPU interpreter at tiny shapes; the "real" cases run only on a CUDA machine.
Run: ``pytest tests/test_triton_mlstm_bwd.py``.
"""

from __future__ import annotations

import pytest
import torch

# helpers of the forward tests; importing the module also sets TRITON_INTERPRET without CUDA
from test_triton_kernels import DEV, LOWP, _close, _grads, needs_cuda

from seqzoo.ops.mlstm import mlstm_naive_recurrent

GRAD_SCALE = 3.0  # gradients: 3 x the output tolerance, as in test_triton_kernels.py
NAMES = ("dq", "dk", "dv", "di", "df", "dC0", "dn0", "dm0")


def _inputs(shape, dtype, with_state, gates, forget_gate="sigmoid", seed=0):
    """Gates "mild" (i ~ N(0, 2), f ~ N(2, 1)) or "strong" (i, f uniform in ±25: the stabiliser switches between
    the carried state and single tokens). In both, max(|den|, e^-M) takes the lower bound for ~15-25% of tokens."""
    B, T, H, K, V = shape
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, K, generator=g) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=g)
    if gates == "strong":
        i = (torch.rand(B, T, H, generator=g) * 2 - 1) * 25
        f = (torch.rand(B, T, H, generator=g) * 2 - 1) * 25
    else:
        i = torch.randn(B, T, H, generator=g) * 2
        f = torch.randn(B, T, H, generator=g) + 2
    if forget_gate == "exp":
        f = -f.abs() / 4  # log f = f~ <= 0
    flat = [t.to(DEV, dtype) for t in (q, k, v, i, f)]
    if with_state:
        flat += [
            torch.randn(B, H, K, V, generator=g).to(DEV),
            torch.randn(B, H, K, generator=g).abs().to(DEV),
            (torch.randn(B, H, generator=g) * 3).to(DEV),
        ]
    return flat


def _run(fn, flat, with_state, **kw):
    h, st = fn(*flat[:5], tuple(flat[5:]) if with_state else None, **kw)
    return h, st


def _check(shape, dtype, with_state, gates, chunk, forget_gate="sigmoid", with_dm=False, seed=0):
    from seqzoo.ops.mlstm.triton import mlstm_triton

    flat = _inputs(shape, dtype, with_state, gates, forget_gate, seed)
    ins = [t.clone().requires_grad_() for t in flat]
    refs = [t.detach().double().requires_grad_() for t in flat]
    h, st = _run(mlstm_triton, ins, with_state, chunk_size=chunk, forget_gate=forget_gate)
    hr, st_r = _run(mlstm_naive_recurrent, refs, with_state, forget_gate=forget_gate)
    assert h.dtype == dtype and all(s.dtype == torch.float32 for s in st)
    out_tol = dtype if dtype == torch.float32 else torch.float16
    _close("h", h, hr, dtype)
    for name, x, y in zip("Cnm", st, st_r):
        _close(name, x, y, out_tol)

    g = torch.Generator().manual_seed(seed + 100)
    outs, outs_r = (h, *st), (hr, *st_r)
    w = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(DEV) for o in outs]
    if not with_dm:  # m is piecewise constant; by default its gradient only flows through h, C and n
        w[3] = torch.zeros_like(w[3])
    got = _grads(outs, ins, w)
    for name, x, y in zip(NAMES, got, _grads(outs_r, refs, w)):
        assert x.dtype == flat[NAMES.index(name)].dtype, name
        _close(name, x, y, dtype, scale=GRAD_SCALE)
    # the PyTorch recompute backward of the same forward
    ins_t = [t.detach().clone().requires_grad_() for t in flat]
    h_t, st_t = _run(mlstm_triton, ins_t, with_state, chunk_size=chunk, forget_gate=forget_gate, backward="torch")
    for name, x, y in zip(NAMES, got, _grads((h_t, *st_t), ins_t, w)):
        _close(name + " (vs torch bwd)", x, y, dtype, scale=GRAD_SCALE)
    return got


# (B, T, H, K, V), chunk, dtype, initial state, gates, forget gate, gradient into the final m
TINY = [
    pytest.param((1, 1, 1, 8, 16), 16, torch.float32, True, "mild", "sigmoid", False, id="T1-state"),
    pytest.param((2, 5, 1, 16, 8), 16, torch.float32, False, "strong", "sigmoid", False, id="T5-strong"),
    pytest.param((1, 16, 2, 16, 16), 16, torch.float32, True, "strong", "sigmoid", True, id="T16-state-strong-dm"),
    pytest.param((2, 23, 2, 12, 16), 16, torch.float32, True, "mild", "exp", False, id="T23-state-expgate"),
    pytest.param((1, 37, 2, 16, 12), 16, torch.float32, False, "strong", "sigmoid", False, id="T37-strong"),
    pytest.param((1, 37, 1, 8, 16), 16, torch.float32, True, "strong", "sigmoid", True, id="T37-state-strong-dm"),
    pytest.param((2, 37, 1, 16, 16), 32, torch.float32, True, "mild", "sigmoid", False, id="T37-chunk32-state"),
    pytest.param((1, 23, 2, 16, 16), 16, torch.bfloat16, True, "strong", "sigmoid", False, id="T23-bf16-state-strong"),
]
REAL = [
    pytest.param((2, 512, 8, 128, 256), 64, dt, True, "mild", "sigmoid", False, id=f"real-T512-{dt}", marks=needs_cuda)
    for dt in (torch.float32, *LOWP)
] + [
    pytest.param(
        (1, 1000, 4, 64, 128),
        64,
        torch.bfloat16,
        False,
        "strong",
        "sigmoid",
        True,
        id="real-T1000-bf16-strong",
        marks=needs_cuda,
    )
]


@pytest.mark.parametrize("shape, chunk, dtype, with_state, gates, forget_gate, with_dm", TINY + REAL)
def test_mlstm_triton_backward_matches_naive(shape, chunk, dtype, with_state, gates, forget_gate, with_dm):
    _check(shape, dtype, with_state, gates, chunk, forget_gate, with_dm)


def test_mlstm_triton_backward_eps_path():
    """den = 0 exactly while num != 0 (q along a key direction no k has, n0 = 0 there, C0 != 0 there) and a large
    stabiliser (m0 + 14, so e^{-M} ~ eps): h = num / (e^{-M} + eps) ~ 1e5, and the gradient through M (the eps path,
    dM = -dh·h eps / N) is as large as the rest; dm0 and df get it through the arg-max of the stabiliser. (With
    e^{-M} << eps the exact dm0 is a cancellation of ~|h| terms, ill-conditioned in fp32 for any implementation.)"""
    from seqzoo.ops.mlstm.triton import mlstm_triton

    B, T, H, K, V = 1, 21, 1, 16, 16
    q, k, v, i, f, C0, n0, m0 = _inputs((B, T, H, K, V), torch.float32, True, "mild", seed=4)
    k[..., 0] = 0
    n0[..., 0] = 0
    q[:, 3::4] = 0
    q[:, 3::4, :, 0] = 4.0  # tokens 3, 7, 11, ...: den = 0, num = w0 C0[0] q~_0
    m0 += 14
    flat = [q, k, v, i, f, C0, n0, m0]
    ins = [t.clone().requires_grad_() for t in flat]
    refs = [t.detach().double().requires_grad_() for t in flat]
    h, st = mlstm_triton(*ins[:5], tuple(ins[5:]))
    hr, st_r = mlstm_naive_recurrent(*refs[:5], tuple(refs[5:]))
    assert hr.abs().max() > 1e3  # the eps regime is reached
    _close("h", h, hr, torch.float32)
    g = torch.Generator().manual_seed(5)
    w = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(DEV) for o in (h, *st[:2])]
    for name, x, y in zip(NAMES, _grads((h, *st[:2]), ins, w), _grads((hr, *st_r[:2]), refs, w)):
        _close(name, x, y, torch.float32, scale=GRAD_SCALE)


def test_mlstm_triton_backward_partial_requires_grad():
    """Only some inputs require grad (v and the initial C): the others get None, the rest is unchanged."""
    from seqzoo.ops.mlstm.triton import mlstm_triton

    flat = _inputs((1, 19, 1, 16, 16), torch.float32, True, "mild", seed=6)
    ins = [t.clone().requires_grad_(j in (2, 5)) for j, t in enumerate(flat)]
    refs = [t.detach().double().requires_grad_(j in (2, 5)) for j, t in enumerate(flat)]
    h, st = mlstm_triton(*ins[:5], tuple(ins[5:]))
    hr, st_r = mlstm_naive_recurrent(*refs[:5], tuple(refs[5:]))
    (h.double().sum() + st[0].double().sum()).backward()
    (hr.sum() + st_r[0].sum()).backward()
    assert all(ins[j].grad is None for j in (0, 1, 3, 4, 6, 7))
    _close("dv", ins[2].grad, refs[2].grad, torch.float32, scale=GRAD_SCALE)
    _close("dC0", ins[5].grad, refs[5].grad, torch.float32, scale=GRAD_SCALE)


def test_mlstm_triton_backward_option():
    from seqzoo.ops.mlstm.triton import mlstm_triton

    q = torch.zeros(1, 4, 1, 16, device=DEV)
    with pytest.raises(ValueError, match="backward"):
        mlstm_triton(q, q, q, q[..., 0], q[..., 0], backward="autograd")
