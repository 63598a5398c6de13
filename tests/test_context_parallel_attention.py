"""Attention split along time over 2 and 4 gloo ranks (seqzoo/mixers/attention_split.py) equals one process, in
float64: outputs, the cache after the whole sequence, and the gradients of the input, of every parameter and of the
initial cache, with batch > 1, an initial state, packed documents crossing a rank boundary, a window shorter and
longer than a rank's block, and the short convolution's halo."""

import functools

import pytest
import torch
from cp_harness import run_ranks
from packed_helpers import segment_pos_from_starts

from seqzoo.errors import InputError
from seqzoo.mixers import build_mixer

B, T, D, PREFIX = 2, 16, 16, 5

CASES = {
    "global": ("attention", {"n_heads": 4, "n_kv_heads": 2}),
    "window_in_block": ("local_attention", {"n_heads": 4, "n_kv_heads": 1, "window": 3}),
    "window_over_blocks": ("local_attention", {"n_heads": 2, "window": 6}),
    "short_conv": ("attention", {"n_heads": 2, "short_conv": 3}),
    "local_short_conv": ("local_attention", {"n_heads": 2, "window": 5, "short_conv": 4}),
}


def _mixer(name, kwargs):
    torch.manual_seed(0)
    m = build_mixer(name, d_model=D, **kwargs).double()
    if getattr(m, "short_conv", 0):  # zero-initialised: give it weights, so that the halo matters
        with torch.no_grad():
            m.conv_weight.normal_()
    return m


def _inputs(packed: bool):
    g = torch.Generator().manual_seed(1)
    prefix = torch.randn(B, PREFIX, D, generator=g, dtype=torch.float64)
    x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    w = torch.randn(B, T, D, generator=g, dtype=torch.float64)  # a loss weight per output
    sp_prefix = sp = None
    if packed:  # documents start inside the prefix and across the cuts at 4, 8, 12 (and at 0 for the second row)
        sp_all = segment_pos_from_starts([[0, 2, 8, 11, 19], [0, 5, 14]], PREFIX + T)
        sp_prefix, sp = sp_all[:, :PREFIX], sp_all[:, PREFIX:]
    return prefix, x, w, sp_prefix, sp


def _state_weights(state):
    g = torch.Generator().manual_seed(2)
    return [torch.randn(t.shape, generator=g, dtype=torch.float64) for t in (state.k, state.v)] + (
        [torch.randn(state.conv.shape, generator=g, dtype=torch.float64)] if state.conv is not None else []
    )


def _initial_state(m, prefix, sp_prefix):
    """The cache after the prefix, as leaves (so that its gradient is read)."""
    with torch.no_grad():
        _, s = m(prefix, segment_pos=sp_prefix)
    s.k, s.v = s.k.clone().requires_grad_(), s.v.clone().requires_grad_()
    if s.conv is not None:
        s.conv = s.conv.clone().requires_grad_()
    return s


def _loss(y, w, final, count_state: bool):
    loss = (y * w).sum()
    if count_state:  # the final cache, equal on every rank, counts once
        loss = loss + sum(
            (t * c).sum() for t, c in zip((final.k, final.v, final.conv), _state_weights(final)) if t is not None
        )
    return loss


def _grads(m, x, s):
    out = {"gx": x.grad, **{f"g.{n}": p.grad for n, p in m.named_parameters()}}
    if s is not None:
        out.update(gk=s.k.grad, gv=s.v.grad, gconv=None if s.conv is None else s.conv.grad)
    return out


def _whole(case, with_state, packed):
    m = _mixer(*CASES[case])
    prefix, x, w, sp_prefix, sp = _inputs(packed)
    s = _initial_state(m, prefix, sp_prefix) if with_state else None
    x.requires_grad_()
    y, final = m(x, state=s, segment_pos=sp)
    _loss(y, w, final, True).backward()
    return {"y": y.detach(), "final": final, **_grads(m, x, s)}


def _ranked(rank, n, case, with_state, packed):
    import torch.distributed as dist

    m = _mixer(*CASES[case])
    prefix, x, w, sp_prefix, sp = _inputs(packed)
    s = _initial_state(m, prefix, sp_prefix) if with_state else None
    L = T // n
    cut = slice(rank * L, (rank + 1) * L)
    x = x[:, cut].clone().requires_grad_()
    y, final = m(x, state=s, segment_pos=None if sp is None else sp[:, cut], context_parallel=dist.group.WORLD)
    _loss(y, w[:, cut], final, rank == 0).backward()
    for p in m.parameters():  # a replicated parameter: the ranks' gradients add up, as the trainer does
        dist.all_reduce(p.grad)
    final = type(final)(**{k: None if v is None else v.detach() for k, v in vars(final).items()})
    return {"y": y.detach(), "final": final, **_grads(m, x, s)}


VARIANTS = [(False, False), (True, False), (True, True)]  # (initial state, packed documents)


def _ranked_all(rank, n):
    """Every case on this rank, in one group (one spawn per rank count keeps the test fast)."""
    return {(case, *v): _ranked(rank, n, case, *v) for case in sorted(CASES) for v in VARIANTS}


@functools.cache
def _split_results(n):
    return run_ranks(_ranked_all, n)


def _close(got, want, name):
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12, msg=name)


@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])  # 4 ranks: one more spawn, ~40 s
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("with_state, packed", VARIANTS)
def test_split_attention_equals_one_process(case, n, with_state, packed):
    whole = _whole(case, with_state, packed)
    ranks = [r[case, with_state, packed] for r in _split_results(n)]
    _close(torch.cat([r["y"] for r in ranks], 1), whole["y"], "y")
    _close(torch.cat([r["gx"] for r in ranks], 1), whole["gx"], "input gradient")
    for r in ranks:
        for field in ("k", "v", "pos", "seg", "conv"):
            want, got = getattr(whole["final"], field), getattr(r["final"], field)
            assert (want is None) == (got is None), field
            if want is not None:
                _close(got, want.detach(), f"final state {field}")
        for name in whole:
            if name.startswith("g."):
                _close(r[name], whole[name], name)
    if with_state:  # the initial cache's gradient reaches rank 0; no other rank's copy is used
        for name in ("gk", "gv", "gconv"):
            if whole[name] is not None:
                _close(ranks[0][name], whole[name], name)
                assert all(r[name] is None or not r[name].any() for r in ranks[1:]), name


REFUSALS = [  # (mixer, kwargs, block length of rank r, what the message says)
    ("attention", {"n_heads": 2, "causal": False}, lambda r: 4, "causal"),
    ("attention", {"n_heads": 2, "short_conv": 6}, lambda r: 4, "short_conv - 1 = 5"),
    ("slstm", {}, lambda r: 4, "slstm does not support context parallelism"),
    ("attention", {"n_heads": 2}, lambda r: 4 + r, "same (batch, length)"),
]


def _refusals(rank, n):
    import torch.distributed as dist

    messages = []
    for name, kwargs, length, _ in REFUSALS:
        m = _mixer(name, kwargs)
        try:
            m(torch.zeros(1, length(rank), D, dtype=torch.float64), context_parallel=dist.group.WORLD)
            messages.append(None)
        except InputError as e:
            messages.append(str(e))
    return messages


def test_split_is_refused_with_the_reason():
    """Bidirectional attention, a convolution halo longer than the block, a mixer without the split (sLSTM) and
    blocks of unequal length are refused on every rank, naming the layer."""
    for messages in run_ranks(_refusals, 2):
        for (name, _, _, match), message in zip(REFUSALS, messages):
            assert message is not None and match in message, (name, message)
