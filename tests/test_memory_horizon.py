"""Memory Horizon task: targets recomputed from the inputs by an independent, obvious loop (appendix A)."""

import pytest
import torch

from seqzoo.tasks import TASKS, build_task

R = 5  # reset id for max_input = 4


def compress(nums, modulus=50):
    """The appendix's rule, written as a while-loop: ends paired inwards, +, -, +, ...; odd middle."""
    total, sign, i, j = 0, 1, 0, len(nums) - 1
    while i < j:
        total += sign * nums[i] * nums[j]
        sign, i, j = -sign, i + 1, j - 1
    if i == j:
        total += sign * nums[i]
    return total % modulus


def reference(row, modulus=50):
    cur, ys, spans = [], [], []
    for tok in row:
        cur = [] if tok == R else cur + [tok]
        ys.append(compress(cur, modulus))
        spans.append(len(cur))
    return ys, spans


def test_registered():
    assert "memory_horizon" in TASKS


def test_worked_example():
    row = [3, 2, 4, R, 1, 4, 4, 2, 3, 4, R, 2]
    task = build_task("memory_horizon", seq_len=12, n_resets=2)
    y, span = task._targets(torch.tensor([row]))
    assert y[0].tolist() == [3, 6, 10, 0, 1, 4, 0, 36, 49, 0, 0, 2]
    assert span[0].tolist() == [1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 0, 1]
    assert reference(row)[0] == y[0].tolist()


def test_targets_match_independent_loop_50_samples_l1024():
    task = build_task("memory_horizon")  # paper defaults: L = 1024, 3 resets, numbers 0..4, mod 50
    x, y, span = task.build_with_spans(50, seed=7)
    assert x.shape == y.shape == (50, 1024)
    for row, yr, sr in zip(x.tolist(), y.tolist(), span.tolist()):
        ys, spans = reference(row)
        assert ys == yr and spans == sr


def test_layout_and_vocab():
    task = build_task("memory_horizon")
    x, y = task.build(40, seed=0)
    assert int(x.min()) >= 0 and int(x.max()) <= R
    assert ((x == R).sum(1) == 3).all()  # exactly 3 distinct reset positions per sample
    assert int(y.min()) >= 0 and int(y.max()) < 50
    assert task.input_vocab == 6 and task.n_classes == 51 and task.train_size == 2000
    assert (y[x == R] == 0).all()


def test_deterministic_per_seed_and_split():
    task = build_task("memory_horizon", seq_len=64)
    a, b = task.build(8, seed=3), task.build(8, seed=3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(task.build(8, seed=4)[0], a[0])
    assert not torch.equal(task.build(8, seed=3, split="test")[0], a[0])


def test_configurable():
    task = build_task("memory_horizon", seq_len=100, n_resets=5, max_input=7, max_output=20)
    x, y, span = task.build_with_spans(10, seed=1)
    reset = 8
    assert ((x == reset).sum(1) == 5).all() and int(x.max()) <= reset and int(y.max()) < 20
    for row, yr in zip(x.tolist(), y.tolist()):
        cur, ys = [], []
        for tok in row:
            cur = [] if tok == reset else cur + [tok]
            ys.append(compress(cur, 20))
        assert ys == yr


def _stats(n):
    task = build_task("memory_horizon")
    _, y, span = task.build_with_spans(n, seed=0)
    sp = span.double()
    return (
        float(sp.mean()),
        float((sp <= 50).double().mean()),
        float((sp <= 100).double().mean()),
        float(torch.bincount(y.flatten()).max() / y.numel()),
        int(torch.bincount(y.flatten()).argmax()),
    )


def test_generator_statistics_small():
    mean, le50, le100, top, arg = _stats(300)
    assert abs(mean - 205) < 25 and abs(le50 - 0.184) < 0.04 and abs(le100 - 0.339) < 0.05
    assert arg == 0 and abs(top - 0.028) < 0.01


@pytest.mark.slow
def test_generator_statistics_2000():  # reference statistics: mean span 205, 18.4 % <= 50, 33.9 % <= 100, top class 0 at 2.8 %
    mean, le50, le100, top, arg = _stats(2000)
    assert abs(mean - 205) < 3 and abs(le50 - 0.184) < 0.01 and abs(le100 - 0.339) < 0.01
    assert arg == 0 and abs(top - 0.028) < 0.01


def test_bad_arguments():
    with pytest.raises(ValueError, match="seq_len"):
        build_task("memory_horizon", seq_len=0)
    with pytest.raises(ValueError, match="n_resets"):
        build_task("memory_horizon", seq_len=4, n_resets=5)
    with pytest.raises(ValueError, match="modulus"):
        build_task("memory_horizon", modulus=100)
