"""ops/mlstm/output.py: the mLSTM layer's output path in C (``output.c``) against the PyTorch composite, values and
gradients of every input, float64 and float32, with ``h`` given as the chunkwise cell's strided view."""

import pytest
import torch
from native_libs import needs_built

from seqzoo.ops.mlstm import output
from seqzoo.ops.mlstm.output import mlstm_output, output_native, output_reference

needs_c = needs_built(output._LIB)


def _inputs(B, T, H, V, dtype, seed=0):
    """h as a (B, T, H, V) view of a (B, H, T, V) buffer (as the cell returns it), z as a column slice of a wider
    projection (as the layer splits it); gradients flow to the underlying leaves."""
    g = torch.Generator().manual_seed(seed)
    E = H * V
    hb = (torch.randn(B, H, T, V, generator=g, dtype=dtype) * 2 + 0.5).requires_grad_()
    xc = torch.randn(B, T, E, generator=g, dtype=dtype).requires_grad_()
    zz = torch.randn(B, T, 2 * E, generator=g, dtype=dtype).requires_grad_()
    w = torch.randn(E, generator=g, dtype=dtype).requires_grad_()
    skip = torch.randn(E, generator=g, dtype=dtype).requires_grad_()
    gu = torch.randn(B, T, E, generator=g, dtype=dtype)
    return (hb, xc, zz, w, skip), gu


def _run(fn, leaves, gu, eps=1e-5):
    hb, xc, zz, w, skip = leaves
    E = xc.shape[-1]
    u = fn(hb.transpose(1, 2), xc, zz[..., E:], w, skip, eps)
    return (u, *torch.autograd.grad(u, leaves, gu))


@needs_c
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
@pytest.mark.parametrize("shape", [(2, 5, 3, 8), (1, 70, 2, 20), (2, 3, 4, 128)])  # V = 20: lanes with a tail
def test_native_matches_composite(dtype, tol, shape):
    leaves, gu = _inputs(*shape, dtype)
    got = _run(output_native, leaves, gu)
    ref = _run(output_reference, leaves, gu)
    for name, a, b in zip(("u", "dh", "dx_c", "dz", "dweight", "dskip"), got, ref):
        assert a.dtype == dtype, name
        torch.testing.assert_close(a, b, rtol=tol, atol=tol, msg=name)


@needs_c
def test_dispatch_takes_c_for_cpu_floats_and_the_composite_otherwise(monkeypatch):
    leaves, gu = _inputs(2, 4, 2, 8, torch.float32)
    calls = []
    monkeypatch.setattr(output, "output_native", lambda *a: calls.append(1) or output_reference(*a))
    _run(mlstm_output, leaves, gu)
    assert calls == [1]
    half = [t.detach().bfloat16().requires_grad_() for t in leaves]
    _run(mlstm_output, half, gu.bfloat16())  # 16-bit: the composite (normalised in float32)
    monkeypatch.setattr(output, "library", lambda: None)  # no compiler: the composite
    _run(mlstm_output, leaves, gu)
    assert calls == [1]


@needs_c
def test_torch_compile_traces_the_composite_not_the_c_calls(monkeypatch):
    """Under torch.compile the layer takes the PyTorch composite and conv (which Inductor fuses; a C call would break
    the graph), with the eager results; eager calls the C paths."""
    import seqzoo.ops.causal_conv as conv
    from seqzoo.mixers import build_mixer

    calls = []

    def counted(name, fn):
        return lambda *a, **kw: calls.append(name) or fn(*a, **kw)

    monkeypatch.setattr(output, "output_native", counted("output", output.output_native))
    monkeypatch.setattr(conv, "causal_conv1d_native", counted("conv", conv.causal_conv1d_native))
    torch.manual_seed(0)
    mix = build_mixer("mlstm", d_model=16, n_heads=2, chunk_size=4)
    x = torch.randn(2, 8, 16)
    eager = mix(x)[0]
    assert sorted(calls) == ["conv", "output"]
    calls.clear()
    torch._dynamo.reset()
    compiled = torch.compile(mix, backend="aot_eager")(x)[0]
    torch._dynamo.reset()
    assert calls == []
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)
