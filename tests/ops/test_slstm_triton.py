"""The Triton sLSTM (seqzoo/ops/slstm/triton.py) against the naive loop, under Triton's CPU interpreter.

Tiny shapes (the interpreter runs every program in Python): outputs, final (h, c, n, m) and the gradients of wx, R
and the initial state of ``mode="triton"`` in float32 against ``slstm_naive`` in float64 on the same inputs, with
and without an initial state, batch > 1 and over one batch tile, several heads, a head width that is not a power of
two, and packed documents (``segment_pos`` resets); the wide-head (streamed) path where a test names it
(``test_slstm_triton_streamed.py`` has its own checks); the refusals (no way to run Triton, bad dtypes);
the ahead-of-time compile rows of ``seqzoo kernels check``.
"""

import pytest
import torch
from helpers import DEV, assert_close, needs_triton
from slstm_triton_helpers import check_against_naive, inputs, segments

from seqzoo.errors import InputError
from seqzoo.ops.slstm import choose_implementation, slstm, slstm_naive

f32 = torch.float32


@needs_triton
@pytest.mark.parametrize("with_state", [False, True], ids=["fresh", "state"])
@pytest.mark.parametrize(
    "B, T, H, d",
    [
        pytest.param(1, 9, 1, 4, id="B1-H1-d4"),
        pytest.param(3, 13, 2, 5, id="B3-H2-d5"),
        pytest.param(18, 6, 3, 16, id="B18-two-tiles-H3-d16"),
    ],
)
def test_triton_matches_naive(B, T, H, d, with_state):
    check_against_naive(B, T, H, d, with_state, packed=False)


@needs_triton
@pytest.mark.parametrize("with_state", [False, True], ids=["fresh", "state"])
def test_triton_resets_at_document_starts(with_state):
    check_against_naive(4, 14, 2, 5, with_state, packed=True)


@needs_triton
@pytest.mark.parametrize("T, H, d, split", [(12, 2, 4, 5), (6, 1, 80, 2)], ids=["d4-on-chip", "d80-streamed"])
def test_triton_split_with_state_equals_whole(T, H, d, split):
    """Two calls, the second from the first's final state, give the one call's outputs and final state."""
    wx, R, _ = inputs(2, T, H, d, with_state=False)
    wx, R = wx.to(DEV, f32), R.to(DEV, f32)
    y, s = slstm(wx, R, mode="triton")
    y1, s1 = slstm(wx[:, :split], R, mode="triton")
    y2, s2 = slstm(wx[:, split:], R, s1, mode="triton")
    assert_close(torch.cat([y1, y2], 1), y, atol=1e-6)
    for a, b in zip(s2, s):
        assert_close(a, b, atol=1e-6)


@needs_triton
def test_triton_gradient_of_R_alone_and_the_no_grad_forward():
    """Only R requires grad (the backward still runs the whole chain); under no_grad the forward that saves
    nothing gives the same outputs as the one that saves for the backward."""
    wx, R, _ = inputs(2, 6, 2, 4, with_state=False)
    seg = segments(2, 6)
    Rk = R.to(DEV, f32).requires_grad_()
    Rr = R.float().double().requires_grad_()
    y, st = slstm(wx.to(DEV, f32), Rk, mode="triton", segment_pos=seg)
    yr, str_ = slstm_naive(wx.float().double(), Rr, segment_pos=seg)
    (dR,) = torch.autograd.grad(y.double().sum() + st[1].double().sum(), Rk)
    (dRr,) = torch.autograd.grad(yr.sum() + str_[1].sum(), Rr)
    assert_close(dR, dRr, dtype=f32, scale=3.0, name="dR")
    with torch.no_grad():
        y0, st0 = slstm(wx.to(DEV, f32), Rk, mode="triton", segment_pos=seg)
    assert torch.equal(y0, y.detach()) and all(torch.equal(a, b.detach()) for a, b in zip(st0, st))


@needs_triton
def test_triton_refuses_bad_inputs():
    wx, R, _ = inputs(1, 3, 1, 4, with_state=False)
    with pytest.raises(InputError, match="float64"):
        slstm(wx.to(DEV), R.to(DEV), mode="triton")
    with pytest.raises(InputError, match="T >= 1"):
        slstm(wx[:, :0].to(DEV, f32), R.to(DEV, f32), mode="triton")


def test_triton_mode_refused_where_triton_cannot_run(monkeypatch):
    """No CUDA and no interpreter (or no triton): an InputError naming the op, before any work."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    wx = torch.zeros(1, 2, 1, 4, 4)
    with pytest.raises(InputError, match="slstm: "):
        choose_implementation("triton", wx)
    with pytest.raises(InputError, match="slstm: "):
        slstm(wx, torch.zeros(1, 4, 4, 4), mode="triton")


def test_auto_never_chooses_triton():
    """Without a backward the kernel is explicit-only: ``auto`` keeps the PyTorch / C loops."""
    assert choose_implementation("auto", torch.zeros(1, 2, 1, 4, 4)).name in ("native", "fused")


def test_aot_check_covers_the_kernel_at_every_head_dim():
    """``seqzoo kernels check`` captures the on-chip kernels once per power-of-two tile and 16-divisibility up to 64,
    the streamed kernels once for all wider heads (their R tiles do not depend on d), and lists no width as not
    launched."""
    from seqzoo.bench import aot

    scs = aot.scenarios({"slstm": [16, 40, 64, 192, 512]}, ["bfloat16"], ["state"])
    assert [(s["d"], s["segments"]) for s in scs if s["op"] == "slstm"] == [
        (d, packed) for d in (16, 40, 64, 192) for packed in (False, True)
    ]
    assert aot.not_launched({"slstm": [64, 192, 512]}) == []
    assert [d for d in aot.preset_sizes()["slstm"] if d > aot.SLSTM_MAX_HEAD_DIM]  # the presets do use wide heads


@needs_triton
def test_kernel_is_autotuned_with_the_resource_prune_hook():
    import triton

    from seqzoo.bench.aot import SLSTM_MAX_HEAD_DIM
    from seqzoo.kernels import prune
    from seqzoo.ops.slstm import triton as k

    for kernel in (
        k._slstm_fwd_kernel,
        k._slstm_bwd_kernel,
        k.triton_streamed._slstm_fwd_streamed_kernel,
        k.triton_streamed._slstm_bwd_streamed_kernel,
    ):
        assert isinstance(kernel, triton.runtime.Autotuner)
        assert isinstance(kernel.early_config_prune, prune.ResourcePrune)
    assert k.MAX_HEAD_DIM == SLSTM_MAX_HEAD_DIM


@pytest.mark.slow
def test_widest_head_compiles_for_sm90_with_a_kept_config_without_spills(tmp_path):
    """d = 64 at float32 (R: 64 KiB on chip) compiled ahead of time for sm_90, the forward (with and without saving
    for the backward) and the backward: each launch has an autotune config that keeps R without spilling (the prune
    hook drops the others), and no pointer offset can wrap in 32 bits."""
    from seqzoo.bench import aot

    rows = aot.check(["sm_90"], ["float32"], ["train", "state"], sizes={"slstm": [64]}, cache_dir=str(tmp_path))
    assert rows and all(r["status"] == "ok" and r["i32_offsets"] == 0 for r in rows)
    launches = {(r["kernel"], r["constexprs"]) for r in rows}
    # forward saving / not saving and backward, each with and without segment_pos resets
    assert {k for k, _ in launches} == {"_slstm_fwd_kernel", "_slstm_bwd_kernel"} and len(launches) == 6
    for launch in launches:
        kept = [r for r in rows if (r["kernel"], r["constexprs"]) == launch and r["kept"]]
        assert kept and all(r["spill_bytes"] == 0 for r in kept), launch


@needs_triton
@pytest.mark.parametrize(
    "d_model, n_heads, r_std", [(8, 2, 0.3), (96, 1, 0.1)], ids=["head4-on-chip", "head96-streamed"]
)
def test_slstm_layer_with_the_triton_cell_matches_the_naive_cell(d_model, n_heads, r_std):
    """The sLSTM layer (mixer "slstm", float32) with ``cell_mode="triton"``: output, final state and every
    parameter gradient as with ``cell_mode="naive"``, on packed rows, at a head on chip and one streamed."""
    from seqzoo import build_mixer

    def layer(cell_mode):
        torch.manual_seed(0)
        m = build_mixer("slstm", d_model=d_model, n_heads=n_heads, conv_size=4, cell_mode=cell_mode).to(DEV)
        with torch.no_grad():
            m.R.normal_(0, r_std)  # R = 0 at init would hide a wrong recurrent gradient
            m.bias.normal_(0, 1.0)
        return m

    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 10, d_model, generator=g).to(DEV)
    w = torch.randn(2, 10, d_model, generator=g).to(DEV)
    pos = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4, 0, 1], [3, 4, 5, 6, 0, 1, 2, 3, 4, 5]])
    got, want = [], []
    for mode, out in (("triton", got), ("naive", want)):
        m = layer(mode)
        assert m.head_dim == d_model // n_heads
        y, s = m(x, segment_pos=pos)
        loss = (y * w).sum() + sum(t.square().sum() for t in (s.h, s.c, s.n))
        out.extend([y, s.h, s.c, s.n, *torch.autograd.grad(loss, list(m.parameters()))])
    for a, b in zip(got, want, strict=True):
        assert_close(a, b, dtype=f32, scale=3.0)


@needs_triton
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("B, T, H, d", [(3, 7, 2, 5), (2, 4, 1, 96)], ids=["d5-on-chip", "d96-streamed"])
def test_triton_16bit_inputs_match_naive_on_the_same_rounded_inputs(dtype, B, T, H, d):
    """16-bit wx and R: fp32 arithmetic inside, h written in the input dtype, final state fp32."""
    wx, R, state = inputs(B, T, H, d, with_state=True)
    wx16, R16 = wx.to(dtype), R.to(dtype)
    y, st = slstm(wx16.to(DEV), R16.to(DEV), tuple(s.float().to(DEV) for s in state), mode="triton")
    yr, sr = slstm_naive(wx16.double(), R16.double(), tuple(s.float().double() for s in state))
    assert y.dtype == dtype and all(s.dtype == f32 for s in st)
    assert_close(y, yr, dtype=dtype, name="h")
    for name, a, b in zip(("h_T", "c_T", "n_T", "m_T"), st, sr):
        assert_close(a, b, dtype=f32, name=name)
