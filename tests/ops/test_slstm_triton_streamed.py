"""The wide-head Triton sLSTM (seqzoo/ops/slstm/triton_streamed.py: R streamed from memory, d > 64) against the
naive loop, under Triton's CPU interpreter.

``mode="triton"`` takes this path for head dims over ``MAX_HEAD_DIM`` (64). Small shapes (the interpreter runs
every program in Python): outputs, final (h, c, n, m) and the gradients of wx, R and the initial state in float32
against ``slstm_naive`` in float64, at a head dim one past the on-chip limit (a partial R tile), 96 and 128, one
and two batch tiles, with and without packed-document resets; and that a launch re-run on the same buffers (as the
autotuner's timing runs do) gives the same result. Split calls, 16-bit inputs and the sLSTM layer with
``cell_mode="triton"`` at a wide head are parametrized in ``test_slstm_triton.py``.
"""

import pytest
import torch
from helpers import DEV, needs_triton
from slstm_triton_helpers import check_against_naive, inputs, segments

f32 = torch.float32


@needs_triton
@pytest.mark.parametrize(
    "B, T, H, d, with_state, packed",
    [
        pytest.param(2, 4, 1, 65, True, False, id="B2-d65-partial-tile-state"),
        pytest.param(17, 5, 2, 96, False, False, id="B17-two-tiles-H2-d96-fresh"),
        pytest.param(3, 6, 1, 96, True, True, id="B3-d96-state-packed"),
        pytest.param(18, 4, 1, 128, False, True, id="B18-two-tiles-d128-packed"),
        pytest.param(2, 8, 1, 128, True, False, id="B2-T8-d128-state"),
    ],
)
def test_streamed_matches_naive(B, T, H, d, with_state, packed):
    check_against_naive(B, T, H, d, with_state, packed)


@needs_triton
def test_streamed_launch_rerun_on_the_same_buffers_gives_the_same_result():
    """Both kernels copy their entering state into their scratch first: a second launch into the same output,
    state and gradient buffers (the autotuner times each config by re-running it) reproduces the first."""
    from seqzoo.ops.slstm import triton as k

    B, T, H, d = 3, 4, 1, 72
    wx, R, state = inputs(B, T, H, d, with_state=True)
    wx, R = wx.to(DEV, f32), R.to(DEV, f32)
    init = torch.stack([s.to(DEV, f32) for s in state])
    seg = segments(B, T).to(DEV)
    out = torch.empty(B, T, H, d, device=DEV)
    final = torch.empty(4, B, H * d, device=DEV)
    G = torch.empty(B, T, H, 4, d, device=DEV)
    S = torch.empty(4, T + 1, B, H * d, device=DEV)
    S[:, 0] = init
    runs = []
    for _ in range(2):
        k._launch_forward(wx, R, init, seg, out, final, G, S, save=True)
        runs.append([out.clone(), final.clone()])
    dout = torch.randn(B, T, H, d, device=DEV)
    dfinal = torch.randn(4, B, H * d, device=DEV)
    dG, dinit = torch.empty_like(G), torch.empty_like(final)
    for run in runs:
        k._launch_backward(R, G, S, seg, dout, dfinal, dG, dinit)
        run += [dG.clone(), dinit.clone()]
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_streamed_kernels_compile_for_sm90_with_a_kept_config_without_spills(tmp_path):
    """d = 192 (every preset head over 64 compiles to the same kernels) at float32, compiled ahead of time for sm_90:
    the forward (saving and not) and the backward, with and without resets, each keep an autotune config that does
    not spill, and no pointer offset can wrap in 32 bits."""
    from seqzoo.bench import aot

    rows = aot.check(["sm_90"], ["float32"], ["train", "state"], sizes={"slstm": [192]}, cache_dir=str(tmp_path))
    assert rows and all(r["status"] == "ok" and r["i32_offsets"] == 0 for r in rows)
    launches = {(r["kernel"], r["constexprs"]) for r in rows}
    assert {k for k, _ in launches} == {"_slstm_fwd_streamed_kernel", "_slstm_bwd_streamed_kernel"}
    assert len(launches) == 6
    for launch in launches:
        kept = [r for r in rows if (r["kernel"], r["constexprs"]) == launch and r["kept"]]
        assert kept and all(r["spill_bytes"] == 0 for r in kept), launch
