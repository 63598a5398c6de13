"""Packed documents in the mLSTM cell ops (issue #43): ``reset (B, T)``, True where a document starts.

Every PyTorch mode (naive loop, recurrent step, parallel, chunkwise at several chunk sizes) against each document
run alone through the naive step loop as a fresh stream, in float64: outputs, the final state (that of the last
document), and the gradients of q, k, v, i, f and of the carried-in state (which reaches only the positions before
the first start). Cases: starts at a chunk edge and inside a chunk, one-token documents, a start at the last
position, a start at position 0 with a carried state, batch rows with different starts, a tail chunk. Also: split
anywhere = whole with resets, a packed prefill continued step by step across a start, the Triton kernels with resets
(forward and backward, under the interpreter without a GPU), and bad ``reset`` refused before any work.
"""

import itertools
import logging

import pytest
import torch
from helpers import DEV, GRAD_SCALE, assert_close, grads, needs_triton

from seqzoo.errors import InputError
from seqzoo.kernels import use_kernels
from seqzoo.ops.mlstm import mlstm, mlstm_naive_parallel, mlstm_naive_recurrent, mlstm_step

f64 = torch.float64
B, T, H, K, V = 2, 23, 2, 4, 3
# row 0: starts at a chunk edge (4, 8 for L = 4), inside a chunk (9: one-token document 8, 17), and the last
# position (22: a one-token last document); row 1: a start at 0 (a carried state is ignored) and at 13
STARTS = [[4, 8, 9, 17, 22], [0, 13]]
# (mode, chunk size): the chunkwise form at L = 1, at L dividing the starts, at L not dividing T (a tail), at L > T
CASES = [("naive", 4), ("recurrent", 4), ("parallel", 4), ("chunkwise", 1), ("chunkwise", 4), ("chunkwise", 5)]
CASES += [("chunkwise", 8), ("chunkwise", 64)]


def reset_from(starts, T=T):
    r = torch.zeros(len(starts), T, dtype=torch.bool)
    for row, ss in enumerate(starts):
        r[row, ss] = True
    return r


def make(seed=0, T=T, f_mean=2.0):
    g = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(B, T, H, K, generator=g, dtype=f64) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=g, dtype=f64)
    i = torch.randn(B, T, H, generator=g, dtype=f64)
    f = f_mean + torch.randn(B, T, H, generator=g, dtype=f64)
    state = (
        torch.randn(B, H, K, V, generator=g, dtype=f64),
        torch.rand(B, H, K, generator=g, dtype=f64),
        torch.randn(B, H, generator=g, dtype=f64),
    )
    return [q, k, v, i, f], state


def separate(q, k, v, i, f, state, reset, eps=0.0):
    """Each document of each row run alone by the naive step loop: the positions before a row's first start from
    the carried state, every document after a start as a fresh stream. Returns h and the last documents' states."""
    hs, finals = [], []
    for b in range(reset.shape[0]):
        cuts = [0] + [t for t in range(1, reset.shape[1]) if reset[b, t]] + [reset.shape[1]]
        s = None if state is None or reset[b, 0] else tuple(t[b : b + 1] for t in state)
        row = []
        for a, e in itertools.pairwise(cuts):
            h, s = mlstm_naive_recurrent(*(t[b : b + 1, a:e] for t in (q, k, v, i, f)), s, eps=eps)
            row.append(h)
            last = s
            s = None
        hs.append(torch.cat(row, 1))
        finals.append(last)
    return torch.cat(hs), tuple(torch.cat(parts) for parts in zip(*finals))


def packed(mode, L, eps=0.0):
    def run(q, k, v, i, f, state, reset):
        if mode == "naive":
            return mlstm_naive_recurrent(q, k, v, i, f, state, eps=eps, reset=reset)
        return mlstm(q, k, v, i, f, state, mode=mode, chunk_size=L, eps=eps, reset=reset)

    return run


def outputs_and_grads(fn, inputs, state, reset):
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    st = None if state is None else tuple(t.clone().requires_grad_(True) for t in state)
    h, (C, n, m) = fn(*leaves, st, reset)
    g = torch.Generator().manual_seed(7)
    weights = [torch.randn(t.shape, generator=g, dtype=f64).to(t.device) for t in (h, C, n)]
    # m is piecewise constant (a max): its gradient is checked through h
    gs = grads([h, C, n], leaves + list(st or []), weights)
    return (h, C, n, m), gs


def assert_matches_separate(run, inputs, state, reset, *, eps, tol, dtype=f64, device="cpu"):
    """``run(q, k, v, i, f, state, reset)`` on ``dtype`` / ``device`` copies against ``separate`` in float64:
    h, the final (C, n, m) and the gradients of q, k, v, i, f and the initial state, to ``tol`` (gradients
    ``tol * GRAD_SCALE``)."""
    ins = [t.to(device, dtype) for t in inputs]
    st = None if state is None else tuple(t.to(device, dtype) for t in state)
    got, got_grads = outputs_and_grads(run, ins, st, reset.to(device))
    ref, ref_grads = outputs_and_grads(lambda *a: separate(*a, eps=eps), inputs, state, reset)
    for name, a, b in zip(("h", "C", "n", "m"), got, ref, strict=True):
        assert_close(a, b, tol, name=name)
    for name, a, b in zip(["q", "k", "v", "i", "f", "C0", "n0", "m0"], got_grads, ref_grads, strict=False):
        assert_close(a, b, tol * GRAD_SCALE, name=f"d{name}")


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("mode,L", CASES)
def test_packed_equals_separate_fp64(mode, L, with_state):
    inputs, state = make()
    assert_matches_separate(
        packed(mode, L), inputs, state if with_state else None, reset_from(STARTS), eps=0.0, tol=1e-12
    )


def test_carried_state_reaches_only_the_first_document():
    """The gradient of the carried state is exactly zero for a row that starts a document at position 0, and not
    zero for a row that continues it (a test that would pass with the state ignored everywhere cannot)."""
    inputs, state = make(seed=3)
    reset = reset_from(STARTS)
    for mode, L in CASES:
        _, (*_, dC0, dn0, dm0) = outputs_and_grads(packed(mode, L), inputs, state, reset)
        assert float(dC0[1].abs().max()) == 0.0 and float(dn0[1].abs().max()) == 0.0, mode
        assert float(dC0[0].abs().max()) > 1e-3, mode


def test_naive_parallel_with_resets_equals_separate():
    inputs, _ = make(seed=4, T=15)
    reset = reset_from([[3, 4, 11], [0, 7, 14]], T=15)
    h_ref, _ = separate(*inputs, None, reset)
    assert_close(mlstm_naive_parallel(*inputs, eps=0.0, reset=reset), h_ref, 1e-12)


@pytest.mark.parametrize("mode,L", [c for c in CASES if c[0] != "naive"])
def test_split_anywhere_equals_whole_with_resets(mode, L):
    """eps > 0 as the layer runs it: each piece starts its own chunks, so the chunkwise stabilisers differ from the
    whole call's and outputs agree to O(eps); states exactly as the recurrence."""
    inputs, state = make(seed=5)
    reset = reset_from(STARTS)
    run = packed(mode, L, eps=1e-6)
    whole, s_whole = run(*inputs, state, reset)
    for t in (1, 4, 8, 9, 13, 17, 22):
        h1, s1 = run(*(x[:, :t] for x in inputs), state, reset[:, :t])
        h2, s2 = run(*(x[:, t:] for x in inputs), s1, reset[:, t:])
        assert_close(torch.cat([h1, h2], 1), whole, 1e-8, name=f"h split at {t}")
        for a, b in zip(s2, s_whole):
            assert_close(a, b, 1e-10, name=f"state split at {t}")


def test_packed_prefill_then_steps_across_a_start():
    """A packed prefill, then one token at a time (``mlstm`` at T = 1 and ``mlstm_step``) with the resets of those
    tokens, crossing a document start: equal to the whole packed call."""
    inputs, state = make(seed=6)
    reset = reset_from(STARTS)
    whole, s_whole = mlstm(*inputs, state, mode="chunkwise", chunk_size=4, eps=0.0, reset=reset)
    P = 7  # the steps cross the starts at 8, 9 (row 0) and 13 (row 1)
    h, s = mlstm(*(x[:, :P] for x in inputs), state, mode="chunkwise", chunk_size=4, eps=0.0, reset=reset[:, :P])
    outs = [h]
    q, k, v, i, f = inputs
    for t in range(P, T):
        if t % 2:
            h, s = mlstm(*(x[:, t : t + 1] for x in inputs), s, mode="auto", eps=0.0, reset=reset[:, t : t + 1])
        else:
            phi = torch.nn.functional.logsigmoid(f[:, t])
            h, s = mlstm_step(q[:, t] * K**-0.5, k[:, t], v[:, t], i[:, t], phi, s, 0.0, reset[:, t])
            h = h[:, None]
        outs.append(h)
    assert_close(torch.cat(outs, 1), whole, 1e-12)
    for a, b in zip(s, s_whole):
        assert_close(a, b, 1e-12)


def test_no_start_equals_no_reset():
    inputs, state = make(seed=8)
    none = torch.zeros(B, T, dtype=torch.bool)
    for mode, L in CASES:
        h0, s0 = packed(mode, L)(*inputs, state, None)
        h1, s1 = packed(mode, L)(*inputs, state, none)
        assert_close(h1, h0, 1e-12, name=mode)
        for a, b in zip(s1, s0):
            assert_close(a, b, 1e-12, name=mode)


def test_long_documents_fp32_close_to_fp64():
    """fp32 with long documents and strong decay (|sum phi| in the thousands): within-document sums restart at each
    start, so no exponent is a difference of two large running sums."""
    g = torch.Generator().manual_seed(9)
    Tl = 600
    q, k = (torch.randn(1, Tl, 1, 8, generator=g, dtype=f64) for _ in range(2))
    v = torch.randn(1, Tl, 1, 8, generator=g, dtype=f64)
    i = torch.randn(1, Tl, 1, generator=g, dtype=f64)
    f = -4.0 + torch.randn(1, Tl, 1, generator=g, dtype=f64)  # phi ~ -4 per step
    reset = reset_from([[150, 151, 333, 512]], T=Tl)
    ins = (q, k, v, i, f)
    h64, s64 = mlstm(*ins, mode="chunkwise", chunk_size=64, eps=1e-6, reset=reset)
    for mode in ("parallel", "chunkwise"):
        h32, s32 = mlstm(*(t.float() for t in ins), mode=mode, chunk_size=64, eps=1e-6, reset=reset)
        assert_close(h32.double(), h64, 1e-4, name=mode)
        for a, b in zip(s32, s64):
            assert_close(a.double(), b, 1e-4, name=mode)


def test_bad_reset_refused_before_work():
    inputs, _ = make()
    for bad in (torch.zeros(B, T), torch.zeros(B, T - 1, dtype=torch.bool), [[True] * T] * B):
        for mode in ("recurrent", "parallel", "chunkwise", "naive", "auto"):
            with pytest.raises(InputError, match="reset"):
                mlstm(*inputs, mode=mode, reset=bad)


@needs_triton
@pytest.mark.parametrize("backward", ["triton", "torch"])
@pytest.mark.parametrize("with_state", [False, True])
def test_triton_with_resets_equals_separate(with_state, backward):
    """The Triton kernels with ``HAS_RESET`` (fp32, under the interpreter without a GPU) against each document run
    alone through the naive loop in float64: outputs, the last documents' final states and the gradients of every
    input, from the Triton backward kernels (``backward="triton"``, the default) and from the PyTorch recompute
    (``"torch"``). T = 37 with chunks of 16: starts at a chunk edge (16, 32), inside a chunk (5, 6: a one-token
    document), at the last position (36), in the ragged tail, and at 0 in the second row."""
    from seqzoo.ops.mlstm.triton import mlstm_triton

    Tt = 37
    inputs, state = make(seed=10, T=Tt)
    reset = reset_from([[5, 6, 16, 32, 36], [0, 20, 33]], T=Tt)

    def run(*a):
        return mlstm_triton(*a[:5], a[5], chunk_size=16, eps=1e-6, backward=backward, reset=a[6])

    state = state if with_state else None
    assert_matches_separate(run, inputs, state, reset, eps=1e-6, tol=1e-4, dtype=torch.float32, device=DEV)


@needs_triton
def test_triton_without_starts_is_unchanged():
    """An all-False reset takes the HAS_RESET kernels and gives the plain kernels' outputs, states and gradients."""
    inputs, state = make(seed=12, T=21)
    f32 = [t.to(DEV, torch.float32) for t in inputs]
    st32 = tuple(t.to(DEV, torch.float32) for t in state)
    none = torch.zeros(B, 21, dtype=torch.bool, device=DEV)
    plain, plain_grads = outputs_and_grads(lambda *a: mlstm(*a[:6], mode="triton", chunk_size=16), f32, st32, None)
    got, got_grads = outputs_and_grads(
        lambda *a: mlstm(*a[:6], mode="triton", chunk_size=16, reset=a[6]), f32, st32, none
    )
    for a, b in zip((*got, *got_grads), (*plain, *plain_grads), strict=True):
        assert_close(a, b, 1e-6)


@needs_triton
def test_triton_gate_gradients_route_through_the_restarted_stabiliser():
    """Strong input gates (i~ up to +-8) make the stabiliser's arg-max jump between tokens, m_0 and a new document's
    fresh m = 0; the Triton backward routes the eps-path gradient of M the way autograd through the naive loop does
    (``_stabiliser_routes``: a running maximum restarted at each start). eps = 1e-2 makes that path large."""
    Tt = 29
    inputs, state = make(seed=13, T=Tt)
    inputs[3] = 8 * torch.tanh(inputs[3])
    state = (state[0], state[1], state[2] + 2.0)
    reset = reset_from([[7, 8, 19], [11, 16, 17, 28]], T=Tt)

    def run(*a):
        return mlstm(*a[:6], mode="triton", chunk_size=16, eps=1e-2, reset=a[6])

    assert_matches_separate(run, inputs, state, reset, eps=1e-2, tol=1e-4, dtype=torch.float32, device=DEV)


@needs_triton
def test_mlstm_layer_with_segment_pos_on_the_triton_kernels(caplog, kernels_reset):
    """The mLSTM layer with packed documents through the Triton kernels (its conv and its cell; forced on the CPU
    interpreter, ``auto`` on a GPU) equals the same layer on the PyTorch paths: output, a continuation from the final
    state, and every parameter's gradient, fp32. The kernels' first-use log shows that they ran."""
    from seqzoo.mixers import build_mixer

    torch.manual_seed(0)
    m = build_mixer("mlstm", d_model=16, n_heads=2, chunk_size=16).to(DEV)
    x = torch.randn(2, 21, 16, generator=torch.Generator().manual_seed(1)).to(DEV)
    reset = reset_from([[0, 3, 4, 16, 19], [0, 16]], T=21)  # one-token documents, starts inside and at chunk edges
    t = torch.arange(21)
    sp = (t - torch.where(reset, t, 0).cummax(1).values).to(DEV)  # position inside the document

    def run(setting):
        m.zero_grad()
        with use_kernels(setting):
            y, s = m(x, mode="chunkwise", segment_pos=sp)
            y2, _ = m(x[:, :3], state=s, mode="chunkwise")
        (y.square().sum() + y2.square().sum()).backward()
        return y.detach(), y2.detach(), {n: p.grad.clone() for n, p in m.named_parameters()}

    caplog.set_level(logging.INFO, logger="seqzoo.kernels")
    ref = run("torch")
    got = run("triton" if DEV == "cpu" else "auto")
    assert_close(got[0], ref[0], 1e-4, name="y")
    assert_close(got[1], ref[1], 1e-4, name="continuation")
    for name in ref[2]:
        assert_close(got[2][name], ref[2][name], 1e-4 * GRAD_SCALE, name=f"d{name}")
    ran = " ".join(r.getMessage() for r in caplog.records)
    assert "mlstm runs the triton implementation" in ran and "causal_conv1d runs the triton implementation" in ran


@needs_triton
def test_gpu_shape_probe_asks_the_reset_variants(monkeypatch):
    """Before a GPU launch the dispatch asks whether each kernel it will run has an autotune config that fits
    (``triton.py: kernel_tile``); with resets those are the ``HAS_RESET`` variants. Resources fabricated here (no
    GPU): every kernel of a training call (forward, states-only recompute, both backward kernels) is asked in that
    variant, and when only ``HAS_RESET`` launches spill, only a call with resets is unfit."""
    from seqzoo.kernels import prune
    from seqzoo.kernels.prune import ResourcePrune, Usage
    from seqzoo.ops.mlstm import triton as m

    asked, spill = [], {"reset": 0}

    def usage(self, config, nargs, kwargs):
        asked.append((self.kernel.__name__, kwargs.get("HAS_RESET")))
        return Usage(128, spill["reset"] if kwargs.get("HAS_RESET") else 0, 20_000)

    monkeypatch.setattr(ResourcePrune, "usage", usage)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 20, 2, 16, generator=g).requires_grad_(True) for _ in range(3))
    reset = torch.zeros(1, 20, dtype=torch.bool)
    verdicts = []
    for spill["reset"] in (0, 512):
        monkeypatch.setattr(prune, "_verdicts", {})
        m._shape_unfit.cache_clear()
        try:
            verdicts.append((m.shape_unfit(q, k, v, 16, cc=90), m.shape_unfit(q, k, v, 16, cc=90, reset=reset)))
        finally:
            m._shape_unfit.cache_clear()
        if not spill["reset"]:
            kernels = {name for name, with_reset in asked if with_reset}
            assert kernels == {"_mlstm_fwd_kernel", "_mlstm_bwd_dstate_kernel", "_mlstm_bwd_kernel"}
    assert verdicts[0] == (None, None)
    assert verdicts[1][0] is None and "spills" in verdicts[1][1]
