"""The kernels switch (``SEQZOO_KERNELS`` / ``set_kernels`` / ``use_kernels``), the dispatch decision, the
log-once record, and the switch forcing each op's ``mode="auto"`` to its Triton kernel (interpreter, CPU tensors)
or to torch.

Forcing runs the Triton kernels under ``TRITON_INTERPRET=1`` (set by conftest without a GPU) at tiny shapes; the
outputs are compared with the PyTorch implementations the switch would otherwise pick.
"""

import logging

import pytest
import torch
from helpers import spy

from seqzoo.errors import InputError
from seqzoo.kernels import set_kernels as _set_kernels
from seqzoo.kernels import switch, usable_on, use_kernels, want_triton

CPU_TRITON = usable_on("cpu")  # triton installed and TRITON_INTERPRET=1
needs_interp = pytest.mark.skipif(not CPU_TRITON, reason="needs triton under TRITON_INTERPRET=1 (CPU tensors)")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    """No setting or log record leaks between tests (or in from other test modules)."""
    monkeypatch.delenv("SEQZOO_KERNELS", raising=False)
    monkeypatch.setattr(switch, "_override", None)
    monkeypatch.setattr(switch, "_seen", set())
    yield
    _set_kernels(None)


# ------------------------------------------------------------------------------------------------ the setting
def test_setting_from_env_python_and_context(monkeypatch):
    assert switch.kernels_setting() == "auto"
    monkeypatch.setenv("SEQZOO_KERNELS", "torch")
    assert switch.kernels_setting() == "torch"  # read at use time, not at import
    monkeypatch.setenv("SEQZOO_KERNELS", " Triton ")
    assert switch.kernels_setting() == "triton"
    _set_kernels("auto")  # Python wins over the environment
    assert switch.kernels_setting() == "auto"
    with use_kernels("torch"):
        assert switch.kernels_setting() == "torch"
        with use_kernels("triton"):
            assert switch.kernels_setting() == "triton"
        assert switch.kernels_setting() == "torch"
    assert switch.kernels_setting() == "auto"
    _set_kernels(None)  # back to the environment
    assert switch.kernels_setting() == "triton"


def test_context_restores_after_an_error():
    with pytest.raises(RuntimeError), use_kernels("torch"):
        raise RuntimeError("inside")
    assert switch.kernels_setting() == "auto"


def test_invalid_values_name_the_switch_and_the_choices(monkeypatch):
    monkeypatch.setenv("SEQZOO_KERNELS", "cuda")
    with pytest.raises(InputError, match=r"SEQZOO_KERNELS must be one of auto, torch, triton; got 'cuda'"):
        switch.kernels_setting()
    with pytest.raises(InputError, match="SEQZOO_KERNELS"):  # the dispatch reads it: the error reaches the user
        want_triton("mlstm", "cpu")
    with pytest.raises(InputError, match=r"set_kernels .*auto, torch, triton"):
        _set_kernels("fast")
    with pytest.raises(InputError, match="auto, torch, triton"):
        use_kernels(3).__enter__()


# ------------------------------------------------------------------------------------------------ the decision
def test_decision_without_interpreter(monkeypatch):
    """Off the interpreter: auto picks Triton for CUDA tensors that fit, never for CPU; torch never; triton on CPU
    tensors is an InputError saying why."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert want_triton("gateloop", "cuda") is True
    assert want_triton("gateloop", "cuda", unfit="float64") is False
    assert want_triton("gateloop", "cpu") is False
    with use_kernels("torch"):
        assert want_triton("gateloop", "cuda") is False
    with use_kernels("triton"):
        assert want_triton("gateloop", "cuda") is True
        with pytest.raises(InputError, match=r"gateloop Triton kernel cannot run: .*CUDA tensors.*TRITON_INTERPRET"):
            want_triton("gateloop", "cpu")
        with pytest.raises(InputError, match="gateloop Triton kernel cannot run: chunk_size"):
            want_triton("gateloop", "cuda", unfit=switch.chunk_unfit(24))


def test_decision_without_triton(monkeypatch):
    monkeypatch.setattr(switch, "triton_unusable", lambda device: "triton is not installed (pip install triton)")
    assert want_triton("mlstm", "cuda") is False
    with use_kernels("triton"), pytest.raises(InputError, match="mlstm Triton kernel cannot run: triton is not"):
        want_triton("mlstm", "cuda")


@needs_interp
def test_decision_under_interpreter():
    """auto never picks the interpreter; triton does (CPU tensors), and refuses inputs the kernel cannot take."""
    assert want_triton("rglru", "cpu") is False
    with use_kernels("triton"):
        assert want_triton("rglru", "cpu") is True
        x64 = torch.zeros(2, dtype=torch.float64)
        with pytest.raises(InputError, match="rglru Triton kernel cannot run: .*float64"):
            want_triton("rglru", "cpu", switch.float_unfit(x64))


def test_chunk_unfit():
    assert all(switch.chunk_unfit(c) is None for c in (16, 32, 64, 128))
    for c in (0, 8, 24, 48, 100, 64.0):
        assert "power of two >= 16" in switch.chunk_unfit(c)


# ------------------------------------------------------------------------------------------------ forcing the ops
def _ops_cases(g):
    """(op name, module holding its Triton entry, entry name, call(impl) -> tensor outputs) at tiny shapes."""
    from seqzoo.ops import causal_conv as conv_pkg
    from seqzoo.ops import gateloop as gl
    from seqzoo.ops import mlstm as ml
    from seqzoo.ops import rglru as rg
    from seqzoo.ops.causal_conv import triton as conv_tr
    from seqzoo.ops.gateloop import triton as gl_tr
    from seqzoo.ops.mlstm import triton as ml_tr
    from seqzoo.ops.rglru import triton as rg_tr

    B, T, H, K = 1, 20, 2, 4
    q, k = torch.randn(B, T, H, K, generator=g), torch.randn(B, T, H, K, generator=g)
    v = torch.randn(B, T, H, K, generator=g)
    i, f = torch.randn(B, T, H, generator=g), torch.randn(B, T, H, generator=g) + 2
    log_mag = -torch.rand(B, T, H, K, generator=g)
    phase = torch.randn(B, T, H, K, generator=g) * 0.3
    x, gx, ga = (torch.randn(B, T, 6, generator=g) for _ in range(3))
    ap = torch.randn(6, generator=g)
    a = torch.rand(B, T, 6, generator=g)
    w = torch.randn(6, 4, generator=g)
    return [
        ("mlstm", ml_tr, "mlstm_triton", lambda impl: ml.mlstm(q, k, v, i, f, mode=impl, chunk_size=16)[0]),
        ("gateloop", gl_tr, "gateloop_triton", lambda impl: gl.gateloop(q, k, v, log_mag, phase, mode=impl)[0]),
        ("rglru", rg_tr, "rglru_fused_triton", lambda impl: rg.rglru(x, gx, ga, ap, mode=impl)[0]),
        ("linear_scan", rg_tr, "linear_scan_triton", lambda impl: rg.linear_scan(a, x, mode=impl)[0]),
        ("causal_conv1d", conv_tr, "causal_conv1d_triton", lambda impl: conv_pkg.causal_conv1d(x, w, mode=impl)[0]),
    ]


@needs_interp
@pytest.mark.parametrize("case", range(5))
def test_switch_forces_each_op(case, monkeypatch, caplog):
    op, module, entry, call = _ops_cases(torch.Generator().manual_seed(case))[case]
    calls = spy(monkeypatch, module, entry)
    caplog.set_level(logging.INFO, logger="seqzoo.kernels")
    y_auto = call("auto")  # auto on CPU: torch
    with use_kernels("torch"):
        y_torch = call("auto")
    assert calls == []
    with use_kernels("triton"):
        y_triton = call("auto")
    assert len(calls) == 1
    torch.testing.assert_close(y_triton, y_torch, rtol=1e-4, atol=1e-5)
    assert torch.equal(y_auto, y_torch)
    with use_kernels("triton"):
        y_explicit = call("naive")  # an explicit impl is never overridden
    assert len(calls) == 1
    torch.testing.assert_close(y_explicit, y_torch, rtol=1e-4, atol=1e-5)
    lines = [r.getMessage() for r in caplog.records if r.name == "seqzoo.kernels"]
    assert any(f"{op} runs the triton implementation on cpu" in m for m in lines), lines


def test_log_once_per_op_impl_device(caplog):
    from seqzoo.ops.causal_conv import causal_conv1d
    from seqzoo.ops.causal_conv.native import unavailable as native_unavailable

    caplog.set_level(logging.INFO, logger="seqzoo.kernels")
    x, w = torch.randn(1, 5, 3), torch.randn(3, 4)
    for _ in range(3):
        causal_conv1d(x, w)
    causal_conv1d(x, w, mode="naive")
    causal_conv1d(x, w, mode="naive")
    lines = [r.getMessage() for r in caplog.records if r.name == "seqzoo.kernels"]
    cpu_path = "native" if native_unavailable() is None else "torch"  # the C loops where they build
    assert lines == [
        f"seqzoo.kernels: causal_conv1d runs the {cpu_path} implementation on cpu tensors (first use)",
        "seqzoo.kernels: causal_conv1d runs the naive implementation on cpu tensors (first use)",
    ]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "seqzoo.kernels")


@needs_interp
def test_forced_triton_refuses_float64():
    from seqzoo.ops.mlstm import mlstm

    q = torch.randn(1, 4, 1, 4, dtype=torch.float64)
    with use_kernels("triton"), pytest.raises(InputError, match="mlstm Triton kernel cannot run: .*float64"):
        mlstm(q, q, q, q[..., 0], q[..., 0], chunk_size=16)
