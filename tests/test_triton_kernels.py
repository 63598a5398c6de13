"""Triton kernels (seqzoo/kernels) against the naive references: outputs, final states and gradients.

Without CUDA the kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1, set below before triton is
imported) at tiny shapes with one autotune config; the "real" shape cases run only on a CUDA machine.
Run: ``pytest tests/test_triton_kernels.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")

from seqzoo.ops.gateloop import gateloop_naive
from seqzoo.ops.mlstm import mlstm_naive_recurrent
from seqzoo.ops.rglru import linear_scan_naive, rglru_naive

DEV = "cuda" if CUDA else "cpu"
needs_cuda = pytest.mark.skipif(not CUDA, reason="real shapes need a CUDA GPU (interpreter too slow)")
LOWP = (torch.bfloat16, torch.float16)
# dtype -> allowed max abs error relative to max(1, max |reference|), against an fp64 reference computed from the
# same (already rounded) inputs: fp32 arithmetic, or the 16-bit rounding of outputs / gradients / dot operands
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}


def _close(name, got, ref, dtype, scale=1.0):
    got, ref = got.detach().cpu(), ref.detach().cpu()
    if got.is_complex():
        got, ref = torch.view_as_real(got), torch.view_as_real(ref)
    got, ref = got.double(), ref.double()
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(got).all(), f"{name}: non-finite values"
    err = (got - ref).abs().max().item()
    bound = TOL[dtype] * scale * max(1.0, ref.abs().max().item())
    assert err <= bound, f"{name}: max abs error {err:.3g} > {bound:.3g} (ref max {ref.abs().max().item():.3g})"


def _grads(out, inputs, weights):
    loss = sum((o.double() * w).sum() for o, w in zip(out, weights))
    return torch.autograd.grad(loss, [x for x in inputs if x is not None])


# ------------------------------------------------------------------------------------------------ diagonal scan
SCAN_CASES = [
    pytest.param((2, 23, 40), torch.float32, True, id="tiny-T23-fp32-h0"),
    pytest.param((2, 23, 40), torch.float32, False, id="tiny-T23-fp32"),
    pytest.param((1, 1, 33), torch.float32, True, id="tiny-T1-fp32-h0"),
    pytest.param((1, 17, 24), torch.bfloat16, True, id="tiny-T17-bf16-h0"),
    pytest.param((1, 17, 24), torch.float16, False, id="tiny-T17-fp16"),
    *(pytest.param((8, 4096, 2048), dt, True, id=f"real-{dt}", marks=needs_cuda) for dt in (torch.float32, *LOWP)),
]


@pytest.mark.parametrize("shape, dtype, with_h0", SCAN_CASES)
def test_linear_scan_matches_naive(shape, dtype, with_h0):
    from seqzoo.ops.rglru.triton import linear_scan_triton

    B, T, R = shape
    g = torch.Generator().manual_seed(0)
    a = torch.rand(B, T, R, generator=g).to(DEV, dtype)
    a[:, T // 2] = 0  # a document reset: exact in a sequential scan
    b = torch.randn(B, T, R, generator=g).to(DEV, dtype)
    h0 = torch.randn(B, R, generator=g).to(DEV) if with_h0 else None
    out_dtype = torch.float32 if dtype == torch.float32 else dtype
    ins = [t.clone().requires_grad_() if t is not None else None for t in (a, b, h0)]
    refs = [t.detach().double().requires_grad_() if t is not None else None for t in (a, b, h0)]
    h, hT = linear_scan_triton(*ins, out_dtype=out_dtype)
    hr, hTr = linear_scan_naive(*refs)
    assert h.dtype == out_dtype and hT.dtype == torch.float32
    _close("h", h, hr, dtype)
    _close("h_T", hT, hTr, dtype if dtype == torch.float32 else torch.float16)
    w = [
        torch.randn(h.shape, generator=g, dtype=torch.float64).to(DEV),
        torch.randn(hT.shape, generator=g, dtype=torch.float64).to(DEV),
    ]
    gk = _grads((h, hT), ins, w)
    gr = _grads((hr, hTr), refs, w)
    for name, x, y in zip(("da", "db", "dh0"), gk, gr):
        _close(name, x, y, dtype, scale=2.0)


def test_rglru_triton_matches_naive():
    from seqzoo.ops.rglru.triton import rglru_triton

    g = torch.Generator().manual_seed(1)
    B, T, R = 2, 21, 24
    x, gx, ga = (torch.randn(B, T, R, generator=g).to(DEV) for _ in range(3))
    a_param = torch.randn(R, generator=g).to(DEV)
    reset = torch.zeros(B, T, dtype=torch.bool, device=DEV)
    reset[0, 7] = True
    h0 = torch.randn(B, R, generator=g).to(DEV)
    ins = [t.clone().requires_grad_() for t in (x, gx, ga, a_param, h0)]
    refs = [t.detach().double().requires_grad_() for t in (x, gx, ga, a_param, h0)]
    y, hT = rglru_triton(ins[0], ins[1], ins[2], ins[3], reset, ins[4])
    yr, hTr = rglru_naive(refs[0], refs[1], refs[2], refs[3], reset, refs[4])
    _close("y", y, yr, torch.float32)
    _close("h_T", hT, hTr, torch.float32)
    w = [
        torch.randn(y.shape, generator=g, dtype=torch.float64).to(DEV),
        torch.randn(hT.shape, generator=g, dtype=torch.float64).to(DEV),
    ]
    for name, x1, x2 in zip(
        ("dx", "dgx", "dga", "da_param", "dh0"), _grads((y, hT), ins, w), _grads((yr, hTr), refs, w)
    ):
        _close(name, x1, x2, torch.float32, scale=2.0)


RGLRU_CASES = [
    pytest.param((2, 21, 24), torch.float32, id="tiny-T21-fp32"),
    pytest.param((1, 13, 40), torch.bfloat16, id="tiny-T13-bf16"),
    pytest.param((1, 13, 40), torch.float16, id="tiny-T13-fp16"),
    *(pytest.param((8, 4096, 2048), dt, id=f"real-{dt}", marks=needs_cuda) for dt in (torch.float32, *LOWP)),
]


@pytest.mark.parametrize("shape, dtype", RGLRU_CASES)
def test_rglru_fused_matches_naive(shape, dtype):
    """Fused gates + scan: outputs, final state and gradients of x, both gates, Λ̃ and h0, with document resets."""
    from seqzoo.ops.rglru.triton import rglru_fused_triton

    B, T, R = shape
    g = torch.Generator().manual_seed(1)
    flat = [torch.randn(B, T, R, generator=g).to(DEV, dtype) for _ in range(3)]
    flat += [(torch.randn(R, generator=g) * 3).to(DEV, dtype), torch.randn(B, R, generator=g).to(DEV)]
    reset = torch.zeros(B, T, dtype=torch.bool, device=DEV)
    reset[0, T // 3] = True
    reset[-1, 0] = True
    ins = [t.clone().requires_grad_() for t in flat]
    refs = [t.detach().double().requires_grad_() for t in flat]
    y, hT = rglru_fused_triton(*ins[:4], reset, ins[4])
    yr, hTr = rglru_naive(*refs[:4], reset, refs[4])
    assert y.dtype == dtype and hT.dtype == torch.float32
    _close("y", y, yr, dtype)
    _close("h_T", hT, hTr, dtype if dtype == torch.float32 else torch.float16)
    w = [
        torch.randn(y.shape, generator=g, dtype=torch.float64).to(DEV),
        torch.randn(hT.shape, generator=g, dtype=torch.float64).to(DEV),
    ]
    for name, x1, x2 in zip(
        ("dx", "dgate_x", "dgate_a", "da_param", "dh0"), _grads((y, hT), ins, w), _grads((yr, hTr), refs, w)
    ):
        _close(name, x1, x2, dtype, scale=2.0)


# ------------------------------------------------------------------------------------------------ mLSTM
MLSTM_SHAPES = [
    pytest.param((1, 37, 2, 16, 24), id="tiny-T37"),
    pytest.param((2, 9, 1, 20, 16), id="tiny-T9"),
    pytest.param((4, 2048, 16, 128, 256), id="real", marks=needs_cuda),
]


def _mlstm_inputs(shape, dtype, with_state, strong=False, seed=0):
    B, T, H, K, V = shape
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, K, generator=g).to(DEV, dtype) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=g).to(DEV, dtype)
    i = (torch.randn(B, T, H, generator=g) * (8 if strong else 2)).to(DEV, dtype)
    f = (torch.randn(B, T, H, generator=g) * (8 if strong else 1) + 2).to(DEV, dtype)
    state = None
    if with_state:
        state = (
            torch.randn(B, H, K, V, generator=g).to(DEV),
            torch.randn(B, H, K, generator=g).abs().to(DEV),
            torch.randn(B, H, generator=g).to(DEV),
        )
    return (q, k, v, i, f), state


@pytest.mark.parametrize("shape", MLSTM_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, *LOWP])
@pytest.mark.parametrize("with_state", [True, False])
def test_mlstm_forward_matches_naive(shape, dtype, with_state):
    from seqzoo.ops.mlstm.triton import mlstm_triton

    ins, state = _mlstm_inputs(shape, dtype, with_state)
    with torch.no_grad():
        h, (C, n, m) = mlstm_triton(*ins, state)
        hr, (Cr, nr, mr) = mlstm_naive_recurrent(
            *(t.double() for t in ins), None if state is None else tuple(s.double() for s in state)
        )
    assert h.dtype == dtype and C.dtype == n.dtype == m.dtype == torch.float32
    _close("h", h, hr, dtype)
    for name, x, y in (("C", C, Cr), ("n", n, nr), ("m", m, mr)):
        _close(name, x, y, dtype if dtype == torch.float32 else torch.float16)


def test_mlstm_strong_gates_finite_and_exact():
    """Input gates up to ±25 and forget pre-activations down to −20: the stabiliser keeps everything finite."""
    from seqzoo.ops.mlstm.triton import mlstm_triton

    ins, state = _mlstm_inputs((1, 40, 2, 16, 16), torch.float32, True, strong=True, seed=3)
    h, (C, n, m) = mlstm_triton(*ins, state)
    hr, (Cr, nr, mr) = mlstm_naive_recurrent(*(t.double() for t in ins), tuple(s.double() for s in state))
    for name, x, y in (("h", h, hr), ("C", C, Cr), ("n", n, nr), ("m", m, mr)):
        _close(name, x, y, torch.float32)


@pytest.mark.parametrize("forget_gate", ["sigmoid", "exp"])
def test_mlstm_gradients_match_naive(forget_gate):
    from seqzoo.ops.mlstm.triton import mlstm_triton

    (q, k, v, i, f), state = _mlstm_inputs((1, 19, 2, 16, 16), torch.float32, True, seed=5)
    if forget_gate == "exp":
        f = -torch.rand_like(f)  # log f = f~ <= 0
    flat = [q, k, v, i, f, *state]
    ins = [t.clone().requires_grad_() for t in flat]
    refs = [t.detach().double().requires_grad_() for t in flat]
    h, st = mlstm_triton(*ins[:5], tuple(ins[5:]), forget_gate=forget_gate)
    hr, str_ = mlstm_naive_recurrent(*refs[:5], tuple(refs[5:]), forget_gate=forget_gate)
    g = torch.Generator().manual_seed(9)
    outs, outs_r = (h, *st[:2]), (hr, *str_[:2])  # m is piecewise constant: its gradient is checked through h
    w = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(DEV) for o in outs]
    for name, x, y in zip(
        ("dq", "dk", "dv", "di", "df", "dC0", "dn0", "dm0"), _grads(outs, ins, w), _grads(outs_r, refs, w)
    ):
        _close(name, x, y, torch.float32, scale=3.0)


# ------------------------------------------------------------------------------------------------ GLA / GateLoop
GLA_SHAPES = [
    pytest.param((1, 37, 2, 20, 24), id="tiny-T37"),
    pytest.param((2, 5, 1, 16, 16), id="tiny-T5"),
    pytest.param((4, 2048, 16, 128, 256), id="real", marks=needs_cuda),
]


def _gla_inputs(shape, dtype, decay=2.0, seed=0):
    B, T, H, K, V = shape
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, K, generator=g).to(DEV, dtype) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=g).to(DEV, dtype)
    log_a = (-torch.rand(B, T, H, K, generator=g) * decay).to(DEV, dtype)
    S0 = torch.randn(B, H, K, V, generator=g).to(DEV)
    return q, k, v, log_a, S0


@pytest.mark.parametrize("shape", GLA_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, *LOWP])
def test_gateloop_real_forward_matches_naive(shape, dtype):
    from seqzoo.ops.gateloop.triton import gateloop_triton

    q, k, v, log_a, S0 = _gla_inputs(shape, dtype)
    state = torch.complex(S0, torch.zeros_like(S0))
    y, S = gateloop_triton(q, k, v, log_a, None, state)
    yr, Sr = gateloop_naive(*(t.double() for t in (q, k, v, log_a)), None, state.to(torch.complex128))
    assert y.dtype == torch.float32 and S.dtype == torch.complex64
    _close("y", y, yr, dtype)
    _close("S.real", S.real, Sr.real, dtype)
    assert S.imag.abs().max() == 0 and Sr.imag.abs().max() == 0


def test_gla_strong_decay_no_overflow():
    """log|a| down to −60 per step: a e^{+b}·e^{−b} factorisation would overflow; every exponent here is <= 0."""
    from seqzoo.ops.gateloop.triton import gla_triton

    q, k, v, log_a, S0 = _gla_inputs((1, 33, 1, 16, 16), torch.float32, decay=60.0, seed=2)
    y, S = gla_triton(q, k, v, log_a, S0)
    yr, Sr = gateloop_naive(
        *(t.double() for t in (q, k, v, log_a)), None, torch.complex(S0, 0 * S0).to(torch.complex128)
    )
    _close("y", y, yr, torch.float32)
    _close("S", S, Sr.real, torch.float32)


GLA_GRAD_CASES = [
    pytest.param((1, 19, 2, 20, 24), torch.float32, "triton", id="tiny-T19-fp32-triton"),
    pytest.param((1, 19, 2, 16, 16), torch.float32, "torch", id="tiny-T19-fp32-torch-recompute"),
    pytest.param((1, 11, 1, 16, 16), torch.bfloat16, "triton", id="tiny-T11-bf16-triton"),
    pytest.param((2, 512, 8, 128, 256), torch.bfloat16, "triton", id="real-bf16", marks=needs_cuda),
]


@pytest.mark.parametrize("shape, dtype, backward", GLA_GRAD_CASES)
def test_gla_gradients_match_naive(shape, dtype, backward):
    from seqzoo.ops.gateloop.triton import gla_triton

    flat = list(_gla_inputs(shape, dtype, seed=4))
    ins = [t.clone().requires_grad_() for t in flat]
    refs = [t.detach().double().requires_grad_() for t in flat]
    y, S = gla_triton(*ins, backward=backward)
    yr, Sr = gateloop_naive(*refs[:4], None, torch.complex(refs[4], torch.zeros_like(refs[4])))
    g = torch.Generator().manual_seed(7)
    w = [
        torch.randn(y.shape, generator=g, dtype=torch.float64).to(DEV),
        torch.randn(S.shape, generator=g, dtype=torch.float64).to(DEV),
    ]
    for name, x1, x2 in zip(
        ("dq", "dk", "dv", "dlog_a", "dS0"), _grads((y, S), ins, w), _grads((yr, Sr.real), refs, w)
    ):
        _close(name, x1, x2, dtype, scale=3.0)


COMPLEX_SHAPES = [
    pytest.param((1, 29, 2, 8, 16), torch.float32, id="tiny-T29-fp32"),
    pytest.param((1, 21, 1, 8, 16), torch.bfloat16, id="tiny-T21-bf16"),
    pytest.param((4, 2048, 16, 64, 256), torch.bfloat16, id="real-bf16", marks=needs_cuda),
]


@pytest.mark.parametrize("shape, dtype", COMPLEX_SHAPES)
def test_gateloop_complex_matches_naive(shape, dtype):
    """Complex transitions via phase rotation (real GLA of width 2K), complex incoming state, large phases."""
    from seqzoo.ops.gateloop.triton import gateloop_triton

    B, T, H, K, V = shape
    q, k, v, log_a, S0 = _gla_inputs(shape, dtype, decay=0.5, seed=6)
    g = torch.Generator().manual_seed(8)
    phase = (torch.randn(B, T, H, K, generator=g) * 4).to(DEV, dtype)
    state = torch.complex(S0, torch.randn(S0.shape, generator=g).to(DEV))
    y, S = gateloop_triton(q, k, v, log_a, phase, state)
    yr, Sr = gateloop_naive(*(t.double() for t in (q, k, v, log_a, phase)), state.to(torch.complex128))
    _close("y", y, yr, dtype)
    _close("S", S, Sr, dtype)


def test_gateloop_complex_gradients_match_naive():
    from seqzoo.ops.gateloop.triton import gateloop_triton

    q, k, v, log_a, S0 = _gla_inputs((1, 13, 1, 8, 16), torch.float32, decay=0.5, seed=10)
    phase = torch.randn(q.shape, generator=torch.Generator().manual_seed(11)).to(DEV) * 2
    st = torch.complex(S0, -S0.flip(-1))
    ins = [t.clone().requires_grad_() for t in (q, k, v, log_a, phase, st)]
    refs = [
        t.detach().clone().to(torch.complex128 if t.is_complex() else torch.float64).requires_grad_()
        for t in (q, k, v, log_a, phase, st)
    ]
    y, S = gateloop_triton(*ins)
    yr, Sr = gateloop_naive(*refs)
    g = torch.Generator().manual_seed(12)
    w = [
        torch.randn(y.shape, generator=g, dtype=torch.float64).to(DEV),
        torch.randn(S.shape, generator=g, dtype=torch.float64).to(DEV),
    ]
    loss = (y.double() * w[0]).sum() + (S.real.double() * w[1]).sum() - (S.imag.double() * w[1]).sum()
    loss_r = (yr * w[0]).sum() + (Sr.real * w[1]).sum() - (Sr.imag * w[1]).sum()
    for name, x1, x2 in zip(
        ("dq", "dk", "dv", "dlog_mag", "dphase", "dstate"),
        torch.autograd.grad(loss, ins),
        torch.autograd.grad(loss_r, refs),
    ):
        _close(name, x1, x2, torch.float32, scale=3.0)


# ------------------------------------------------------------------------------------------------ contract
def test_wrong_input_raises():
    from seqzoo.ops.gateloop.triton import gateloop_triton, gla_triton
    from seqzoo.ops.mlstm.triton import mlstm_triton
    from seqzoo.ops.rglru.triton import linear_scan_triton

    x = torch.zeros(1, 4, 3, device=DEV)
    with pytest.raises(ValueError, match="shape"):
        linear_scan_triton(x, x[:, :2])
    with pytest.raises(TypeError, match="float64"):
        linear_scan_triton(x.double(), x.double())
    q = torch.zeros(1, 4, 1, 16, device=DEV)
    with pytest.raises(ValueError, match="log_a must be <= 0"):
        gla_triton(q, q, q, q + 1)
    with pytest.raises(ValueError, match="phase must have shape"):
        gateloop_triton(q, q, q, -q.abs(), phase=q[:, :2])
    with pytest.raises(ValueError, match="chunk_size"):
        mlstm_triton(q, q, q, q[..., 0], q[..., 0], chunk_size=24)


@pytest.mark.skipif(CUDA, reason="the smoke mode runs the GPU path under the CPU interpreter")
def test_kernel_bench_smoke(tmp_path):
    """The GPU code path of seqzoo.bench.kernels (Triton contenders, roofline columns, files, plot) at one tiny
    shape under the interpreter, and the CPU ratio mode; checks the plumbing, not speed."""
    import json

    from seqzoo.bench.kernels import gla_roofline_ms, run_kernel_bench, scan_roofline_ms

    rows = run_kernel_bench(
        out_dir=tmp_path / "gpu",
        lengths=[16],
        tokens=16,
        heads=1,
        dk=16,
        dv=16,
        dtype="float32",
        smoke=True,
        threads=None,
        ops=("gla", "scan", "rglru"),
    )
    impls = {(r["op"], r["impl"]) for r in rows}
    assert {("scan", "seqzoo triton"), ("rglru", "seqzoo triton fused"), ("gla", "seqzoo triton")} <= impls
    assert all(r.get("fwdbwd_ms") and r["frac_roofline_fwd"] > 0 for r in rows), [r for r in rows if "error" in r]
    for name in ("kernels.csv", "kernels.json", "config.json", "kernels.png"):
        assert (tmp_path / "gpu" / name).stat().st_size > 0
    assert json.loads((tmp_path / "gpu" / "config.json").read_text())["smoke_interpreter"] is True
    cpu = run_kernel_bench(
        device="cpu", out_dir=tmp_path / "cpu", lengths=[16], rounds=1, threads=None, ops=("scan",), plot=False
    )
    assert {r["impl"] for r in cpu if r["op"] == "scan"} == {
        "torch two-level chunked",
        "torch per-token loop (baseline)",
    }
    assert all(r["fwd_speedup_vs_loop"] == 1.0 for r in cpu if "baseline" in r["impl"])
    # the bounds worked by hand (docs/benchmarks.md "Roofline bounds"): 134 µs scan forward at B=8, T=4096, D=2048 (H100); 1.34 ms GLA C=128 memory bound
    assert abs(scan_roofline_ms(8, 4096, 2048) - 0.134) < 0.001
    assert abs(gla_roofline_ms(16, 4096, 16, 128, 256, 128, 128, states_on_chip=False) - 1.34) < 0.01


def test_import_seqzoo_does_not_import_triton():
    code = "import sys, seqzoo, seqzoo.kernels, seqzoo.bench.kernels; assert 'triton' not in sys.modules, 'triton imported'"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
