"""Each op's ``choose_implementation`` (``ops/<op>/__init__.py``), the one place that decides how the op runs: what
it picks on CPU and why, refusing an explicit Triton mode it cannot run, the interpreter, and the user's choice
(an explicit mode, the kernels switch, the mixers' ``follow_switch``).

These check the decision only; the implementations themselves are compared with their references in tests/ops/."""

import importlib.util

import pytest
import torch

from seqzoo.errors import InputError
from seqzoo.kernels import Choice, use_kernels
from seqzoo.ops import causal_conv, fftconv, gateloop, mlstm, rglru, slstm

HAS_TRITON = importlib.util.find_spec("triton") is not None
needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="needs triton (for its CPU interpreter)")


@pytest.fixture(autouse=True)
def _fresh(kernels_reset):
    """A fresh kernels switch for each test (tests/conftest.py)."""


def _mlstm(T=8, dtype=torch.float32, mode="auto", **kw):
    q = torch.zeros(1, T, 2, 4, dtype=dtype)
    return mlstm.choose_implementation(q, q, q, mode, **kw)


def _gateloop(T=8, K=4, dtype=torch.float32, mode="auto", **kw):
    q = torch.zeros(1, T, 2, K, dtype=dtype)
    return gateloop.choose_implementation(q, q, q, q, q, mode, **kw)


def _rglru(T=8, dtype=torch.float32, mode="auto", **kw):
    x = torch.zeros(1, T, 6, dtype=dtype)
    return rglru.choose_implementation("rglru", mode, x, x, x, **kw)


def _conv(T=8, dtype=torch.float32, mode="auto"):
    return causal_conv.choose_implementation(mode, torch.zeros(1, T, 6, dtype=dtype), torch.zeros(6, 4, dtype=dtype))


def _slstm(mode="auto", device="cpu"):
    return slstm.choose_implementation(mode, torch.zeros(1, 8, 2, 4, 3, device=device))


# ------------------------------------------------------------------------ CPU float32: PyTorch or C, with reason
@pytest.mark.parametrize(
    ("choose", "torch_path"), [(_mlstm, "chunkwise"), (_gateloop, "chunkwise"), (_rglru, "scan")], ids=str
)
def test_auto_on_cpu_runs_the_torch_path_and_says_why(choose, torch_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    choice = choose()
    assert choice.name == torch_path
    assert "CUDA tensors only, got cpu tensors" in choice.reason


def test_auto_at_one_token_or_one_wide_head_takes_the_step_or_the_scan():
    assert _mlstm(T=1) == Choice("recurrent")
    assert _gateloop(T=1) == Choice("naive")
    assert _gateloop_scalar() == Choice("blelloch")
    assert _rglru(T=1) == Choice("naive")


def _gateloop_scalar():
    q = torch.zeros(1, 8, 2, 1)
    return gateloop.choose_implementation(q, q, q, q, q, "auto")


def test_causal_conv_auto_on_cpu_takes_the_c_loops_where_they_build(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    choice = _conv()
    if causal_conv.native_unfit(torch.zeros(1, 1, 1)) is None:
        assert choice.name == "native" and "CUDA tensors only" in choice.reason
    else:
        assert choice.name == "torch" and "C library is unavailable" in choice.reason
    monkeypatch.setattr(causal_conv, "native_unfit", lambda *t: "the C library is unavailable: no compiler")
    assert _conv() == Choice("torch", "the C library is unavailable: no compiler")
    assert _conv(dtype=torch.float64).name == "torch"  # float64 takes no kernel, and the C loops are off


def test_slstm_auto_takes_the_c_loops_on_cpu_where_they_build(monkeypatch):
    from seqzoo.ops.slstm import native

    monkeypatch.setattr(native, "unavailable", lambda: None)
    assert _slstm() == Choice("native")
    monkeypatch.setattr(native, "unavailable", lambda: "turned off by SEQZOO_NATIVE=0")
    assert _slstm() == Choice("fused", "the C loops are unavailable: turned off by SEQZOO_NATIVE=0")
    assert _slstm(device="meta") == Choice("fused", "the C loops run on CPU tensors, got meta tensors")
    with pytest.raises(InputError, match="slstm: mode='native' runs on CPU tensors"):
        _slstm("native", device="meta")
    with pytest.raises(RuntimeError, match="needs its C loops built: turned off"):
        _slstm("native")


def test_fftconv_auto_is_the_fft():
    assert fftconv.choose_implementation("auto") == Choice("fft")
    assert fftconv.choose_implementation("direct") == Choice("direct")
    with pytest.raises(InputError, match="mode must be one of"):
        fftconv.choose_implementation("triton")


# ------------------------------------------------------------------ an explicit Triton mode it cannot run
TRITON_CALLS = [
    ("mlstm", lambda: _mlstm(mode="triton")),
    ("gateloop", lambda: _gateloop(mode="triton")),
    ("rglru", lambda: _rglru(mode="triton")),
    ("linear_scan", lambda: rglru.choose_implementation("linear_scan", "triton", torch.zeros(1, 4, 3))),
    ("causal_conv1d", lambda: _conv(mode="triton")),
]


@pytest.mark.parametrize(("op", "call"), TRITON_CALLS, ids=[c[0] for c in TRITON_CALLS])
def test_explicit_triton_without_cuda_or_interpreter_is_an_input_error(op, call, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(InputError, match=rf"^{op}: (the kernels run on CUDA tensors|triton is not installed)"):
        call()


@needs_triton
@pytest.mark.parametrize(("op", "call"), TRITON_CALLS, ids=[c[0] for c in TRITON_CALLS])
def test_explicit_triton_under_the_interpreter_runs_on_cpu(op, call, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert call() == Choice("triton")


@needs_triton
def test_explicit_triton_refuses_what_the_kernel_cannot_take(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(InputError, match="mlstm: chunk_size must be a power of two >= 16"):
        _mlstm(mode="triton", chunk_size=24)
    with pytest.raises(InputError, match="gateloop: chunk_size must be a power of two >= 16"):
        _gateloop(mode="triton", chunk_size=8)
    with pytest.raises(InputError, match="causal_conv1d: the kernel takes float32/float16/bfloat16"):
        _conv(mode="triton", dtype=torch.float64)


@needs_triton
def test_auto_never_picks_the_interpreter_unless_the_switch_says_triton(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert _mlstm().name == "chunkwise"
    with use_kernels("triton"):
        assert _mlstm() == Choice("triton")
        assert _gateloop() == Choice("triton")
        assert _rglru() == Choice("triton")
        assert _conv() == Choice("triton")
        with pytest.raises(InputError, match="mlstm Triton kernel cannot run: .*float64"):
            _mlstm(dtype=torch.float64)


# --------------------------------------------------------------------------------------------- the user's choice
@pytest.mark.parametrize(
    ("choose", "modes"),
    [
        (_mlstm, ("recurrent", "parallel", "chunkwise", "naive")),
        (_gateloop, ("naive", "blelloch", "attention", "chunkwise")),
        (_rglru, ("naive", "scan")),
        (_conv, ("native", "torch", "naive")),
    ],
    ids=["mlstm", "gateloop", "rglru", "causal_conv1d"],
)
def test_an_explicit_mode_is_never_overridden(choose, modes, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with use_kernels("triton"):
        for mode in modes:
            assert choose(mode=mode) == Choice(mode)


@pytest.mark.parametrize(("choose", "mode"), [(_mlstm, "chunkwise"), (_gateloop, "chunkwise"), (_rglru, "scan")])
def test_follow_switch_lets_the_kernels_switch_decide(choose, mode, monkeypatch):
    """The mixers' modes (``follow_switch=True``): the torch path under ``torch``, with the switch as the reason; the
    kernel under ``triton`` (the interpreter on CPU), at one token too."""
    torch_setting = "the kernels setting is 'torch' (SEQZOO_KERNELS / set_kernels)"
    with use_kernels("torch"):
        assert choose(mode=mode, follow_switch=True) == Choice(mode, torch_setting)
    if HAS_TRITON:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        with use_kernels("triton"):
            assert choose(mode=mode, follow_switch=True) == Choice("triton")
            assert choose(T=1, mode=mode, follow_switch=True) == Choice("triton")


@pytest.mark.parametrize("choose", [_mlstm, _gateloop, _rglru, _conv])
def test_an_unknown_mode_is_an_input_error(choose):
    with pytest.raises(InputError, match="mode must be one of"):
        choose(mode="fastest")


def test_gateloop_softmax_takes_the_blocked_form_for_long_cpu_prefill_only():
    from seqzoo.ops.gateloop.softmax_cached import BLOCKED_FROM, GateLoopSoftmaxCache
    from seqzoo.ops.gateloop.softmax_cached import choose_implementation as choose

    long, short = torch.zeros(1, BLOCKED_FROM + 1, 2, 4), torch.zeros(1, BLOCKED_FROM, 2, 4)
    assert choose(long, None) == Choice("blocked")
    assert choose(short, None).name == "scores" and f"up to {BLOCKED_FROM} tokens" in choose(short, None).reason
    cache = GateLoopSoftmaxCache(*(torch.zeros(1, 3, 2, 4) for _ in range(4)))
    assert choose(long, cache).name == "scores" and "no cache" in choose(long, cache).reason
    assert choose(long.to("meta"), None) == Choice("scores", "the blocked form is the CPU path, got meta tensors")
