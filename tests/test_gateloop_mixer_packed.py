"""Packed documents through the GateLoop mixers (``segment_pos``): every mode of ``gateloop`` and the softmax variant
equal each document run alone as a fresh stream (outputs, the last document's state, the gradients of x, the
carried state and every parameter, float64), for all transitions and head layouts; a packed prefill continued token
by token across a start equals the whole; the chunkwise mode on the Triton kernel takes segment_pos."""

import pytest
import torch
from helpers import DEV, assert_close, needs_triton
from packed_helpers import document_pieces

from seqzoo.kernels import use_kernels
from seqzoo.mixers import build_mixer

# row 0 starts at 0 (a carried state is ignored), at 5 (a chunk edge, C = 5) and at 8 (inside a chunk), with a
# one-token document at 12; row 1 continues the carried state for 3 tokens, then two documents
SEGMENTS = torch.tensor(
    [[0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 2, 3, 0, 0, 1, 2, 3], [4, 5, 6, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5]]
)
CONFIGS = {
    "maxhead": {},
    "heads": {"n_heads": 2, "d_qk": 6, "d_v": 8},
    "heads_outproj": {"n_heads": 3, "d_qk": 6, "d_v": 9},
}


def make(name="gateloop", **kw):
    torch.manual_seed(0)
    m = build_mixer(name, d_model=8, chunk_size=5, **kw).double()
    if getattr(m, "gamma_proj", None) is not None:
        with torch.no_grad():
            m.gamma_proj.bias.add_(2.0)  # slow decays: a leak across a start would be large
    return m


def separate(m, x, state, mode):
    """Each row cut at its starts: the piece before the first start continues ``state``, every document after a
    start runs alone as a fresh stream. Returns y and the last document's state (None for the softmax cache)."""
    ys, finals = [], []
    for b in range(x.shape[0]):
        s = None if state is None or SEGMENTS[b, 0] == 0 else state[b : b + 1]
        row = []
        for t0, t1 in document_pieces(SEGMENTS[b]):
            y, s = m(x[b : b + 1, t0:t1], state=s if t0 == 0 else None, mode=mode)
            row.append(y)
        ys.append(torch.cat(row, 1))
        finals.append(s)
    return torch.cat(ys, 0), (torch.cat(finals, 0) if isinstance(finals[0], torch.Tensor) else None)


def run_and_grads(m, fn, x, state):
    m.zero_grad()
    xx = x.clone().requires_grad_(True)
    s0 = None if state is None else state.clone().requires_grad_(True)
    y, S = fn(xx, s0)
    loss = (y * torch.cos(torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape))).sum()
    if S is not None:
        loss = loss + (S.real * 0.3 - S.imag * 0.7).sum()
    loss.backward()
    grads = [xx.grad] + ([] if s0 is None else [s0.grad]) + [p.grad.clone() for p in m.parameters() if p.requires_grad]
    return y.detach(), None if S is None else S.detach(), grads


@pytest.mark.parametrize("mode", ["recurrent", "scan", "chunkwise", "attention"])
@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("transition", ["data", "fixed", "real", "retnet"])
def test_gateloop_mixer_packed_equals_separate(mode, cfg, transition):
    m = make(transition=transition, **CONFIGS[cfg])
    x = torch.randn(2, 17, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    S0 = torch.randn(*m.state_shape(2), dtype=torch.complex128, generator=torch.Generator().manual_seed(2))
    got = run_and_grads(m, lambda xx, s: m(xx, state=s, mode=mode, segment_pos=SEGMENTS), x, S0)
    ref = run_and_grads(m, lambda xx, s: separate(m, xx, s, "recurrent"), x, S0)
    assert_close(got[0], ref[0], 1e-10, name="y")
    assert_close(got[1], ref[1], 1e-10, name="final state")
    for i, (a, b) in enumerate(zip(got[2], ref[2])):
        assert_close(a, b, 1e-9, name=f"gradient {i}")


def test_gateloop_softmax_mixer_packed_equals_separate():
    m = make("gateloop_softmax", n_heads=2)
    x = torch.randn(2, 17, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    got = run_and_grads(m, lambda xx, s: (m(xx, segment_pos=SEGMENTS)[0], None), x, None)
    ref = run_and_grads(m, lambda xx, s: (separate(m, xx, None, "attention")[0], None), x, None)
    assert_close(got[0], ref[0], 1e-10, name="y")
    for i, (a, b) in enumerate(zip(got[2], ref[2])):
        assert_close(a, b, 1e-9, name=f"gradient {i}")


@pytest.mark.parametrize(
    "name,prefill_mode", [("gateloop", "chunkwise"), ("gateloop", "scan"), ("gateloop_softmax", None)]
)
def test_packed_prefill_continued_step_by_step(name, prefill_mode):
    m = make(name, n_heads=2)
    x = torch.randn(2, 17, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    with torch.no_grad():
        y, _ = m(x, segment_pos=SEGMENTS)
        P = 7  # the steps cross the starts at 8, 11, 12 and 13
        out, s = m(x[:, :P], mode=prefill_mode, segment_pos=SEGMENTS[:, :P])
        ys = [out]
        for t in range(P, 17):
            out, s = m(x[:, t : t + 1], state=s, segment_pos=SEGMENTS[:, t : t + 1])
            ys.append(out)
    assert_close(torch.cat(ys, 1), y, 1e-12)


@needs_triton
def test_chunkwise_mode_on_the_triton_kernel_takes_segment_pos():
    """Under the kernels switch's ``triton`` the chunkwise mode runs the kernel (the interpreter off CUDA) with
    segment_pos: float32 against each document alone in float64."""
    m = make(n_heads=2, d_qk=8, d_v=8)
    m.chunk_size = 16
    x = torch.randn(2, 17, 8, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    S0 = torch.randn(*m.state_shape(2), dtype=torch.complex128, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        y_ref, S_ref = separate(m, x, S0, "recurrent")
        m32 = m.float().to(DEV)
        with use_kernels("triton"):
            y, S = m32(x.float().to(DEV), state=S0.to(torch.complex64).to(DEV), mode="chunkwise",
                       segment_pos=SEGMENTS.to(DEV))  # fmt: skip
    assert_close(y, y_ref, 1e-5)
    assert_close(S, S_ref, 1e-5)
