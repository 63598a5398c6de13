"""Context parallelism's communication (seqzoo/ops/context_parallel.py) on 2 and 4 gloo ranks: a sequence split along
time gives the outputs and every gradient of one process, in float64, for a diagonal linear recurrence (summaries
gathered and combined as a prefix), a causal convolution (halo from the previous rank) and causal attention (keys
and values gathered)."""

import pytest
import torch
import torch.nn.functional as F
from cp_harness import run_ranks

from seqzoo.errors import InputError
from seqzoo.ops.context_parallel import gather_ranks, incoming_state, linear_combine, previous_tail

B, T, C, K = 2, 16, 3, 4


def _inputs():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(B, T, C, generator=g, dtype=torch.float64) * 0.9 + 0.05
    b = torch.randn(B, T, C, generator=g, dtype=torch.float64)
    h0 = torch.randn(B, C, generator=g, dtype=torch.float64)
    w = torch.randn(B, T, C, generator=g, dtype=torch.float64)  # a loss weight per output
    conv = torch.randn(C, K, generator=g, dtype=torch.float64)
    return a, b, h0, w, conv


def _scan(a, b, h):
    out = []
    for t in range(a.shape[1]):
        h = a[:, t] * h + b[:, t]
        out.append(h)
    return torch.stack(out, 1), h


def _causal_conv(x, weight, halo):
    """y_t = sum_j weight[:, j] * x_{t-K+1+j}, with ``halo`` the K-1 inputs before x."""
    xp = torch.cat([halo, x], 1).transpose(1, 2)
    return F.conv1d(xp, weight[:, None], groups=x.shape[-1]).transpose(1, 2)


def _attend(q, k, v, offset):
    """Causal attention of local queries at global positions offset.. over keys 0..offset+len-1."""
    tq, tk = q.shape[1], k.shape[1]
    mask = torch.arange(tk)[None] <= (offset + torch.arange(tq))[:, None]
    return F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], attn_mask=mask)[:, 0]


def _whole():
    a, b, h0, w, conv = (t.requires_grad_() for t in _inputs())
    h, _ = _scan(a, b, h0)
    y = _causal_conv(b, conv, torch.zeros(B, K - 1, C, dtype=torch.float64))
    att = _attend(b, a, b, 0)
    loss = (h * w).sum() + (y * w).sum() + (att * w).sum()
    loss.backward()
    return {"h": h.detach(), "y": y.detach(), "att": att.detach(), "ga": a.grad, "gb": b.grad, "gh0": h0.grad,
            "gconv": conv.grad}  # fmt: skip


def _ranked(rank, n):
    """One rank's block of every input; its outputs and gradients (the conv weight's summed over ranks)."""
    import torch.distributed as dist

    a, b, h0, w, conv = _inputs()
    L = T // n
    sl = slice(rank * L, (rank + 1) * L)
    a, b, w = (t[:, sl].clone().requires_grad_() for t in (a, b, w))
    h0, conv = h0.clone().requires_grad_(), conv.clone().requires_grad_()
    # the recurrence: this block's summary (total transition, final state from zero), the state entering it, the scan
    _, from_zero = _scan(a, b, torch.zeros(B, C, dtype=torch.float64))
    (h_in,) = incoming_state((a.prod(1), from_zero), linear_combine, (h0,))
    h, _ = _scan(a, b, h_in)
    y = _causal_conv(b, conv, previous_tail(b, K - 1))
    keys, values = (gather_ranks(t).transpose(0, 1).reshape(B, n * L, C) for t in (a, b))
    att = _attend(b, keys, values, rank * L)
    loss = (h * w).sum() + (y * w).sum() + (att * w).sum()
    loss.backward()
    dist.all_reduce(conv.grad)  # a replicated parameter: the ranks' gradients add up, as DDP would
    return {"h": h.detach(), "y": y.detach(), "att": att.detach(), "ga": a.grad, "gb": b.grad, "gh0": h0.grad,
            "gconv": conv.grad}  # fmt: skip


@pytest.mark.parametrize("n", [2, 4])
def test_split_along_time_equals_one_process(n):
    whole = _whole()
    ranks = run_ranks(_ranked, n)
    for name in ("h", "y", "att", "ga", "gb"):
        got = torch.cat([r[name] for r in ranks], 1)
        torch.testing.assert_close(got, whole[name], rtol=1e-10, atol=1e-12, msg=name)
    # the initial state's gradient reaches rank 0; no other rank's copy is used
    torch.testing.assert_close(ranks[0]["gh0"], whole["gh0"], rtol=1e-10, atol=1e-12)
    assert all(r["gh0"] is None or not r["gh0"].any() for r in ranks[1:])
    for r in ranks:
        torch.testing.assert_close(r["gconv"], whole["gconv"], rtol=1e-10, atol=1e-12)


def test_one_process_needs_no_group():
    x = torch.randn(2, 5, 3)
    assert torch.equal(gather_ranks(x)[0], x)
    assert not previous_tail(x, 2).any()
    (h,) = incoming_state((x[:, 0], x[:, 1]), linear_combine, (x[:, 2],))
    assert torch.equal(h, x[:, 2])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: previous_tail(torch.zeros(1, 2, 3), 3), "width=3"),
        (lambda: previous_tail(torch.zeros(1, 2, 3), -1), "width must be an int"),
        (lambda: incoming_state((torch.zeros(2),), linear_combine, ()), "initial"),
        (lambda: incoming_state((torch.zeros(2),), linear_combine, (torch.zeros(2, dtype=torch.float64),)), "dtype"),
        (lambda: gather_ranks([1.0]), "tensor"),
    ],
)
def test_bad_input_is_refused(call, match):
    with pytest.raises(InputError, match=match):
        call()
