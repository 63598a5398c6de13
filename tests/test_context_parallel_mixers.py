"""The linear-recurrence mixers split along time over 2 and 4 gloo ranks (``context_parallel=group``) equal one
process: GateLoop (every transition, complex and real gates, heads and max heads), the mLSTM layer (both variants,
both forget gates, with its causal conv) and the RG-LRU block (with its Conv1D), in every mode that takes a state.

Each case runs the mixer on the whole sequence in this process and on one block per rank, and compares the
outputs, the returned final state, the gradient of the input, of the initial state (rank 0's; the other ranks'
copies are unused) and of every parameter (each rank's gradient is its share: their sum is the one-process
gradient), in float64 to a relative 1e-10 and in float32 to 1e-5. Cases: batch 2, a fresh stream or a random initial
state, and packed documents where one document crosses every cut and one starts exactly at a cut. The sLSTM and the
softmax GateLoop refuse the split, and the conv mixers a block shorter than their conv's halo. All cases of one rank count run in one spawn of the ranks (the costly part).
"""

from __future__ import annotations

import pytest
import torch
from cp_harness import run_ranks
from helpers import assert_close
from mixer_helpers import inputs, make

from seqzoo.errors import InputError
from seqzoo.mixers import build_mixer
from seqzoo.mixers.mlstm import MLSTMState
from seqzoo.mixers.rglru import RGLRUState

B, T = 2, 16  # 16 tokens: blocks of 8 (2 ranks) or 4 (4 ranks); cuts at 4, 8, 12
REFUSED = ("slstm", "gateloop_softmax")  # not linear recurrences of a fixed-size state (their docstrings)

# (name, constructor kwargs, modes): small sizes; chunk 3 leaves ragged chunks in every block
SPECS = {
    "gateloop": ("gateloop", {"d_model": 8, "n_heads": 2, "chunk_size": 3}, ("recurrent", "scan", "chunkwise", "attention")),
    "gateloop_max_heads": ("gateloop", {"d_model": 4}, ("scan", "chunkwise")),
    "gateloop_real": ("gateloop", {"d_model": 8, "n_heads": 2, "transition": "real", "chunk_size": 3}, ("chunkwise", "recurrent")),
    "gateloop_fixed": ("gateloop", {"d_model": 8, "n_heads": 2, "transition": "fixed", "fixed_init": "lru", "chunk_size": 3}, ("chunkwise",)),
    "gateloop_retnet": ("gateloop", {"d_model": 8, "n_heads": 2, "transition": "retnet", "chunk_size": 3}, ("chunkwise",)),
    "mlstm": ("mlstm", {"d_model": 8, "n_heads": 2, "round_to": 8, "chunk_size": 3}, ("recurrent", "chunkwise")),
    # the parallel form stabilises a call without a state differently; the difference shows only through eps
    "mlstm_eps0": ("mlstm", {"d_model": 8, "n_heads": 2, "round_to": 8, "chunk_size": 3, "eps": 0.0}, ("parallel",)),
    "mlstm_exp": ("mlstm", {"d_model": 8, "n_heads": 2, "round_to": 8, "chunk_size": 3, "forget_gate": "exp"}, ("chunkwise",)),
    "mlstm_7b": ("mlstm", {"d_model": 8, "n_heads": 2, "variant": "7b", "chunk_size": 3}, ("recurrent", "chunkwise")),
    "rglru": ("rglru", {"d_model": 8, "d_rnn": 8, "n_blocks": 2}, ("recurrent", "scan")),
}  # fmt: skip


def _cases() -> list[tuple]:
    """(spec, mode, with initial state, packed, dtype): every mode from a given state with packed documents and from a
    fresh stream; the first mode of each spec also with only one of the two; one float32 case per mixer."""
    cases = []
    for key, (_, _, modes) in SPECS.items():
        for i, mode in enumerate(modes):
            combos = [(False, False), (True, True)] + ([(True, False), (False, True)] if i == 0 else [])
            cases += [(key, mode, st, packed, torch.float64) for st, packed in combos]
    return cases + FLOAT32


FLOAT32 = [
    (key, mode, True, True, torch.float32)
    for key, mode in (("gateloop", "chunkwise"), ("mlstm", "chunkwise"), ("rglru", "scan"))
]
# the default suite: each mixer's training mode from a state with packed documents and from a fresh stream
FAST = [(key, mode, st, st, torch.float64) for key, mode in (("gateloop", "chunkwise"), ("mlstm", "chunkwise"), ("mlstm_7b", "chunkwise"), ("rglru", "scan")) for st in (True, False)]  # fmt: skip


def _segment_pos() -> torch.Tensor:
    """Row 0: the carried document runs to token 1, then documents start at 2 (crossing the cut at 4), 6 (crossing 8)
    and 11 (crossing 12); row 1: documents start at 0, 3 (crossing 4) and exactly at the cut 8. Starts at 3, 6 and 11
    lie in the last conv_size - 1 = 3 tokens before a cut (the conv halo's document mask)."""
    pos = torch.empty(B, T, dtype=torch.long)
    for row, (first, starts) in enumerate(((5, (2, 6, 11)), (0, (0, 3, 8)))):
        p = first
        for t in range(T):
            p = 0 if t in starts else p + 1 if t else p
            pos[row, t] = p
    return pos


def _build(key: str, dtype):
    name, kwargs, _ = SPECS[key]
    torch.manual_seed(0)
    mixer = build_mixer(name, **kwargs).to(dtype)
    with torch.no_grad():  # off the initial values (zero gate weights, equal biases) so that every gate varies
        g = torch.Generator().manual_seed(1)
        for p in mixer.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(dtype))
    return mixer


def _initial_state(key: str, mixer, dtype, g):
    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)

    name = SPECS[key][0]
    if name == "gateloop":
        return torch.complex(rand(*mixer.state_shape(B)), rand(*mixer.state_shape(B))) * 0.5
    if name == "mlstm":
        H, K, V = mixer.n_heads, mixer.qk_dim, mixer.v_dim
        conv = rand(B, mixer.conv_size - 1, mixer.inner) if mixer.variant == "neurips" else None
        return MLSTMState(rand(B, H, K, V), rand(B, H, K), rand(B, H) - 1.0, conv)  # m < 0 too
    return RGLRUState(conv=rand(B, mixer.conv_size - 1, mixer.d_rnn), h=rand(B, mixer.d_rnn))


def _state_tensors(state) -> list:
    if isinstance(state, MLSTMState):
        return [t for t in (state.C, state.n, state.m, state.conv) if t is not None]
    if isinstance(state, RGLRUState):
        return [state.conv, state.h]
    return [state]


def _with_grad(state):
    """A leaf copy of every tensor of ``state`` that takes a gradient."""
    if isinstance(state, MLSTMState):
        return MLSTMState(
            *(None if t is None else t.clone().requires_grad_() for t in (state.C, state.n, state.m, state.conv))
        )
    if isinstance(state, RGLRUState):
        return RGLRUState(state.conv.clone().requires_grad_(), state.h.clone().requires_grad_())
    return state.clone().requires_grad_()  # fmt: skip


def _weighted(t: torch.Tensor, g) -> torch.Tensor:
    """<t, w> with a random w (complex t: its real and imaginary parts each weighted)."""
    r = torch.view_as_real(t) if t.is_complex() else t
    return (r * torch.randn(r.shape, generator=g, dtype=torch.float64).to(r.dtype)).sum()


def _run(case, group=None, rank: int = 0, n: int = 1) -> dict:
    """One case on this rank's block (the whole sequence without a group): outputs, state and gradients."""
    key, mode, with_state, packed, dtype = case
    mixer = _build(key, dtype)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(B, T, mixer.d_model, generator=g, dtype=torch.float64).to(dtype)
    state = _with_grad(_initial_state(key, mixer, dtype, g)) if with_state else None
    seg = _segment_pos() if packed else None
    L = T // n
    cut = slice(rank * L, (rank + 1) * L)
    xl = x[:, cut].clone().requires_grad_()
    y, final = mixer(xl, state, mode=mode, segment_pos=None if seg is None else seg[:, cut], context_parallel=group)
    wg = torch.Generator().manual_seed(3)
    wy = torch.randn(B, T, mixer.d_model, generator=wg, dtype=torch.float64).to(dtype)
    # every rank lets the final state reach its loss (its gather's backward is a collective); 1/n of it each
    loss = (y * wy[:, cut]).sum() + sum(_weighted(t, wg) for t in _state_tensors(final)) / n
    loss.backward()
    return {
        "y": y.detach(),
        "state": [t.detach() for t in _state_tensors(final)],
        "dx": xl.grad,
        "dstate": None if state is None else [t.grad for t in _state_tensors(state)],
        "dparams": {k: p.grad for k, p in mixer.named_parameters()},
    }


def _ranked(rank: int, n: int, cases: list) -> dict:
    import torch.distributed as dist

    group = dist.group.WORLD
    out = {"cases": [_run(case, group, rank, n) for case in cases], "refused": {}}
    for name in REFUSED:
        mixer = make(name)
        try:
            mixer(inputs(mixer, T=4), context_parallel=group)
            out["refused"][name] = None
        except InputError as err:
            out["refused"][name] = str(err)
    for key in ("mlstm", "rglru"):  # blocks shorter than the conv's halo (conv_size - 1 = 3 tokens)
        mixer = _build(key, torch.float64)
        try:
            mixer(torch.zeros(B, 2, mixer.d_model, dtype=torch.float64), context_parallel=group)
            out["refused"][f"{key} short block"] = None
        except InputError as err:
            out["refused"][f"{key} short block"] = str(err)
    return out


def _zero_or_none(t) -> bool:
    return t is None or not t.any()


def _compare(case, whole: dict, ranks: list[dict]) -> None:
    tol = 1e-10 if case[-1] == torch.float64 else 1e-5
    label = "/".join(str(c) for c in case)

    def close(got, ref, what):
        assert_close(got, ref, tol, floor=0.0, name=f"{label}: {what}")

    close(torch.cat([r["y"] for r in ranks], 1), whole["y"], "y")
    close(torch.cat([r["dx"] for r in ranks], 1), whole["dx"], "dx")
    for r in ranks:  # the same final state on every rank
        for i, (got, ref) in enumerate(zip(r["state"], whole["state"], strict=True)):
            close(got, ref, f"state[{i}]")
    if whole["dstate"] is not None:
        for i, ref in enumerate(whole["dstate"]):
            close(ranks[0]["dstate"][i], ref, f"dstate[{i}]")
            assert all(_zero_or_none(r["dstate"][i]) for r in ranks[1:]), f"{label}: a later rank's state was used"
    for name, ref in whole["dparams"].items():
        shares = [r["dparams"][name] for r in ranks]
        if ref is None:
            assert all(_zero_or_none(s) for s in shares), f"{label}: {name} has a gradient only when split"
            continue
        close(sum(s for s in shares if s is not None), ref, f"d{name}")


def _check_split(n: int, cases: list) -> None:
    pos = _segment_pos()
    assert (pos[0, [4, 8, 12]] != 0).all() and pos[1, 8] == 0 and pos[1, 7] != 0 and pos[0, 0] != 0
    ranks = run_ranks(_ranked, n, cases)
    for i, case in enumerate(cases):
        _compare(case, _run(case), [r["cases"][i] for r in ranks])
    for name in REFUSED:
        for r in ranks:
            msg = r["refused"][name]
            assert msg is not None and name in msg and "context parallelism" in msg, (name, msg)
    for key in ("mlstm", "rglru"):
        for r in ranks:
            msg = r["refused"][f"{key} short block"]
            assert msg is not None and msg.startswith(key) and "conv_size - 1 = 3" in msg and "got 2" in msg, msg


def test_split_along_time_equals_one_process():
    _check_split(2, FAST)


@pytest.mark.slow  # one spawn of the ranks per rank count; ~60 cases of a few collectives each
@pytest.mark.parametrize("n", [2, 4])
def test_every_mode_split_along_time_equals_one_process(n):
    _check_split(n, _cases())
