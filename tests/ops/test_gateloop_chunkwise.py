"""GateLoop chunkwise and surrogate-attention forms (seqzoo/ops/gateloop/chunkwise.py, attention.py, scores.py)
against the fp64 per-token loop ``gateloop_naive``: outputs, final states, gradients of q, k, v, log|a|, θ and the
initial state; odd T and chunk sizes that are not powers of two (padding); carried states; fp32 at T = 4096 with
strong decays (log|a| down to -1e4) without overflow or NaN. The hierarchical score matrix against its pairwise
reference, through both of its implementations (the matmul levels and the C loop of scores_native.py). Closeness:
``tests/helpers.py``.
"""

import json

import pytest
import torch
import torch.nn.functional as F
from helpers import GRAD_SCALE, assert_close, outputs_and_grads
from native_libs import needs_built

from seqzoo.bench.gateloop_chunkwise import main as bench_main
from seqzoo.errors import InputError
from seqzoo.mixers.gateloop_softmax import softmax_gateloop_attention
from seqzoo.ops.gateloop import scores_native
from seqzoo.ops.gateloop.attention import gateloop_attention, relative_scores
from seqzoo.ops.gateloop.chunkwise import gateloop_chunkwise
from seqzoo.ops.gateloop.common import rotating_frame
from seqzoo.ops.gateloop.naive import gateloop_naive
from seqzoo.ops.gateloop.scores import decayed_scores, decayed_scores_naive

needs_c = needs_built(scores_native._LIB)
# the two implementations of decayed_scores: the matmul levels, and the C loop (where a compiler builds it)
IMPLS = [pytest.param(False, id="matmul"), pytest.param(True, id="native", marks=needs_c)]


def make(B=2, T=37, H=3, K=4, V=5, dtype=torch.float64, seed=0, state=True, real=False, pre=None):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    q, k, v = r(B, T, H, K), r(B, T, H, K), r(B, T, H, V)
    log_mag = F.logsigmoid(1 + 2 * r(B, T, H, K) if pre is None else pre(r(B, T, H, K)))
    phase = None if real else r(B, T, H, K)
    S0 = torch.complex(r(B, H, K, V), r(B, H, K, V)) if state else None
    cd = torch.complex128 if dtype == torch.float64 else torch.complex64
    return [None if t is None else t.to(cd if t.is_complex() else dtype) for t in (q, k, v, log_mag, phase, S0)]


def chunkwise(C):
    return lambda *a: gateloop_chunkwise(*a, chunk_size=C)


FORMS = {f"chunkwise C={C}": chunkwise(C) for C in (5, 8, 16, 64)} | {"attention": gateloop_attention}


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("P", [1, 2, 4, 8, 16, 64])  # 1, 2, 4: shorter than one vector of the C loop
@pytest.mark.parametrize("R", [1, 2, 3])  # 3: the C backward's odd r
def test_decayed_scores_equal_pairwise_reference(P, R, native):
    g = torch.Generator().manual_seed(P + R)
    q, k = (torch.randn(3, P, R, 5, generator=g, dtype=torch.float64) for _ in range(2))
    lam = F.logsigmoid(3 * torch.randn(3, P, 5, generator=g, dtype=torch.float64))
    assert_close(decayed_scores(q, k, lam, native=native), decayed_scores_naive(q, k, lam), 1e-13)


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("P", [1, 2, 4, 8, 16, 64, 128])  # 128: the float64 cumulative sums beyond 64 tokens
@pytest.mark.parametrize("R", [2, 3])
def test_decayed_scores_hand_written_backward_equals_autograd_of_the_reference(P, R, native):
    g = torch.Generator().manual_seed(P)
    q, k = (torch.randn(2, P, R, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    lam = F.logsigmoid(3 * torch.randn(2, P, 3, generator=g, dtype=torch.float64)).requires_grad_(True)
    dA = torch.randn(2, P, P, generator=g, dtype=torch.float64).tril()  # entries above the diagonal are constants
    got = torch.autograd.grad((decayed_scores(q, k, lam, native=native) * dA).sum(), (q, k, lam))
    ref = torch.autograd.grad((decayed_scores_naive(q, k, lam) * dA).sum(), (q, k, lam))
    for name, a, b in zip(("dq", "dk", "dlam"), got, ref):
        assert_close(a, b, 1e-12, name=f"P={P} {name}")
    if P <= 8:
        fn = lambda q, k, lam: decayed_scores(q, k, lam, native=native)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (q, k, lam), fast_mode=True)


@pytest.mark.parametrize("native", IMPLS)
def test_decayed_scores_strong_decay_fp32_finite_and_exact(native):
    # log|a| from -1e4 (a reset) to -1e-9 (|a| ≈ 1): an e^{b_τ}·e^{-b_σ} factorisation would overflow here
    g = torch.Generator().manual_seed(7)
    P, K = 64, 6
    q, k = (torch.randn(2, P, 2, K, generator=g, dtype=torch.float64) for _ in range(2))
    lam = -torch.exp(torch.empty(2, P, K, dtype=torch.float64).uniform_(-20, 9.3, generator=g))
    ref = decayed_scores_naive(q, k, lam)
    got = decayed_scores(q.float(), k.float(), lam.float(), native=native)
    assert_close(got, ref, 1e-5)
    with pytest.raises(InputError, match="power of two"):
        decayed_scores(q[:, :6], k[:, :6], lam[:, :6], native=native)


def test_long_block_scores_hold_no_subnormal_floats():
    """A block of 256 tokens in float32 with decays whose sums cross e^-87 (where float32 turns subnormal, and CPU
    arithmetic ~100x slower): no entry of A is subnormal (factors below e^-30 are set to 0 in half-blocks over 32
    tokens), and A stays within float32 rounding of the float64 pairwise reference."""
    g = torch.Generator().manual_seed(3)
    P, K = 256, 4
    q, k = (torch.randn(2, P, 2, K, generator=g, dtype=torch.float64) for _ in range(2))
    lam = -torch.empty(2, P, K, dtype=torch.float64).uniform_(0.2, 1.2, generator=g)  # sums reach -300
    ref = decayed_scores_naive(q, k, lam)
    assert ((ref != 0) & (ref.abs() < torch.finfo(torch.float32).tiny)).any()  # the reference does hold such values
    got = decayed_scores(q.float(), k.float(), lam.float())
    tiny = torch.finfo(torch.float32).tiny
    assert not ((got != 0) & (got.abs() < tiny)).any()
    assert_close(got, ref, 1e-5)


@pytest.mark.parametrize("T", [1, 63, 64, 65, 130, 20_000])
def test_rotation_is_exact_at_any_length(T):
    """cos Θ, sin Θ of Θ = cumsum θ to float32 rounding at any T (θ drifting by ~3 per step: |Σθ| reaches 6e4 at
    T = 20,000), the final angle wrapped into [-π, π); the gradient (float64 gradcheck) and the backward of a
    given output gradient: the reverse cumulative sum of cos Θ·d(sin Θ) - sin Θ·d(cos Θ)."""
    g = torch.Generator().manual_seed(T)
    phase = 3 + torch.randn(1, 2, T, 3, generator=g, dtype=torch.float64)
    q, k = (torch.randn(1, 2, T, 3, generator=g, dtype=torch.float64) for _ in range(2))
    for dtype, tol in ((torch.float64, 1e-9), (torch.float32, 3e-7)):  # 1e-9: the reference's own float64 sum
        # the reference from the same rounded inputs, summed in float64 over the whole sequence
        qr, kr, pr = (t.to(dtype).double() for t in (q, k, phase))
        ref = pr.cumsum(2)
        want = [torch.stack([x * torch.cos(ref), x * torch.sin(ref)], -2) for x in (qr, kr)]
        qh, kh, last = rotating_frame(q.to(dtype), k.to(dtype), phase.to(dtype))
        assert qh.dtype == kh.dtype == last.dtype == dtype and last.shape == (1, 2, 3)
        assert_close(qh.double(), want[0], tol)
        assert_close(kh.double(), want[1], tol)
        assert last.abs().max() <= torch.pi
        assert_close(torch.cos(last.double()), torch.cos(ref[:, :, -1]), tol)
        assert_close(torch.sin(last.double()), torch.sin(ref[:, :, -1]), tol)
    if T <= 130:
        leaf = phase.clone().requires_grad_(True)
        fn = lambda p: tuple(rotating_frame(q, k, p)[i] for i in (0, 2))  # noqa: E731
        assert torch.autograd.gradcheck(fn, (leaf,))
        gq = torch.randn(1, 2, T, 2, 3, generator=g, dtype=torch.float64)
        (got,) = torch.autograd.grad((rotating_frame(q, k, leaf)[0] * gq).sum(), leaf)
        ref = phase.cumsum(2)
        dtheta = (gq[..., 1, :] * torch.cos(ref) - gq[..., 0, :] * torch.sin(ref)) * q
        assert_close(got, dtheta.flip(2).cumsum(2).flip(2), 1e-10)


@pytest.mark.parametrize("T", [1, 7, 37, 100])
@pytest.mark.parametrize("real", [False, True], ids=["complex", "real"])
@pytest.mark.parametrize("state", [True, False], ids=["S0", "noS0"])
def test_fp64_outputs_states_gradients_equal_loop(T, real, state):
    args = make(T=T, real=real, state=state)
    y_ref, S_ref, g_ref = outputs_and_grads(gateloop_naive, args)
    for name, fn in FORMS.items():
        y, S, gr = outputs_and_grads(fn, args)
        assert y.dtype == torch.float64 and S.dtype == torch.complex128, name
        assert_close(y, y_ref, 1e-10, name=f"{name} y")
        assert_close(S, S_ref, 1e-10, name=f"{name} S")
        for i, (a, b) in enumerate(zip(gr, g_ref)):
            assert_close(a, b, 1e-10, scale=GRAD_SCALE, name=f"{name} grad {i}")


def test_gradcheck_chunkwise_with_padding():
    # T = 7 with C = 3: chunks padded to P = 4, the last chunk holds one token; complex S_0 as an input
    q, k, v, lm, ph, S0 = make(B=1, T=7, H=2, K=2, V=3, seed=3)
    pre = torch.logit(lm.exp())  # through the pre-activation, so log|a| stays <= 0

    def fn(q, k, v, pre, ph, S0):
        return gateloop_chunkwise(q, k, v, F.logsigmoid(pre), ph, S0, chunk_size=3)

    inputs = [t.clone().requires_grad_(True) for t in (q, k, v, pre, ph, S0)]
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5, fast_mode=True)


@pytest.mark.parametrize("name", list(FORMS))
def test_split_with_carried_state_equals_whole(name):
    fn = FORMS[name]
    q, k, v, lm, ph, S0 = make(T=41)
    y_whole, S_whole = fn(q, k, v, lm, ph, S0)
    for t in (1, 4, 5, 16, 17, 40):
        y1, S1 = fn(q[:, :t], k[:, :t], v[:, :t], lm[:, :t], ph[:, :t], S0)
        y2, S2 = fn(q[:, t:], k[:, t:], v[:, t:], lm[:, t:], ph[:, t:], S1)
        assert_close(torch.cat([y1, y2], 1), y_whole, 1e-12, name=f"y split at {t}")
        assert_close(S2, S_whole, 1e-12, name=f"S split at {t}")


def strong_decay(x):
    """γ̃ per key dim: resets (-1e4), strong decay (-40), |a| ≈ 0.5 and |a| ≈ 1 (+20), mixed along T."""
    centre = torch.tensor([-1e4, -40.0, 0.0, 20.0], dtype=x.dtype)
    return centre[torch.arange(x.shape[-1]) % 4] + x + torch.where(x > 2.3, -1e4, 0.0)


@pytest.mark.parametrize("name", ["chunkwise C=64", "attention"])
def test_fp32_long_strong_decay_no_overflow(name):
    T = 4096
    args64 = make(B=1, T=T, H=2, K=8, V=4, pre=strong_decay)
    assert float(args64[3].min()) <= -1e4 + 10  # resets are there
    y_ref, S_ref, g_ref = outputs_and_grads(gateloop_naive, args64)
    args32 = [t.float() if not t.is_complex() else t.to(torch.complex64) for t in args64]
    y, S, gr = outputs_and_grads(FORMS[name], args32)
    assert y.dtype == torch.float32 and S.dtype == torch.complex64
    assert_close(y, y_ref, 1e-4, name="y")
    assert_close(S, S_ref, 1e-4, name="S")
    for i, (a, b) in enumerate(zip(gr, g_ref)):
        assert_close(a, b, 1e-4, scale=GRAD_SCALE, name=f"grad {i}")


def test_relative_scores_equal_pairwise_formula():
    q, k, _, lm, ph, _ = make(T=19)
    A, L, Phi = relative_scores(q, k, lm, ph)
    E = L[:, :, None] - L[:, None, :]  # (B, Tn, Tm, H, K)
    W = torch.exp(E) * torch.cos(Phi[:, :, None] - Phi[:, None, :])
    ref = torch.einsum("bnhk,bmhk,bnmhk->bhnm", q, k, W) * torch.ones(19, 19, dtype=torch.float64).tril()
    assert_close(A, ref, 1e-12)


def test_softmax_scores_with_cache_equal_whole():
    q, k, v, lm, ph, _ = make(T=23, state=False)
    y_whole, _ = softmax_gateloop_attention(q, k, v, lm, ph, None)
    y1, cache = softmax_gateloop_attention(q[:, :9], k[:, :9], v[:, :9], lm[:, :9], ph[:, :9], None)
    ys = [y1]
    for t in range(9, 23, 7):
        y_t, cache = softmax_gateloop_attention(*(x[:, t : t + 7] for x in (q, k, v, lm, ph)), cache)
        ys.append(y_t)
    assert_close(torch.cat(ys, 1), y_whole, 1e-12)


def test_bad_chunk_size():
    args = make(T=5)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(InputError, match="chunk_size"):
            gateloop_chunkwise(*args, chunk_size=bad)


def test_op_benchmark_runs_at_tiny_size(tmp_path):
    # plumbing only (no timing is asserted): every contender runs and every ratio is reported
    out = tmp_path / "bench.json"
    assert bench_main(["--B", "1", "--T", "12", "--d-model", "8", "--n-heads", "2", "--chunk-size", "4", "--repeats", "1",
                 "--attention", "--out", str(out)]) == 0  # fmt: skip
    res = json.loads(out.read_text())
    assert set(res["fwdbwd_ms"]) == {"chunkwise", "loop", "mlstm", "attention"}
    for key in ("loop_over_chunkwise", "chunkwise_over_mlstm", "attention_over_chunkwise"):
        assert res[f"fwd_{key}"] > 0 and res[f"fwdbwd_{key}"] > 0
    assert res["mlstm_shape"]["K"] == 2 * res["shape"]["K"]


@needs_c
def test_native_scores_hold_no_subnormal_products(monkeypatch):
    """The C loop's running products of the factors, where their sums cross e^-87 (float32's subnormal range, where
    CPU arithmetic is ~100x slower): the products below e^-30 are set to 0 (no subnormal ever arises, so none is in
    A), A stays within float32 rounding of the float64 pairwise reference, and the flush is what keeps them out: with
    the threshold lowered to e^-120 the same scores do hold subnormal entries."""
    g = torch.Generator().manual_seed(3)
    P, K = 64, 1  # one dimension: an entry is one product, so a subnormal product shows in A
    q, k = (torch.ones(2, P, 2, K, dtype=torch.float64) + 0.1 * torch.randn(2, P, 2, K, generator=g) for _ in "qk")
    lam = -torch.empty(2, P, K, dtype=torch.float64).uniform_(1.0, 3.0, generator=g)  # sums reach -190
    ref = decayed_scores_naive(q, k, lam)
    tiny = torch.finfo(torch.float32).tiny
    assert ((ref != 0) & (ref.abs() < tiny)).any()
    subnormal = lambda A: ((A != 0) & (A.abs() < tiny)).any().item()  # noqa: E731
    got = decayed_scores(q.float(), k.float(), lam.float(), native=True)
    assert not subnormal(got)
    assert_close(got, ref, 1e-5)
    monkeypatch.setitem(scores_native._LOG_FLUSH, torch.float32, -120.0)
    assert subnormal(decayed_scores(q.float(), k.float(), lam.float(), native=True))


@needs_c
def test_decayed_scores_dispatch(monkeypatch):
    """Blocks up to NATIVE_UP_TO tokens of CPU float32 / float64 take the C loop, longer ones the matmul levels;
    native=True on operands it cannot take is an error naming why, not a silent fallback."""
    from seqzoo.ops.gateloop.scores import NATIVE_UP_TO

    calls = []
    real = scores_native.decayed_scores_native
    monkeypatch.setattr(scores_native, "decayed_scores_native", lambda *a: calls.append(a[0].shape[-3]) or real(*a))
    short, long = NATIVE_UP_TO, 2 * NATIVE_UP_TO
    q, lam = torch.randn(2, long, 2, 3), -torch.rand(2, long, 3)
    decayed_scores(q[:, :short], q[:, :short], lam[:, :short])
    decayed_scores(q, q, lam)
    decayed_scores(q[:, :short], q[:, :short], lam[:, :short], native=False)
    assert calls == [short]
    decayed_scores(q, q, lam, native=True)
    assert calls == [short, long]
    with pytest.raises(InputError, match="native=True needs CPU float32 / float64"):
        decayed_scores(q.bfloat16(), q.bfloat16(), lam.bfloat16(), native=True)
    assert decayed_scores(q.bfloat16(), q.bfloat16(), lam.bfloat16()).dtype == torch.bfloat16  # the matmul levels
    with pytest.raises(InputError, match="native must be None, True or False"):
        decayed_scores(q, q, lam, native="yes")


@needs_c
def test_native_scores_split_across_threads_equal_one_thread():
    """The blocks are split across PyTorch's intra-op threads (uneven shares: 7 blocks over 3 threads): the same
    scores and gradients, bit for bit, as one thread."""
    g = torch.Generator().manual_seed(5)
    q, k = (torch.randn(7, 16, 2, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in "qk")
    lam = F.logsigmoid(torch.randn(7, 16, 3, generator=g, dtype=torch.float64)).requires_grad_(True)
    dA = torch.randn(7, 16, 16, generator=g, dtype=torch.float64)
    threads = torch.get_num_threads()
    runs = []
    try:
        for n in (1, 3):
            torch.set_num_threads(n)
            A = decayed_scores(q, k, lam, native=True)
            runs.append((A, *torch.autograd.grad((A * dA).sum(), (q, k, lam))))
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(*runs):
        assert torch.equal(a, b)


@pytest.mark.parametrize("native", IMPLS)
def test_nan_decay_is_not_hidden(native):
    """A NaN decay (a diverged gate) reaches every score that depends on it, as in the reference: the flush of
    small factors must not turn it into a 0."""
    g = torch.Generator().manual_seed(11)
    q, k = (torch.randn(2, 16, 2, 3, generator=g) for _ in "qk")
    lam = -torch.rand(2, 16, 3, generator=g)
    lam[1, 5, 1] = float("nan")
    ref = decayed_scores_naive(q.double(), k.double(), lam.double())
    got = decayed_scores(q, k, lam, native=native)
    assert ref.isnan().any()
    assert got[ref.isnan()].isnan().all()
