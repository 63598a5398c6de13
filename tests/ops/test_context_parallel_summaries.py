"""The block summaries context parallelism gathers (``ops/<op>/summary.py``) against the ops themselves, in one
process: combining a given initial state with a block's summary gives the final state that every mode of the op
reaches from that state over the block (values and gradients, float64), with packed documents (a start inside the
block, one at its first token) and without. The summaries keep their precision under autocast."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_close

from seqzoo.ops.context_parallel import linear_combine
from seqzoo.ops.gateloop import gateloop
from seqzoo.ops.gateloop.summary import gateloop_summary
from seqzoo.ops.mlstm import mlstm
from seqzoo.ops.mlstm.summary import mlstm_combine, mlstm_summary
from seqzoo.ops.rglru import rglru
from seqzoo.ops.rglru.summary import rglru_summary

B, T, H, K, V = 2, 11, 2, 3, 4


def _rand(g, *shape, dtype=torch.float64):
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def _segment_pos(packed: bool):
    """Row 0 continues the carried document to token 3, then one starts at 4; row 1 starts one at its first token."""
    if not packed:
        return None
    pos = torch.arange(T).repeat(B, 1) + 2
    pos[0, 4:] = torch.arange(T - 4)
    pos[1] = torch.arange(T)
    return pos


def _same(a: tuple, b: tuple, leaves: list, weights_seed: int = 9) -> None:
    """Equal values, and equal gradients of a random weighting of them w.r.t. every leaf."""
    g = torch.Generator().manual_seed(weights_seed)
    ws = [_rand(g, *torch.view_as_real(t).shape) if t.is_complex() else _rand(g, *t.shape) for t in b]

    def loss(ts):
        return sum(((torch.view_as_real(t) if t.is_complex() else t) * w).sum() for t, w in zip(ts, ws))

    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        assert_close(x, y, name=f"state[{i}]")
    ga = torch.autograd.grad(loss(a), leaves, allow_unused=True, retain_graph=True)  # a is reused across modes
    gb = torch.autograd.grad(loss(b), leaves, allow_unused=True)
    for i, (x, y) in enumerate(zip(ga, gb)):
        if y is None:
            assert x is None or not x.any(), f"leaf {i}: a gradient only through the summary"
        else:
            assert_close(x, y, name=f"d leaf {i}")


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("real", [False, True])
def test_gateloop_summary_gives_every_mode_final_state(real, packed):
    g = torch.Generator().manual_seed(0)
    q, k = _rand(g, B, T, H, K), _rand(g, B, T, H, K)
    v = _rand(g, B, T, H, V)
    log_mag = -F.softplus(_rand(g, B, T, H, K))
    phase = None if real else _rand(g, B, T, H, K)
    S0 = torch.complex(_rand(g, B, H, K, V), _rand(g, B, H, K, V))
    leaves = [t.requires_grad_() for t in (k, v, log_mag, S0) + (() if real else (phase,))]
    seg = _segment_pos(packed)
    (combined,) = linear_combine((S0,), gateloop_summary(k, v, log_mag, phase, seg))
    for mode in ("naive", "blelloch", "chunkwise", "attention"):
        _, S = gateloop(q, k, v, log_mag, phase, S0, mode=mode, chunk_size=4, segment_pos=seg)
        _same((combined,), (S,), leaves)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("m0_shift", [-8.0, 1.0])  # an entering stabiliser below and above the block's exponents
def test_mlstm_summary_gives_every_mode_final_state(m0_shift, packed):
    g = torch.Generator().manual_seed(1)
    q, k = _rand(g, B, T, H, K), _rand(g, B, T, H, K)
    v = _rand(g, B, T, H, V)
    i, f = _rand(g, B, T, H) - 3.0, _rand(g, B, T, H) + 2.0
    state = (_rand(g, B, H, K, V), _rand(g, B, H, K), _rand(g, B, H) + m0_shift)
    leaves = [t.requires_grad_() for t in (k, v, i, f, *state)]
    reset = None if not packed else _segment_pos(True) == 0
    combined = mlstm_combine(state, mlstm_summary(k, v, i, f, "sigmoid", reset))
    for mode in ("naive", "recurrent", "parallel", "chunkwise"):
        _, final = mlstm(q, k, v, i, f, state, mode=mode, chunk_size=4, reset=reset)
        _same(combined[:2], final[:2], leaves)  # C, n; m is piecewise constant: compared by value
        assert_close(combined[2], final[2], name="m")


@pytest.mark.parametrize("packed", [False, True])
def test_rglru_summary_gives_every_mode_final_state(packed):
    g = torch.Generator().manual_seed(2)
    x, gx, ga = _rand(g, B, T, V), _rand(g, B, T, V), _rand(g, B, T, V)
    a_param, h0 = _rand(g, V), _rand(g, B, V)
    leaves = [t.requires_grad_() for t in (x, gx, ga, a_param, h0)]
    reset = None if not packed else _segment_pos(True) == 0
    for mode in ("naive", "scan"):
        (combined,) = linear_combine((h0,), rglru_summary(x, gx, ga, a_param, reset, mode=mode))
        _, h = rglru(x, gx, ga, a_param, reset, h0, mode=mode)
        _same((combined,), (h,), leaves)


def test_summaries_keep_their_precision_under_autocast():
    g = torch.Generator().manual_seed(3)
    k, v = _rand(g, B, T, H, K, dtype=torch.float32), _rand(g, B, T, H, V, dtype=torch.float32)
    log_mag, phase = -F.softplus(_rand(g, B, T, H, K, dtype=torch.float32)), _rand(g, B, T, H, K, dtype=torch.float32)
    i, f = _rand(g, B, T, H, dtype=torch.float32), _rand(g, B, T, H, dtype=torch.float32)
    plain = (gateloop_summary(k, v, log_mag, phase), mlstm_summary(k, v, i, f))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cast = (gateloop_summary(k, v, log_mag, phase), mlstm_summary(k, v, i, f))
    for a, b in zip(sum(plain, ()), sum(cast, ())):
        assert b.dtype == a.dtype and b.dtype in (torch.float32, torch.complex64)
        assert torch.equal(a, b)
