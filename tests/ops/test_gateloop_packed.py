"""Packed documents in the GateLoop op (``segment_pos``, 0 where a document starts): every mode equals each document
run alone through the fp64 loop, the first piece of a row (before its first start) continuing the carried state and
every later document a fresh stream. Compared: outputs, the final state (the last document's), and the gradients of
q, k, v, log|a|, θ and the initial state, in float64; complex and real transitions, general and max heads, starts at
chunk edges and inside chunks, one-token documents, batch > 1 with different starts per row. Also: a split anywhere
with the state carried equals the whole, a packed prefill continued step by step across a start, the hierarchical
scores with starts against their pairwise reference (both implementations), the property test over drawn
document lengths, the Triton kernels (forward and both backwards, float32, the interpreter off CUDA), and the
softmax variant (materialised scores, the blocked form with its C and PyTorch passes,
a cache continued across starts). Closeness: ``tests/helpers.py``.
"""

import pytest
import torch
import torch.nn.functional as F
from helpers import DEV, assert_close, needs_triton, outputs_and_grads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packed_helpers import document_pieces

from seqzoo.errors import InputError
from seqzoo.mixers.gateloop_softmax import softmax_gateloop_attention
from seqzoo.ops.gateloop import gateloop, scores_native
from seqzoo.ops.gateloop import softmax as softmax_mod
from seqzoo.ops.gateloop.naive import gateloop_naive
from seqzoo.ops.gateloop.scores import decayed_scores, decayed_scores_naive

needs_c = pytest.mark.skipif(scores_native.unavailable() is not None, reason="no C compiler builds scores.c")
IMPLS = [pytest.param(False, id="matmul"), pytest.param(True, id="native", marks=needs_c)]

# (mode, chunk_size): every mode that takes segment_pos; chunks of 4 put starts at chunk edges (4, 8, 12) and
# inside chunks, 5 pads every chunk to 8 tokens
MODES = [
    ("naive", 64),
    ("hillis_steele", 64),
    ("blelloch", 64),
    ("two_level", 64),
    ("attention", 64),
    ("chunkwise", 4),
    ("chunkwise", 5),
    ("chunkwise", 64),
]
# per row of the batch: the positions inside the current document. Row 0 starts a document at t = 0 (the carried
# state is ignored), at a chunk edge (4, 8) and inside a chunk (10); row 1 continues the carried state for 2 tokens,
# then has one-token documents (2, 3) and a last one-token document (12); row 2 has no start (all continuation)
SEGMENTS = [
    [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 0, 1, 2],
    [5, 6, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 0],
    list(range(3, 16)),
]


def inputs(B, T, H, K, V, real, state=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    q, k, v = r(B, T, H, K), r(B, T, H, K), r(B, T, H, V)
    log_mag = F.logsigmoid(1 + 2 * r(B, T, H, K))
    phase = None if real else r(B, T, H, K)
    S0 = torch.complex(r(B, H, K, V), r(B, H, K, V)) if state else None
    return [q, k, v, log_mag, phase, S0]


def separate(q, k, v, log_mag, phase, S0, segment_pos):
    """Each row cut at its starts; the piece before the first start continues S0 (if any), every document after a
    start runs alone from a zero state through the fp64 loop (no segment_pos): y and the last document's state."""
    B, T, H, K = q.shape
    ys, finals = [], []
    for b in range(B):
        S = None if S0 is None or segment_pos[b, 0] == 0 else S0[b : b + 1]
        row = []
        for t0, t1 in document_pieces(segment_pos[b]):
            piece = [None if x is None else x[b : b + 1, t0:t1] for x in (q, k, v, log_mag, phase)]
            y, S = gateloop_naive(*piece, S if t0 == 0 else None)
            row.append(y)
        ys.append(torch.cat(row, 1))
        finals.append(S)
    return torch.cat(ys, 0), torch.cat(finals, 0)


def check_packed_equals_separate(args, segment_pos, mode, chunk_size, tol=1e-10):
    ref = outputs_and_grads(lambda *a: separate(*a, segment_pos), args)
    got = outputs_and_grads(lambda *a: gateloop(*a, mode=mode, chunk_size=chunk_size, segment_pos=segment_pos), args)
    assert_close(got[0], ref[0], tol, name=f"{mode} y")
    assert_close(got[1], ref[1], tol, name=f"{mode} final state")
    names = [n for n, t in zip(("q", "k", "v", "log_mag", "phase", "S0"), args) if t is not None]
    for name, a, b in zip(names, got[2], ref[2]):
        assert_close(a, b, tol, name=f"{mode} d{name}")


@pytest.mark.parametrize("mode,chunk_size", MODES)
@pytest.mark.parametrize("heads", ["general", "max"])
@pytest.mark.parametrize("real", [False, True], ids=["complex", "real"])
@pytest.mark.parametrize("state", [True, False], ids=["S0", "fresh"])
def test_packed_equals_separate(mode, chunk_size, heads, real, state):
    H, K, V = (2, 3, 2) if heads == "general" else (4, 1, 1)
    args = inputs(3, 13, H, K, V, real, state)
    check_packed_equals_separate(args, torch.tensor(SEGMENTS), mode, chunk_size)


def test_torch_hop_scan_takes_starts():
    pytest.importorskip("torch._higher_order_ops.associative_scan")
    args = inputs(3, 13, 2, 2, 2, real=False)
    check_packed_equals_separate(args, torch.tensor(SEGMENTS), "torch_hop", 64)


@pytest.mark.parametrize("mode,chunk_size", [("chunkwise", 4), ("attention", 64), ("blelloch", 64)])
def test_a_start_discards_an_extreme_past(mode, chunk_size):
    """Before the start: |a| = 1 with huge values (no decay at all), so a leak of any size would show."""
    args = inputs(2, 12, 2, 2, 2, real=False)
    args[1] = args[1].clone()
    args[1][:, :6] *= 1e6
    args[3] = args[3].clone()
    args[3][:, :6] = 0.0  # log|a| = 0
    seg = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]] * 2)
    y, S = gateloop(*args, mode=mode, chunk_size=chunk_size, segment_pos=seg)
    y2, S2 = gateloop(*(None if t is None else t[:, 6:] for t in args[:5]), mode="naive")
    assert_close(y[:, 6:], y2, 1e-12)
    assert_close(S, S2, 1e-12)


@pytest.mark.parametrize("mode,chunk_size", MODES)
@pytest.mark.parametrize("split", [1, 3, 4, 8, 12])
def test_split_anywhere_equals_whole(mode, chunk_size, split):
    args = inputs(3, 13, 2, 2, 3, real=False)
    seg = torch.tensor(SEGMENTS)
    y, S = gateloop(*args, mode=mode, chunk_size=chunk_size, segment_pos=seg)
    first = [None if t is None else t[:, :split] for t in args[:5]]
    second = [None if t is None else t[:, split:] for t in args[:5]]
    y1, S1 = gateloop(*first, args[5], mode=mode, chunk_size=chunk_size, segment_pos=seg[:, :split])
    y2, S2 = gateloop(*second, S1, mode=mode, chunk_size=chunk_size, segment_pos=seg[:, split:])
    assert_close(torch.cat([y1, y2], 1), y, 1e-12)
    assert_close(S2, S, 1e-12)


@pytest.mark.parametrize("prefill_mode", ["chunkwise", "attention", "blelloch"])
def test_packed_prefill_continued_step_by_step_across_a_start(prefill_mode):
    args = inputs(3, 13, 2, 3, 2, real=False)
    seg = torch.tensor(SEGMENTS)
    y, S = gateloop(*args, mode="chunkwise", chunk_size=4, segment_pos=seg)
    P = 6  # row 0 then starts a document at 8 and 10, row 1 continues the one that started at 4
    ys = [gateloop(*(t[:, :P] for t in args[:5]), args[5], mode=prefill_mode, chunk_size=4, segment_pos=seg[:, :P])]
    state = ys[0][1]
    for t in range(P, 13):
        y_t, state = gateloop(*(x[:, t : t + 1] for x in args[:5]), state, segment_pos=seg[:, t : t + 1])
        ys.append((y_t, state))
    assert_close(torch.cat([o[0] for o in ys], 1), y, 1e-12)
    assert_close(state, S, 1e-12)


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("P", [2, 4, 8, 16, 128])
@pytest.mark.parametrize("upper", [0.0, float("-inf")])
def test_decayed_scores_with_starts_equal_pairwise_reference(P, native, upper):
    """Values and the hand-written backward (both implementations) against autograd through the pairwise scores."""
    g = torch.Generator().manual_seed(P)
    q, k = (torch.randn(3, P, 2, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    lam = F.logsigmoid(torch.randn(3, P, 3, generator=g, dtype=torch.float64)).requires_grad_(True)
    starts = torch.rand(3, P, generator=g) < 0.3
    starts[1, P // 2] = True  # a start at the top-level midpoint
    starts[2] = False
    dA = torch.randn(3, P, P, generator=g, dtype=torch.float64).tril()
    A = decayed_scores(q, k, lam, upper=upper, native=native, starts=starts)
    ref = decayed_scores_naive(q, k, lam, starts=starts)
    cross = (starts.cumsum(-1)[..., :, None] != starts.cumsum(-1)[..., None, :]).tril()
    if upper == 0.0:
        assert_close(A.tril(), ref, 1e-13)
    else:
        assert bool((A[cross] == upper).all())
        assert_close(A.tril().masked_fill(cross, 0.0), ref, 1e-13)
    keep = (~cross).tril().double()
    got = torch.autograd.grad((A.masked_fill(cross, 0.0).tril() * dA * keep).sum(), (q, k, lam))
    want = torch.autograd.grad((ref * dA * keep).sum(), (q, k, lam))
    for name, a, b in zip(("dq", "dk", "dlam"), got, want):
        assert_close(a, b, 1e-12, name=f"P={P} {name}")


@st.composite
def packed_rows(draw):
    """Document lengths per row (the first piece may continue the carried state) and a split point."""
    B = draw(st.integers(1, 3))
    T = draw(st.integers(1, 24))
    rows = []
    for _ in range(B):
        seg, t = [], 0
        offset = draw(st.sampled_from([0, 3]))  # 3: the row starts inside a document (continues the state)
        while t < T:
            n = draw(st.integers(1, T - t))
            seg += [offset + i for i in range(n)]
            t, offset = t + n, 0
        rows.append(seg)
    return torch.tensor(rows), draw(st.integers(1, T)), draw(st.sampled_from([1, 3, 4, 8]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(packed_rows(), st.booleans())
def test_property_packed_equals_separate_and_split_equals_whole(drawn, real):
    seg, split, C = drawn
    B, T = seg.shape
    args = inputs(B, T, 2, 2, 2, real, state=True, seed=T)
    y_ref, S_ref = separate(*args, seg)
    for mode in ("chunkwise", "blelloch", "attention"):
        y, S = gateloop(*args, mode=mode, chunk_size=C, segment_pos=seg)
        assert_close(y, y_ref, 1e-10, name=f"{mode} y")
        assert_close(S, S_ref, 1e-10, name=f"{mode} S")
    y1, S1 = gateloop(*(None if t is None else t[:, :split] for t in args[:5]), args[5], mode="chunkwise",
                      chunk_size=C, segment_pos=seg[:, :split])  # fmt: skip
    if split < T:
        y2, S1 = gateloop(*(None if t is None else t[:, split:] for t in args[:5]), S1, mode="chunkwise",
                          chunk_size=C, segment_pos=seg[:, split:])  # fmt: skip
        y1 = torch.cat([y1, y2], 1)
    assert_close(y1, y_ref, 1e-10, name="split y")
    assert_close(S1, S_ref, 1e-10, name="split S")


def test_fp32_chunkwise_with_many_documents_stays_close_to_fp64():
    """Long rows of many documents in float32: restarted sums, no huge exponent summed (T = 2048, C = 64)."""
    g = torch.Generator().manual_seed(1)
    B, T, H, K, V = 1, 2048, 2, 4, 4
    args = inputs(B, T, H, K, V, real=False, state=False, seed=1)
    args[3] = F.logsigmoid(6 + torch.randn(B, T, H, K, generator=g, dtype=torch.float64))  # slow decays
    seg = torch.tensor([[t % 97 for t in range(T)]])
    y64, S64 = gateloop(*args, mode="chunkwise", segment_pos=seg)
    y32, S32 = gateloop(*(None if t is None else t.float() for t in args[:5]), mode="chunkwise", segment_pos=seg)
    assert_close(y32, y64, 1e-4)
    assert_close(S32, S64, 1e-4)


@pytest.mark.parametrize(
    "bad", [torch.zeros(3, 12, dtype=torch.long), torch.zeros(3, 13), torch.zeros(3, 13, dtype=torch.bool)]
)
def test_bad_segment_pos_is_refused(bad):
    args = inputs(3, 13, 2, 2, 2, real=False)
    with pytest.raises(InputError, match="segment_pos"):
        gateloop(*args, mode="chunkwise", segment_pos=bad)


def test_modes_without_starts_refuse_segment_pos():
    args = inputs(1, 4, 1, 1, 1, real=False)
    with pytest.raises(InputError, match="segment_pos"):
        gateloop(*args, mode="naive_unsafe", segment_pos=torch.zeros(1, 4, dtype=torch.long))


# ---------------------------------------------------------------------------------------------------- Triton
# two rows of 37 tokens in tiles of 16: starts at 0, at tile edges (16, 32), inside tiles, a one-token document
# (19) and one at the end (36); row 1 continues the carried state, then starts at 5 and 6 (one token) and 23
TRITON_STARTS = [[0, 4, 16, 19, 20, 32, 36], [5, 6, 23]]


def triton_segments(T=37):
    rows = []
    for starts in TRITON_STARTS:
        row = torch.arange(T) + 3
        for t in starts:
            row[t:] = torch.arange(T - t)
        rows.append(row)
    return torch.stack(rows)


def on_device(args):
    return [None if t is None else t.float().to(DEV) if not t.is_complex() else t.to(torch.complex64).to(DEV)
            for t in args]  # fmt: skip


@needs_triton
@pytest.mark.parametrize("heads", ["general", "max"])
@pytest.mark.parametrize("real", [False, True], ids=["complex", "real"])
@pytest.mark.parametrize("state", [True, False], ids=["S0", "fresh"])
def test_triton_packed_equals_separate(heads, real, state):
    """The kernels (forward and backward, the interpreter off CUDA) in float32 against each document alone through
    the float64 loop: y, the last document's state, the gradients of every input."""
    H, K, V = (1, 3, 4) if heads == "general" else (2, 1, 1)
    args = inputs(2, 37, H, K, V, real, state, seed=5)
    seg = triton_segments()
    ref = outputs_and_grads(lambda *a: separate(*a, seg), args)
    got = outputs_and_grads(
        lambda *a: gateloop(*a, mode="triton", chunk_size=16, segment_pos=seg.to(DEV)), on_device(args)
    )
    assert_close(got[0], ref[0], 1e-5, name="y")
    assert_close(got[1], ref[1], 1e-5, name="final state")
    names = [n for n, t in zip(("q", "k", "v", "log_mag", "phase", "S0"), args) if t is not None]
    for name, a, b in zip(names, got[2], ref[2]):
        assert_close(a, b, 1e-5, name=f"d{name}")


@needs_triton
def test_triton_torch_backward_takes_starts():
    """``gla_triton(backward="torch")`` recomputes through the PyTorch chunkwise path with the same starts."""
    from seqzoo.ops.gateloop.triton import gla_triton

    q, k, v, log_a, _, _ = on_device(inputs(2, 37, 1, 3, 4, real=True, state=False, seed=6))
    starts = (triton_segments() == 0).to(DEV)
    grads = []
    for backward in ("triton", "torch"):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v, log_a)]
        y, S = gla_triton(*leaves, None, 16, backward=backward, starts=starts)
        grads.append(torch.autograd.grad((y * y).sum() + S.sum(), leaves))
    for a, b in zip(*grads):
        assert_close(a, b, 1e-5)


@needs_triton
@pytest.mark.parametrize("split", [5, 16, 20])
def test_triton_split_equals_whole(split):
    args = on_device(inputs(2, 37, 1, 2, 3, real=False, seed=7))
    seg = triton_segments().to(DEV)
    y, S = gateloop(*args, mode="triton", chunk_size=16, segment_pos=seg)
    y1, S1 = gateloop(*(t[:, :split] for t in args[:5]), args[5], mode="triton", chunk_size=16,
                      segment_pos=seg[:, :split])  # fmt: skip
    y2, S2 = gateloop(*(t[:, split:] for t in args[:5]), S1, mode="triton", chunk_size=16, segment_pos=seg[:, split:])
    assert_close(torch.cat([y1, y2], 1), y, 1e-5)
    assert_close(S2, S, 1e-5)


# ---------------------------------------------------------------------------------------------- the softmax variant
def softmax_separate(q, k, v, log_mag, phase, segment_pos, scale=0.5):
    """Each document of each row alone (no cache, no segment_pos) through the softmax variant."""
    B, T = q.shape[:2]
    rows = []
    for b in range(B):
        pieces = [
            softmax_gateloop_attention(*(x[b : b + 1, t0:t1] for x in (q, k, v, log_mag, phase)), None, scale)[0]
            for t0, t1 in document_pieces(segment_pos[b])
        ]
        rows.append(torch.cat(pieces, 1))
    return torch.cat(rows, 0)


def softmax_packed_seg(T):
    """Three rows of T tokens: starts at 32 and 64 (block and level edges), T // 2 + 3 (inside a block), a one-token
    document, and a row without starts."""
    rows = torch.stack([torch.arange(T) + 2] * 3)
    for t in (32, 64, T // 2 + 3, T // 2 + 4, T - 1):
        rows[0, t:] = torch.arange(T - t)
    for t in (0, 5, 6, 100 % T):
        rows[1, t:] = torch.arange(T - t)
    return rows


@pytest.mark.parametrize("T,native", [(13, True), (150, True), (150, False), (256, True)])
def test_softmax_variant_packed_equals_separate(T, native, monkeypatch):
    """T = 13: the materialised scores; T > 128: the blocked form (diagonal blocks of 32, fused levels), with its
    C passes (native) and its PyTorch passes; outputs and the gradients of q, k, v, log|a|, θ in float64."""
    monkeypatch.setattr(softmax_mod, "_NATIVE_LEVELS", native)
    seg = torch.tensor(SEGMENTS) if T == 13 else softmax_packed_seg(T)
    args = inputs(3, T, 2, 3, 2, real=False, state=False, seed=T)[:5]
    args[3] = F.logsigmoid(4 + args[3])  # slow decays: documents see far back
    leaves = [t.clone().requires_grad_(True) for t in args]
    y = softmax_gateloop_attention(*leaves, None, 0.5, seg)[0]
    ref_leaves = [t.clone().requires_grad_(True) for t in args]
    ref = softmax_separate(*ref_leaves, seg)
    assert_close(y, ref, 1e-10)
    w = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    got = torch.autograd.grad((y * w).sum(), leaves)
    want = torch.autograd.grad((ref * w).sum(), ref_leaves)
    for name, a, b in zip(("q", "k", "v", "log_mag", "phase"), got, want):
        assert_close(a, b, 1e-10, name=f"d{name}")


@pytest.mark.parametrize("prefill_seg", [True, False])
def test_softmax_variant_packed_prefill_continued_step_by_step(prefill_seg):
    """The cache keeps each key's document: a prefill (packed, or plain) continued token by token across starts
    equals the whole packed call."""
    args = inputs(3, 13, 2, 3, 2, real=False, state=False)[:5]
    seg = torch.tensor(SEGMENTS)
    y, _ = softmax_gateloop_attention(*args, None, 0.5, seg)
    P = 6 if prefill_seg else 2  # row 1's first start is at 2: a plain prefill of 2 tokens is one document
    ys = []
    out, cache = softmax_gateloop_attention(*(t[:, :P] for t in args), None, 0.5, seg[:, :P] if prefill_seg else None)
    ys.append(out)
    if not prefill_seg:  # rows 0 and 2 have no start in 0..1 and row 1 continues: equal to the packed prefill
        assert_close(out, y[:, :P], 1e-12)
    for t in range(P, 13):
        out, cache = softmax_gateloop_attention(*(x[:, t : t + 1] for x in args), cache, 0.5, seg[:, t : t + 1])
        ys.append(out)
    assert_close(torch.cat(ys, 1), y, 1e-12)
