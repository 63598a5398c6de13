"""FSDP2 wrapping hands no view tensor to FSDP2's backward hooks (seqzoo/train/distributed.py: _copy_view_outputs).

FSDP2 hooks its pre-backward all-gather onto every grad-requiring output of a sharded module; on a view an in-place
op drops the hook (wrong gradients), and PyTorch warns. Mixer states are often views (an attention cache keeps a
slice of the projected keys). The two-process run in tests/test_train.py fails on that warning; this file checks,
in one process and for every registered mixer, that the hook leaves no view and changes no value or gradient.
"""

import pytest
import torch

from seqzoo.mixers import MIXERS, build_mixer
from seqzoo.train.distributed import _copy_view_outputs

fsdp_utils = pytest.importorskip("torch.distributed.fsdp._common_utils")  # FSDP2's own walk over module outputs


def grad_views(output) -> list[torch.Tensor]:
    """The tensors FSDP2 would warn about: grad-requiring outputs that are views."""
    return [t for t in fsdp_utils.collect_grad_tensors(output) if t._base is not None]


def weighted_sum(output) -> torch.Tensor:
    """A scalar that depends on every grad-requiring output tensor, each with its own weight."""
    return sum((i + 1) * t.real.sum() for i, t in enumerate(fsdp_utils.collect_grad_tensors(output)))


def run(name):
    torch.manual_seed(0)
    cls = MIXERS[name]
    mixer = build_mixer(name, d_model=getattr(cls, "test_d_model", 16), **cls.test_kwargs).double()
    x = torch.randn(2, 13, mixer.d_model, dtype=torch.float64, requires_grad=True)
    return mixer, x, mixer(x)


def test_attention_state_is_a_view_without_the_hook():
    # the case FSDP2 warned about: without this the test below could pass without anything to fix
    _, _, output = run("attention")
    assert grad_views(output)


@pytest.mark.parametrize("name", sorted(MIXERS))
def test_hook_leaves_no_view_and_the_same_values_and_gradients(name):
    mixer, x, output = run(name)
    copied = _copy_view_outputs(mixer, (x,), output)
    assert not grad_views(copied)
    before, after = fsdp_utils.collect_grad_tensors(output), fsdp_utils.collect_grad_tensors(copied)
    assert len(before) == len(after)
    for a, b in zip(before, after):
        assert torch.equal(a, b)
    params = [x, *mixer.parameters()]
    want = torch.autograd.grad(weighted_sum(output), params, retain_graph=True, allow_unused=True)
    got = torch.autograd.grad(weighted_sum(copied), params, allow_unused=True)
    for w, g in zip(want, got):
        assert (w is None) == (g is None)
        if w is not None:
            assert torch.equal(w, g)


def test_without_grad_nothing_is_copied():
    mixer, x, _ = run("attention")
    with torch.no_grad():
        output = mixer(x)
    copied = _copy_view_outputs(mixer, (x,), output)
    assert copied[1].k is output[1].k
