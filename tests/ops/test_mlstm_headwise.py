"""ops/mlstm/headwise.py: the mLSTM layer's headwise q / k / v maps and gate pre-activations in C (``headwise.c``)
against the einsum reference and the matmul path, values and the gradient of every input, float64 and float32,
with v's input a column slice of a wider projection (as the layer splits it)."""

import pytest
import torch
from native_libs import needs_built, require_built

from seqzoo.ops.mlstm import headwise as hw
from seqzoo.ops.mlstm.headwise import (
    headwise,
    headwise_matmul,
    headwise_native,
    headwise_reference,
    qkv_gates,
    qkv_gates_reference,
)

needs_c = needs_built(hw._LIB)


def _qkv_inputs(B, T, nb, G, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    E = 4 * nb

    def leaf(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).requires_grad_()

    up, xc = leaf(B, T, 2 * E), leaf(B, T, E)
    ws = [leaf(nb, 4, 4) for _ in range(3)]
    return (up, xc, *ws, leaf(G, 3 * E), leaf(G)), g


def _qkv(fn, leaves, heads=1):
    up, xc, wq, wk, wv, wg, bg = leaves
    return fn(xc, up[..., : xc.shape[-1]], wq, wk, wv, wg, bg, n_heads=heads)  # x_m: every other half-row of up


def _qkv_run(fn, leaves, grads, heads=1):
    outs = _qkv(fn, leaves, heads)
    return outs, torch.autograd.grad(outs, leaves, grads)


@needs_c
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 5e-5)])
@pytest.mark.parametrize("nb,G,heads", [(8, 8, 4), (32, 6, 2), (2, 2, 1), (32, 16, 1), (16, 8, 8)])
@pytest.mark.parametrize("threads", [1, 2])
def test_fused_maps_and_gates_match_the_separate_ones(dtype, tol, nb, G, heads, threads):
    """heads > 1: q, k, v come out as (B, T, H, K) views of (B, H, T, K) buffers where K is a multiple of the C
    vectors (32 bytes): (8, 4) in float32 has K = 8, (16, 8) has K = 8 in float32 and 4 in float64; (B, T, E) rows
    otherwise, unflattened."""
    torch.set_num_threads(threads)
    try:
        leaves, g = _qkv_inputs(2, 67, nb, G, dtype)
        ref = _qkv(qkv_gates_reference, leaves, heads)
        grads = [torch.randn(r.shape, generator=g, dtype=dtype) for r in ref]
        got, ggot = _qkv_run(qkv_gates, leaves, grads, heads)
        assert got[3].grad_fn.name().endswith("_MapsNativeBackward")  # the C path ran
        if heads > 1:
            K = 4 * nb // heads
            per_head = K % (32 // dtype.itemsize) == 0
            assert got[0].shape == (2, 67, heads, K)
            assert got[0].transpose(1, 2).is_contiguous() == per_head
        ref, gref = _qkv_run(qkv_gates_reference, leaves, grads, heads)
        names = ("q", "k", "v", "gates", "d_up", "d_xc", "d_wq", "d_wk", "d_wv", "d_wgates", "d_bgates")
        for name, a, b in zip(names, (*got, *ggot), (*ref, *gref)):
            assert a.dtype == dtype, name
            torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=name)
    finally:
        torch.set_num_threads(2)


@needs_c
def test_fused_backward_by_gradcheck_with_missing_output_gradients():
    """float64 gradcheck of the C forward/backward; outputs left out of the loss arrive as None gradients."""
    (up, xc, *rest), _ = _qkv_inputs(1, 3, 2, 4, torch.float64)
    args = (xc, up[..., :8].detach().requires_grad_(), *rest)
    fused = hw._MapsNative.apply
    assert torch.autograd.gradcheck(lambda *t: fused((0, 0, 1), True, 1, *t), args)
    assert torch.autograd.gradcheck(lambda *t: fused((0, 0, 1), True, 1, *t)[1:3], args)  # q and the gates unused
    assert torch.autograd.gradcheck(lambda *t: fused((0, 0, 1), True, 2, *t), args)  # per head: K = 4 (float64)
    assert torch.autograd.gradcheck(lambda *t: fused((0,), False, 1, *t), (xc, rest[0]))


@needs_c
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
@pytest.mark.parametrize("nb", [128, 6])
def test_single_map_matches_einsum_and_matmul(dtype, tol, nb):
    g = torch.Generator().manual_seed(nb)
    x = torch.randn(2, 80, 8 * nb, generator=g, dtype=dtype)[..., : 4 * nb].requires_grad_()  # strided rows
    w = torch.randn(nb, 4, 4, generator=g, dtype=dtype, requires_grad=True)
    gy = torch.randn(2, 80, 4 * nb, generator=g, dtype=dtype)
    ref = headwise_reference(x, w)
    gref = torch.autograd.grad(ref, (x, w), gy)
    for fn in (headwise_native, headwise_matmul):
        y = fn(x, w)
        torch.testing.assert_close(y, ref, rtol=tol, atol=tol)
        for a, b in zip(torch.autograd.grad(y, (x, w), gy), gref):
            torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    with torch.no_grad():
        torch.testing.assert_close(headwise_native(x, w), ref, rtol=tol, atol=tol)


@needs_c
def test_dispatch_takes_c_for_cpu_floats_and_the_separate_maps_otherwise(monkeypatch):
    leaves, _ = _qkv_inputs(1, 64, 4, 8, torch.float32)
    name = "_MapsNativeBackward"  # the gates (output 3) come out of the fused C call, or of matmuls
    assert _qkv(qkv_gates, leaves)[3].grad_fn.name().endswith(name)
    short, _ = _qkv_inputs(1, 63, 4, 8, torch.float32)  # below _GROUP_MIN_TOKENS (decoding): the matmuls
    assert not _qkv(qkv_gates, short)[3].grad_fn.name().endswith(name)
    half = [t.detach().bfloat16().requires_grad_() for t in leaves]  # 16-bit: the separate maps
    assert not _qkv(qkv_gates, half)[3].grad_fn.name().endswith(name)
    many, _ = _qkv_inputs(1, 64, 4, hw.MAX_GATES + 1, torch.float32)  # more gates than the C buffers hold
    assert not _qkv(qkv_gates, many)[3].grad_fn.name().endswith(name)
    up, xc, wq, wk, wv, wg, bg = leaves
    with pytest.raises(RuntimeError):  # gate weights of the wrong width: not the C path (it would read past them)
        qkv_gates(xc, up[..., : xc.shape[-1]], wq, wk, wv, wg[:, :-4], bg)
    odd, _ = _qkv_inputs(1, 64, 3, 8, torch.float32)  # E = 12: not a whole number of float32 vectors
    assert not _qkv(qkv_gates, odd)[3].grad_fn.name().endswith(name)
    assert _qkv(qkv_gates, [t.detach().double().requires_grad_() for t in odd])[3].grad_fn.name().endswith(name)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not _qkv(qkv_gates, leaves)[3].grad_fn.name().endswith(name)
    x, w = leaves[1], leaves[2]
    assert headwise(x, w).grad_fn.name().endswith(name)
    assert not headwise(x, torch.randn(4, 2, 4)).grad_fn.name().endswith(name)  # blocks of 2 x 4: the matmuls
    monkeypatch.setattr(hw, "library", lambda: None)  # no compiler
    assert not _qkv(qkv_gates, leaves)[3].grad_fn.name().endswith(name)
    assert not headwise(x, w).grad_fn.name().endswith(name)


@needs_c
def test_mlstm_layer_is_the_same_on_either_path(monkeypatch):
    """The whole NeurIPS mLSTM layer (float64, T = 80): output, final state and every parameter's gradient with the
    C maps equal those with the separate maps."""
    from seqzoo.mixers.mlstm import MLSTM

    require_built(hw._LIB)  # else both runs below take the separate maps and compare PyTorch with itself

    torch.manual_seed(0)
    layer = MLSTM(32, n_heads=2).double()
    x = torch.randn(2, 80, 32, dtype=torch.float64, requires_grad=True)

    def run():
        layer.zero_grad()
        y, state = layer(x)
        (y.square().sum() + state.C.sum()).backward()
        return [y, state.C, state.n, x.grad.clone(), *(p.grad.clone() for p in layer.parameters())]

    x.grad = None
    got = run()
    x.grad = None
    monkeypatch.setattr(hw, "library", lambda: None)
    ref = run()
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
