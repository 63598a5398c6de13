"""The zoo's probe tasks: labels checked by an independent per-sample loop, determinism, refused arguments."""

import pytest
import torch

from seqzoo.errors import InputError
from seqzoo.tasks import IGNORE_INDEX, build_task

PROBES = {
    "parity": {"seq_len": 20},
    "modular_sum": {"modulus": 5, "seq_len": 20},
    "majority": {"n_symbols": 3, "seq_len": 30},
    "selective_copy": {"vocab_size": 10, "seq_len": 24, "n_tokens": 5},
    "induction_heads": {"vocab_size": 10, "seq_len": 24},
}


def expected_targets(name: str, x: list[int], task) -> list[int]:
    """The rule of each task written as a plain loop over one sample."""
    if name in ("parity", "modular_sum"):
        m = 2 if name == "parity" else task.modulus
        out, s = [], 0
        for v in x:
            s = (s + v) % m
            out.append(s)
        return out
    if name == "majority":
        out, counts = [], [0] * task.n_symbols
        for v in x:
            counts[v] += 1
            best = max(counts)
            out.append(counts.index(best) if counts.count(best) == 1 else IGNORE_INDEX)
        return out
    if name == "selective_copy":
        L = task.context_len
        data = [v for v in x[:L] if v != 0]
        return [IGNORE_INDEX] * L + data
    if name == "induction_heads":
        first = x.index(1)
        return [IGNORE_INDEX] * (len(x) - 1) + [x[first + 1]]
    raise AssertionError(name)


@pytest.mark.parametrize("name", sorted(PROBES))
def test_labels_follow_the_rule(name):
    task = build_task(name, **PROBES[name])
    x, y = task.build(16, seed=3, split="valid")
    assert x.shape == y.shape == (16, task.seq_len) and x.dtype == y.dtype == torch.long
    assert int(x.min()) >= 0 and int(x.max()) < task.vocab_size
    scored = y[y != IGNORE_INDEX]
    assert scored.numel() > 0 and int(scored.max()) < task.vocab_size
    for i in range(16):
        assert y[i].tolist() == expected_targets(name, x[i].tolist(), task), i


@pytest.mark.parametrize("name", sorted(PROBES))
def test_deterministic_per_seed_and_split(name):
    task = build_task(name, **PROBES[name])
    a, b = task.build(8, seed=1), task.build(8, seed=1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(task.build(8, seed=1, split="valid")[0], a[0])


@pytest.mark.parametrize("name", sorted(PROBES))
def test_longer_evaluation_is_the_same_task_rebuilt(name):
    """Length extrapolation: the same config with a larger seq_len builds longer samples of the same rule."""
    task = build_task(name, **PROBES[name])
    longer = build_task(name, **{**task.config(), "seq_len": task.config()["seq_len"] * 4})
    x, y = longer.build(4, seed=0)
    assert x.shape[1] > task.seq_len * 3
    for i in range(4):
        assert y[i].tolist() == expected_targets(name, x[i].tolist(), longer)


def test_majority_and_copy_are_not_trivial():
    """Both answer classes occur, and a constant guess is far from perfect."""
    _, y = build_task("majority", n_symbols=2, seq_len=64).build(256, seed=0)
    scored = y[y != IGNORE_INDEX]
    frac = float((scored == 0).float().mean())
    assert 0.3 < frac < 0.7
    x, y = build_task("induction_heads", vocab_size=10, seq_len=32).build(512, seed=0)
    answers = y[:, -1]
    assert int(answers.bincount().max()) < 0.25 * 512  # spread over the 8 data tokens


@pytest.mark.parametrize(
    "name, kwargs, word",
    [
        ("parity", {"seq_len": 0}, "seq_len"),
        ("modular_sum", {"modulus": 1}, "modulus"),
        ("modular_sum", {"modulus": 2.5}, "modulus"),
        ("majority", {"n_symbols": 1}, "n_symbols"),
        ("majority", {"train_size": 0}, "train_size"),
        ("selective_copy", {"n_tokens": 30, "seq_len": 10}, "n_tokens"),
        ("selective_copy", {"vocab_size": 3}, "vocab_size"),
        ("induction_heads", {"seq_len": 3}, "seq_len"),
        ("induction_heads", {"vocab_size": True}, "vocab_size"),
    ],
)
def test_bad_arguments_are_refused_by_name(name, kwargs, word):
    with pytest.raises(InputError, match=word):
        build_task(name, **kwargs)


def test_bad_sample_count_is_refused():
    with pytest.raises(InputError, match="n must be"):
        build_task("parity").build(0, seed=0)
