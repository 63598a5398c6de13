"""The chunk-state recurrence with its hand-written backward against the plain autograd loop (float64)."""

import pytest
import torch

from seqzoo.errors import InputError
from seqzoo.ops.chunk_states import chunk_states, reference_chunk_states

# (state shape, decay's trailing shape): mLSTM C (scalar per head), mLSTM n, GateLoop (one decay per key dim), full
CASES = [((5, 3), (1, 1)), ((5,), (1,)), ((5, 3), (5, 1)), ((5, 3), (5, 3))]


def _inputs(state, dshape, N=6, B=2, H=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    decay = torch.rand(B, H, N, *dshape, generator=g, dtype=torch.float64)
    U = torch.randn(B, H, N, *state, generator=g, dtype=torch.float64)
    Z0 = torch.randn(B, H, *state, generator=g, dtype=torch.float64)
    return [t.requires_grad_() for t in (decay, U, Z0)]


@pytest.mark.parametrize("state,dshape", CASES)
@pytest.mark.parametrize("use", ["both", "starts", "final"])
def test_matches_reference_values_and_gradients(state, dshape, use):
    fast_in = _inputs(state, dshape)
    ref_in = [t.detach().clone().requires_grad_() for t in fast_in]
    w_s = torch.randn(fast_in[1].shape, dtype=torch.float64)
    w_f = torch.randn(fast_in[2].shape, dtype=torch.float64)
    for fn, inputs in ((chunk_states, fast_in), (reference_chunk_states, ref_in)):
        starts, final = fn(*inputs)
        loss = {
            "both": (starts * w_s).sum() + (final * w_f).sum(),
            "starts": (starts * w_s).sum(),
            "final": (final * w_f).sum(),
        }[use]
        loss.backward()
        inputs.append((starts.detach(), final.detach()))
    (fs, ff), (rs, rf) = fast_in[3], ref_in[3]
    torch.testing.assert_close(fs, rs, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ff, rf, rtol=1e-12, atol=1e-12)
    for name, a, b in zip(("decay", "U", "Z0"), fast_in[:3], ref_in[:3]):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12, msg=f"grad {name}")


@pytest.mark.parametrize("state,dshape", CASES[:3])
def test_gradcheck(state, dshape):
    inputs = _inputs(state, dshape, N=3, B=1, H=2, seed=1)
    assert torch.autograd.gradcheck(chunk_states, inputs)


def test_one_chunk_and_no_grad_for_the_incoming_state():
    decay, U, Z0 = _inputs((4, 2), (1, 1), N=1)
    Z0 = Z0.detach()
    starts, final = chunk_states(decay, U, Z0)
    torch.testing.assert_close(starts[:, :, 0], Z0)
    torch.testing.assert_close(final, decay[:, :, 0] * Z0 + U[:, :, 0])
    final.sum().backward()
    assert U.grad is not None and decay.grad is not None


@pytest.mark.parametrize(
    "shapes,match",
    [
        (((2, 3, 4, 1, 1), (2, 3, 4, 5, 6), (2, 3, 5, 7)), "Z0 must have shape"),
        (((2, 3, 4, 2, 1), (2, 3, 4, 5, 6), (2, 3, 5, 6)), "decay must have shape"),
        (((2, 3, 1, 1, 1), (2, 3, 4, 5, 6), (2, 3, 5, 6)), "decay must have shape"),
        (((2, 3, 4), (2, 3, 4), (2, 3)), "U must have shape"),
    ],
)
def test_bad_shapes_are_refused(shapes, match):
    with pytest.raises(InputError, match=match):
        chunk_states(*(torch.zeros(s) for s in shapes))


def test_mixed_dtypes_are_refused():
    with pytest.raises(InputError, match="share a dtype"):
        chunk_states(
            torch.zeros(1, 1, 2, 1, 1), torch.zeros(1, 1, 2, 3, 3, dtype=torch.float64), torch.zeros(1, 1, 3, 3)
        )


@pytest.mark.parametrize("block", [1, 7, 1 << 18])  # one row per pass, passes with a remainder, all rows at once
def test_scalar_decay_gradient_in_row_blocks(monkeypatch, block):
    """The scalar decay's gradient Σ G ⊙ Z is summed over blocks of rows (``_row_dots``): any block size gives the
    reference's gradient."""
    from seqzoo.ops import chunk_states as cs

    monkeypatch.setattr(cs, "_DOT_BLOCK_ELEMENTS", block)
    fast_in = _inputs((4, 3), (1, 1), N=5)
    ref_in = [t.detach().clone().requires_grad_() for t in fast_in]
    w = torch.randn(fast_in[1].shape, dtype=torch.float64)
    (cs.chunk_states(*fast_in)[0] * w).sum().backward()
    (reference_chunk_states(*ref_in)[0] * w).sum().backward()
    torch.testing.assert_close(fast_in[0].grad, ref_in[0].grad, rtol=1e-12, atol=1e-12)
