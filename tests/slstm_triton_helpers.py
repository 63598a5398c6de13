"""Inputs and the float64 check shared by the Triton sLSTM tests (tests/ops/test_slstm_triton*.py)."""

import torch
from helpers import DEV, check_against_reference

from seqzoo.ops.slstm import slstm, slstm_naive

f32 = torch.float32


def inputs(B, T, H, d, with_state, seed=0):
    g = torch.Generator().manual_seed(seed)
    wx = torch.randn(B, T, H, 4, d, generator=g, dtype=torch.float64)
    R = 0.3 * torch.randn(H, d, 4, d, generator=g, dtype=torch.float64)
    state = None
    if with_state:
        h, c, n, m = (torch.randn(B, H * d, generator=g, dtype=torch.float64) for _ in range(4))
        state = (h, c, n.abs() + 1, m)  # the normaliser n >= 1, as a previous call leaves it
    return wx, R, state


def segments(B, T, seed=0):
    """``segment_pos (B, T)``: row 0 continues the carried state then starts documents inside the call, row 1
    starts at 0, later rows random; every row has at least one start after t = 0."""
    g = torch.Generator().manual_seed(seed)
    pos = torch.empty(B, T, dtype=torch.int64)
    for b in range(B):
        starts = torch.rand(T, generator=g) < 0.3
        starts[0] = b == 1
        starts[T // 2] = True
        p = 0 if starts[0] else 5  # a row that does not start at 0 continues a document begun earlier
        for t in range(T):
            p = 0 if starts[t] else p + 1
            pos[b, t] = p
    return pos


def check_against_naive(B, T, H, d, with_state, packed):
    wx, R, state = inputs(B, T, H, d, with_state)
    seg = segments(B, T) if packed else None

    def cell(fn):
        def run(wx, R, h0, c0, n0, m0, seg):
            h, st = fn(wx, R, None if h0 is None else (h0, c0, n0, m0), segment_pos=seg)
            assert h.shape == (B, T, H, d) and all(s.shape == (B, H * d) for s in st)
            return (h, *st)

        return run

    check_against_reference(
        cell(lambda *a, **k: slstm(*a, mode="triton", **k)),
        cell(slstm_naive),
        [x.to(DEV, f32) for x in (wx, R)]
        + [None if state is None else x.to(DEV, f32) for x in state or [None] * 4]
        + [seg],
        dtype=f32,
        out_names=["h", "h_T", "c_T", "n_T", "m_T"],
        in_names=["wx", "R", "h0", "c0", "n0", "m0", "segment_pos"],
    )
