"""Training through the Triton kernels: an mLSTM language model takes the Triton mLSTM backward and its gradients
equal the PyTorch path's; GateLoop's ``chunk_size`` reaches the Triton kernel, and one it cannot take is an
``InputError``.

Without a GPU the kernels run in Triton's interpreter on CPU tensors (``TRITON_INTERPRET=1``, set by conftest),
forced by ``use_kernels("triton")``; shapes are tiny.
"""

import copy
import logging

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


# ------------------------------------------------------------------------------------------------ mLSTM training
@pytest.mark.parametrize("variant", ["neurips", "7b"])
def test_mlstm_model_trains_through_the_triton_backward(variant, monkeypatch, caplog):
    """Two AdamW steps of a 2-layer mLSTM LM: Triton fwd + bwd (forced) against the torch chunkwise path, fp32.
    The Triton backward (``ops/mlstm/triton.py: _backward``) must run once per layer and step."""
    from seqzoo.models.lm import LanguageModel
    from seqzoo.models.presets.xlstm import xlstm7b_config, xlstm_config
    from seqzoo.ops.mlstm import triton as mlstm_triton_module

    if variant == "neurips":
        cfg = xlstm_config(32, 2, (), vocab_size=32, mlstm_heads=2, chunk_size=16)
    else:
        cfg = xlstm7b_config(d_model=32, n_layers=2, num_heads=2, vocab_size=32, chunk_size=16)
    torch.manual_seed(0)
    ref = LanguageModel(cfg)
    tri = copy.deepcopy(ref)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 32, (2, 21), generator=g)  # T = 20: one full chunk and a masked tail chunk
    backward_calls = _spy(monkeypatch, mlstm_triton_module, "_backward")
    caplog.set_level(logging.INFO, logger="seqzoo.kernels")
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (ref, tri)]
    for step in range(2):
        losses = []
        for model, opt, setting in ((ref, opts[0], "torch"), (tri, opts[1], "triton")):
            opt.zero_grad()
            with use_kernels(setting):
                loss = model(ids[:, :-1], labels=ids[:, 1:]).loss
                loss.backward()
            losses.append(loss.detach())
        assert len(backward_calls) == 2 * (step + 1), "the Triton mLSTM backward was not taken"
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
        for (name, p_ref), p_tri in zip(ref.named_parameters(), tri.parameters()):
            assert p_tri.grad is not None, name
            scale = p_ref.grad.abs().max().item()
            torch.testing.assert_close(p_tri.grad, p_ref.grad, rtol=1e-4, atol=1e-5 * max(scale, 1e-3), msg=name)
        for opt in opts:
            opt.step()
    lines = [r.getMessage() for r in caplog.records if r.name == "seqzoo.kernels"]
    assert any("mlstm runs the triton implementation on cpu" in m for m in lines), lines
    assert any("mlstm runs the chunkwise implementation on cpu" in m for m in lines), lines


def test_mlstm_triton_chunk_size_is_not_silently_changed():
    from seqzoo.ops.mlstm import mlstm

    q = torch.randn(1, 4, 1, 4)
    with pytest.raises(InputError, match="chunk_size must be a power of two >= 16"):
        mlstm(q, q, q, q[..., 0], q[..., 0], impl="triton", chunk_size=24)


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
    from seqzoo.ops.gateloop import gateloop_naive, gateloop_op
    from seqzoo.ops.gateloop import triton as gl_triton

    calls = _spy(monkeypatch, gl_triton, "gla_triton")
    q, k, v, log_mag, phase = _gateloop_inputs()
    y, S = gateloop_op(q, k, v, log_mag, phase, impl="triton", chunk_size=chunk)
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
    from seqzoo.ops.gateloop import gateloop_op

    q, k, v, log_mag, phase = _gateloop_inputs(T=8)
    with pytest.raises(InputError, match=rf"gateloop_op: chunk_size must be a power of two >= 16 .*got {chunk}"):
        gateloop_op(q, k, v, log_mag, phase, impl="triton", chunk_size=chunk)
    m = build_mixer("gateloop", d_model=8, n_heads=2, chunk_size=chunk)
    x = torch.randn(1, 8, 8)
    m(x, mode="chunkwise")  # any chunk size on the torch path
    with use_kernels("triton"), pytest.raises(InputError, match=r"gateloop Triton kernel cannot run: chunk_size"):
        m(x, mode="chunkwise")
