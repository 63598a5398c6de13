"""The ops on the GPU scoreboard (``scoreboard.py``): each one's inputs, float64 reference and implementations
(seqzoo's kernels, their yardsticks and the peers), as ``scoreboard_measure.Family`` / ``Impl``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .kernels import rglru_bytes, scan_bytes
from .scoreboard_measure import Family, Impl, Shapes


def _randn(gen, *shape, scale: float = 1.0, shift: float = 0.0, dtype=None):
    dev = gen.device
    return (torch.randn(*shape, generator=gen, device=dev) * scale + shift).to(dtype)


def _same(fn: Callable[..., Any]) -> Callable[[list[torch.Tensor]], tuple]:
    """An implementation that takes seqzoo's inputs as they are and returns (output, state): its output."""
    return lambda ins: ((lambda *a: fn(*a)[0]), ins)


def mlstm_family(s: Shapes) -> Family:
    """mLSTM (xLSTM arXiv:2405.04517 §2.3), sigmoid forget and exponential input gates: TFLA's mLSTMexp cell.
    Gate pre-activations as a trained cell's: input ~ N(0, 2²), forget ~ N(2, 1) (mostly remembering)."""
    from ..ops.mlstm import mlstm, mlstm_chunkwise

    def make(B, T, g):
        H, K, V = s.n_heads, s.dk, s.dv
        return [
            _randn(g, B, T, H, K, dtype=s.dtype),
            _randn(g, B, T, H, K, dtype=s.dtype),
            _randn(g, B, T, H, V, dtype=s.dtype),
            _randn(g, B, T, H, scale=2.0, dtype=s.dtype),
            _randn(g, B, T, H, shift=2.0, dtype=s.dtype),
        ]

    return Family(
        "mlstm",
        make,
        lambda *a: mlstm_chunkwise(*a, chunk_size=64)[0],
        impls=[
            Impl("mlstm", _same(lambda *a: mlstm(*a, mode="triton"))),
            Impl("mlstm_kernels", _mlstm_kernels_peer, lambda t: t.transpose(1, 2), gradients_gate=False),
        ],
    )


def _mlstm_kernels_peer(ins):
    from .kernels import _peer_mlstm_kernels

    return _peer_mlstm_kernels(*ins)  # chunk 128, TFLA's; its args are (B, H, T, D): gradients transposed back


def gla_family(s: Shapes, complex_gates: bool) -> Family:
    """GateLoop (Katsch, arXiv:2311.01927, eq. 4 / §3.2): y_t = Re(q_tᵀ S_t), S_t = a_t ⊙ S_{t-1} + k_t v_tᵀ with
    per-key-dim transitions a_t = e^{log|a_t| + iθ_t}; real gates (θ = 0) are chunked gated linear attention.
    log|a| ~ −U(0, 0.1), θ ~ N(0, 0.1²)."""
    from ..ops.gateloop import gateloop, gateloop_chunkwise

    def make(B, T, g):
        H, K, V = s.n_heads, s.dk, s.dv
        ins = [
            _randn(g, B, T, H, K, dtype=s.dtype),
            _randn(g, B, T, H, K, dtype=s.dtype),
            _randn(g, B, T, H, V, dtype=s.dtype),
            (-torch.rand(B, T, H, K, generator=g, device=g.device) * 0.1).to(s.dtype),
        ]
        return ins + [_randn(g, B, T, H, K, scale=0.1, dtype=s.dtype)] if complex_gates else ins

    if complex_gates:
        return Family(
            "gateloop_complex",
            make,
            lambda *a: gateloop_chunkwise(*a, chunk_size=64)[0].real,
            impls=[
                Impl("gateloop_complex", _same(lambda *a: gateloop(*a, mode="triton"))),
            ],
        )
    return Family(
        "gateloop_real",
        make,
        lambda *a: gateloop_chunkwise(*a, chunk_size=64)[0].real,
        impls=[
            Impl("gla_real", _gla_ours),
            Impl("fla_chunk_gla", _fla_peer, gradients_gate=False),
        ],
    )


def _gla_ours(ins):
    from ..ops.gateloop.triton import gla_triton  # the chunked GLA kernel, output in v's dtype as fla's

    return (lambda *a: gla_triton(*a)[0]), ins


def _fla_peer(ins):
    from .kernels import _peer_fla_gla

    return _peer_fla_gla(*ins)


def scan_family(s: Shapes) -> Family:
    """The real diagonal scan of the RG-LRU (Griffin, arXiv:2402.19427 eq. 4): h_t = a_t ⊙ h_{t-1} + b_t,
    a ~ U(0, 1), b ~ N(0, 1); output in the input dtype (so the bytes are 3·N·s forward)."""
    from ..ops.rglru import linear_scan_chunked

    def make(B, T, g):
        a = torch.rand(B, T, s.d_rnn, generator=g, device=g.device).to(s.dtype)
        return [a, _randn(g, B, T, s.d_rnn, dtype=s.dtype)]

    def ours(ins):
        from ..ops.rglru.triton import linear_scan_triton

        return (lambda a, b: linear_scan_triton(a, b, out_dtype=a.dtype)[0]), ins

    size = torch.finfo(s.dtype).bits // 8
    nbytes = lambda B, T, phase: scan_bytes(B, T, s.d_rnn, size, phase == "fwdbwd")  # noqa: E731
    return Family(
        "scan",
        make,
        lambda a, b: linear_scan_chunked(a, b)[0],
        ("fwd", "fwdbwd"),
        [
            Impl("scan", ours, bytes_moved=nbytes),
        ],
    )


def rglru_family(s: Shapes) -> Family:
    """The fused RG-LRU layer (Griffin, arXiv:2402.19427 §2.4): gates, a_t = σ(Λ)^{c r_t}, the √(1 − a_t²)
    normalised input and the scan in one pass. x and gate pre-activations ~ N(0, 1), Λ ~ N(0, 1)."""
    from ..ops.rglru import rglru

    def make(B, T, g):
        return [_randn(g, B, T, s.d_rnn, dtype=s.dtype) for _ in range(3)] + [_randn(g, s.d_rnn, dtype=s.dtype)]

    size = torch.finfo(s.dtype).bits // 8
    nbytes = lambda B, T, phase: rglru_bytes(B, T, s.d_rnn, size, phase == "fwdbwd")  # noqa: E731
    return Family(
        "rglru_fused",
        make,
        lambda *a: rglru(*a, mode="scan")[0],
        ("fwd", "fwdbwd"),
        [
            Impl("rglru_fused", _same(lambda *a: rglru(*a, mode="triton")), bytes_moved=nbytes),
        ],
    )


def slstm_family(s: Shapes) -> Family:
    """The sLSTM cell (xLSTM arXiv:2405.04517 §2.2, eqs. 8-17), stabilised exponential gating, recurrent R per head.
    wx ~ N(0, 1), R ~ N(0, 1/d)."""
    from ..ops.slstm import slstm

    def make(B, T, g):
        H, d = s.slstm_heads, s.slstm_head_dim
        return [_randn(g, B, T, H, 4, d, dtype=s.dtype), _randn(g, H, d, 4, d, scale=d**-0.5, dtype=s.dtype)]

    return Family(
        "slstm",
        make,
        lambda *a: slstm(*a, mode="fused")[0],
        impls=[
            Impl("slstm_triton", _same(lambda *a: slstm(*a, mode="triton"))),
            Impl("slstm_loop", _same(lambda *a: slstm(*a, mode="fused"))),
            Impl("slstm_official", lambda ins: official_slstm_cell(ins, "cuda"), gradients_gate=False),
        ],
    )


_OFFICIAL_CELLS: dict[tuple, Any] = {}


def official_slstm_cell(ins, backend: str):
    """NX-AI xlstm's ``sLSTMCell`` with ``backend="cuda"`` (its CUDA kernels, compiled at first use for each batch
    size, which they take as a compile-time constant; ``"vanilla"``, its PyTorch loop, tests the mapping on a CPU). Its recurrent kernel takes seqzoo's R as it is (the same
    (H, d, 4, d) layout, ``seqzoo/parity/xlstm.py``) and a zero bias (seqzoo's wx holds the bias); its input is
    gate-major (B, T, 4·H·d), its output (B, H, T, d), transposed back. Only its output is checked (its R is a
    parameter of the module, so its gradient is not compared)."""
    from xlstm.blocks.slstm.cell import sLSTMCell, sLSTMCellConfig

    wx, R = ins
    if backend == "cuda" and wx.device.type != "cuda":  # not even a compile is tried (it needs nvcc and a GPU)
        raise RuntimeError(f"the CUDA backend runs on CUDA tensors, got {wx.device.type} tensors")
    B, T, H, _, d = wx.shape
    key = (backend, B, H, d, wx.dtype, wx.device)
    if key not in _OFFICIAL_CELLS:
        dtype = str(wx.dtype).replace("torch.", "")
        cfg = sLSTMCellConfig(hidden_size=H * d, num_heads=H, backend=backend, batch_size=B, dtype=dtype)
        _OFFICIAL_CELLS[key] = sLSTMCell(cfg).to(wx.device).train()
    cell = _OFFICIAL_CELLS[key]
    with torch.no_grad():
        cell.recurrent_kernel[...] = R.to(cell.recurrent_kernel.dtype)
        cell.bias[...] = 0.0

    def run(wx_):  # the gate-major copy of wx is inside the timed call: 2·B·T·4·H·d bytes, next to T sequential steps
        return cell(wx_.permute(0, 1, 3, 2, 4).reshape(B, T, 4 * H * d))[0].transpose(1, 2)

    return run, [wx]
