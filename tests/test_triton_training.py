"""Training through the Triton kernels: an mLSTM language model takes the Triton mLSTM backward and its gradients
equal the PyTorch path's; GateLoop's ``chunk_size`` reaches the Triton kernel, and one it cannot take is an
``InputError``.

Without a GPU the kernels run in Triton's interpreter on CPU tensors (``TRITON_INTERPRET=1``, set by conftest),
forced by ``use_kernels("triton")``; shapes are tiny.
"""

import pytest
import torch

from seqzoo.errors import InputError
from seqzoo.kernels import switch, usable_on, use_kernels

pytestmark = pytest.mark.skipif(not usable_on("cpu"), reason="needs triton under TRITON_INTERPRET=1 (CPU tensors)")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv("SEQZOO_KERNELS", raising=False)
    monkeypatch.setattr(switch, "_override", None)
    monkeypatch.setattr(switch, "_seen", set())


def _spy(monkeypatch, module, name):
    """Replace ``module.name`` by a wrapper that records each call's arguments, and return the record."""
    calls, real = [], getattr(module, name)

    def wrapper(*a, **kw):
        calls.append((a, kw))
        return real(*a, **kw)

    monkeypatch.setattr(module, name, wrapper)
    return calls


# ------------------------------------------------------------------------------------------------ GateLoop chunks
def _gateloop_inputs(T=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    B, H, K = 1, 2, 4
    q, k, v = (torch.randn(B, T, H, K, generator=g) for _ in range(3))
    log_mag = -torch.rand(B, T, H, K, generator=g) * 0.5
    phase = torch.randn(B, T, H, K, generator=g) * 0.3
    return q, k, v, log_mag, phase


@pytest.mark.parametrize("chunk", [16, 32])
def test_gateloop_op_passes_chunk_size_to_the_kernel(chunk, monkeypatch):
    from seqzoo.ops.gateloop import gateloop, gateloop_naive
    from seqzoo.ops.gateloop import triton as gl_triton

    calls = _spy(monkeypatch, gl_triton, "gla_triton")
    q, k, v, log_mag, phase = _gateloop_inputs()
    y, S = gateloop(q, k, v, log_mag, phase, mode="triton", chunk_size=chunk)
    assert [c[0][5] for c in calls] == [chunk]  # gla_triton(q, k, v, log_a, state, chunk_size, ...)
    y_ref, S_ref = gateloop_naive(q, k, v, log_mag, phase)
    torch.testing.assert_close(y, y_ref.float(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(S, S_ref.to(S.dtype), rtol=1e-4, atol=1e-4)


def test_gateloop_mixer_chunk_size_reaches_the_kernel(monkeypatch):
    from seqzoo.mixers import build_mixer
    from seqzoo.ops.gateloop import triton as gl_triton

    calls = _spy(monkeypatch, gl_triton, "gla_triton")
    torch.manual_seed(0)
    m = build_mixer("gateloop", d_model=8, n_heads=2, chunk_size=32)
    x = torch.randn(1, 40, 8)
    y_ref, s_ref = m(x, mode="chunkwise")  # auto on CPU: the torch chunkwise form
    assert calls == []
    with use_kernels("triton"):
        y, s = m(x, mode="chunkwise")
    assert [c[0][5] for c in calls] == [32]
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(s, s_ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("chunk", [8, 24, 48])
def test_gateloop_chunk_the_kernel_cannot_take_is_an_input_error(chunk):
    from seqzoo.mixers import build_mixer
    from seqzoo.ops.gateloop import gateloop

    q, k, v, log_mag, phase = _gateloop_inputs(T=8)
    with pytest.raises(InputError, match=rf"gateloop: chunk_size must be a power of two >= 16 .*got {chunk}"):
        gateloop(q, k, v, log_mag, phase, mode="triton", chunk_size=chunk)
    m = build_mixer("gateloop", d_model=8, n_heads=2, chunk_size=chunk)
    x = torch.randn(1, 8, 8)
    m(x, mode="chunkwise")  # any chunk size on the torch path
    with use_kernels("triton"), pytest.raises(InputError, match=r"gateloop Triton kernel cannot run: chunk_size"):
        m(x, mode="chunkwise")
