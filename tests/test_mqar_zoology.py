"""MQAR ``protocol="zoology"`` (seqzoo/tasks/mqar_zoology.py) against an independent, deliberately simple
reimplementation of Zoology's generator written here (one sample at a time, Python's ``random``, gaps drawn one by
one from the remaining slots), compared statistically; and the default protocol unchanged, sample for sample."""

from __future__ import annotations

import hashlib
import json
import math
import random
import subprocess
import sys

import pytest
import torch
from helpers import assert_same_distribution

from seqzoo.errors import InputError
from seqzoo.tasks import IGNORE_INDEX, build_task


def reference_sample(rng: random.Random, V: int, P: int, T: int, a: float, random_filler: bool):
    """One (inputs, targets, gaps) of Zoology's MQAR, written from its description: a loop, no vectorisation."""
    half = V // 2
    keys = rng.sample(range(1, half), P)
    values = rng.sample(range(half, V), P)
    remaining, gaps = list(range((T - 2 * P) // 2)), []
    for _ in range(P):  # pair i gets the i-th draw
        g = rng.choices(remaining, weights=[a * (j + 1) ** (a - 1) for j in remaining])[0]
        remaining.remove(g)
        gaps.append(g)
    inputs = [rng.randrange(V) if random_filler else 0 for _ in range(T)]
    targets = [IGNORE_INDEX] * T
    for i in range(P):
        inputs[2 * i], inputs[2 * i + 1] = keys[i], values[i]
        inputs[2 * P + 2 * gaps[i]] = keys[i]
        targets[2 * P + 2 * gaps[i]] = values[i]
    return inputs, targets, gaps


def reference_batch(n, V, P, T, a=0.01, random_filler=True, seed=0):
    rng = random.Random(seed)
    rows = [reference_sample(rng, V, P, T, a, random_filler) for _ in range(n)]
    return (
        torch.tensor([r[0] for r in rows]),
        torch.tensor([r[1] for r in rows]),
        torch.tensor([r[2] for r in rows]),
    )


def gaps_of(inputs: torch.Tensor, targets: torch.Tensor, P: int) -> torch.Tensor:
    """(n, P): the gap of each pair's query, read back from where its key reappears with a scored target."""
    n = inputs.shape[0]
    out = torch.full((n, P), -1, dtype=torch.long)
    for r in range(n):
        scored = (targets[r] != IGNORE_INDEX).nonzero().flatten().tolist()
        for pos in scored:
            i = inputs[r, 0 : 2 * P : 2].tolist().index(int(inputs[r, pos]))
            out[r, i] = (pos - 2 * P) // 2
    return out


N = 3000


@pytest.fixture(scope="module")
def drawn():
    V, P, T = 8192, 4, 64
    task = build_task("mqar", vocab_size=V, num_pairs=P, seq_len=T, protocol="zoology")
    x, y = task.build(N, 0)
    rx, ry, rg = reference_batch(N, V, P, T)
    return {"V": V, "P": P, "T": T, "x": x, "y": y, "rx": rx, "ry": ry, "rgaps": rg}


def test_query_gaps_follow_the_reference_per_pair(drawn):
    P, T = drawn["P"], drawn["T"]
    slots = (T - 2 * P) // 2
    gaps = gaps_of(drawn["x"], drawn["y"], P)
    assert (gaps >= 0).all() and (gaps < slots).all()
    # pair i's gap is the i-th draw: the first pairs get smaller gaps, as in Zoology's sequential sampling
    for i in range(P):
        assert_same_distribution(gaps[:, i], drawn["rgaps"][:, i], slots, f"gap of pair {i}")
    assert_same_distribution(gaps, drawn["rgaps"], slots, "all gaps")
    # the power law is not uniform: about a quarter of the first queries sit right after the context
    assert float((gaps[:, 0] == 0).double().mean()) > 0.2


def test_labels_only_at_the_queries(drawn):
    x, y, P = drawn["x"], drawn["y"], drawn["P"]
    scored = y != IGNORE_INDEX
    assert (scored.sum(1) == P).all()
    assert not scored[:, : 2 * P].any()
    offsets = scored.nonzero()[:, 1] - 2 * P
    assert (offsets % 2 == 0).all()
    keys, values = x[:, 0 : 2 * P : 2], x[:, 1 : 2 * P : 2]
    for r in range(0, N, 97):
        pairs = dict(zip(keys[r].tolist(), values[r].tolist()))
        queried = x[r][scored[r]].tolist()
        assert sorted(queried) == sorted(pairs)  # every key exactly once
        assert y[r][scored[r]].tolist() == [pairs[k] for k in queried]


def test_keys_and_values_distinct_and_in_their_halves():
    V, P, T = 34, 8, 32  # 17 values for 8 pairs: with replacement, most rows would repeat one
    x, _ = build_task("mqar", vocab_size=V, num_pairs=P, seq_len=T, protocol="zoology").build(2000, 1)
    rx, _, _ = reference_batch(2000, V, P, T, seed=1)
    for a in (x, rx):
        keys, values = a[:, 0 : 2 * P : 2], a[:, 1 : 2 * P : 2]
        assert all(len(set(r)) == P for r in keys.tolist())
        assert all(len(set(r)) == P for r in values.tolist())
        assert keys.min() >= 1 and keys.max() < V // 2 and values.min() >= V // 2 and values.max() < V
    assert_same_distribution(x[:, 1 : 2 * P : 2], rx[:, 1 : 2 * P : 2], V, "values")
    assert_same_distribution(x[:, 0 : 2 * P : 2], rx[:, 0 : 2 * P : 2], V, "keys")


def filler(x: torch.Tensor, y: torch.Tensor, P: int) -> torch.Tensor:
    """Tokens of the query region at unscored positions."""
    region, scored = x[:, 2 * P :], y[:, 2 * P :] != IGNORE_INDEX
    return region[~scored]


def test_random_filler_matches_the_reference():
    V, P, T = 40, 4, 32
    task = build_task("mqar", vocab_size=V, num_pairs=P, seq_len=T, protocol="zoology")
    x, y = task.build(2000, 2)
    rx, ry, _ = reference_batch(2000, V, P, T, seed=2)
    assert_same_distribution(filler(x, y, P), filler(rx, ry, P), V, "filler tokens")

    # unscored copies of context keys appear in the filler as often as in the reference
    def copies(a, b):
        keys = a[:, 0 : 2 * P : 2]
        region, scored = a[:, 2 * P :], b[:, 2 * P :] != IGNORE_INDEX
        hit = (region[:, :, None] == keys[:, None, :]).any(-1) & ~scored
        return float(hit.sum()) / float((~scored).sum())

    ours, ref = copies(x, y), copies(rx, ry)
    se = math.sqrt(P / V * (1 - P / V) / float((y[:, 2 * P :] == IGNORE_INDEX).sum()))
    assert abs(ours - ref) < 6 * se and abs(ours - P / V) < 6 * se


def test_zero_filler_as_in_the_figure2_configs():
    V, P, T = 100, 4, 32
    task = build_task("mqar", vocab_size=V, num_pairs=P, seq_len=T, protocol="zoology", random_filler=False)
    x, y = task.build(200, 3)
    assert (filler(x, y, P) == 0).all()
    assert task.config()["random_filler"] is False


def test_power_a_one_is_uniform():
    V, P, T = 200, 4, 64
    task = build_task("mqar", vocab_size=V, num_pairs=P, seq_len=T, protocol="zoology", power_a=1.0)
    x, y = task.build(N, 4)
    _, _, rg = reference_batch(N, V, P, T, a=1.0, seed=4)
    gaps = gaps_of(x, y, P)
    assert_same_distribution(gaps, rg, (T - 2 * P) // 2, "gaps at power_a=1")


def test_seeded_and_split_apart():
    task = build_task("mqar", vocab_size=512, num_pairs=8, seq_len=64, protocol="zoology")
    a, b = task.build(8, 5), task.build(8, 5)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(task.build(8, 5, "valid")[0], a[0])


# SHA-256 of inputs and targets of build(16, seed=5) under the default protocol, recorded from the code before the
# zoology protocol existed: the default's samples (and run keys' task configuration) must not move
DEFAULT_DIGESTS = [
    (
        {"vocab_size": 64, "num_pairs": 8, "seq_len": 64},
        "ac9bb2b3ed6f1425599ac1de38ae8cc81d7e5deff6c1bf7afd3982a08e48395b",
    ),
    (
        {"vocab_size": 32, "num_pairs": 3, "seq_len": 20, "num_queries": 2, "query_at_end": True},
        "9b10ed261cccf8f9ac34ce4504941c5b6ae4a0d35b438fd883ef56bed787d65e",
    ),
]


@pytest.mark.parametrize("args,digest", DEFAULT_DIGESTS)
def test_default_protocol_unchanged(args, digest):
    task = build_task("mqar", **args)
    x, y = task.build(16, 5, "train")
    assert hashlib.sha256(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest() == digest
    assert task.config() == {"num_queries": args["num_pairs"], "query_at_end": False, "train_size": None, **args}
    explicit = build_task("mqar", protocol="seqzoo", **args)
    assert explicit.config() == task.config()


@pytest.mark.parametrize(
    "args,named",
    [
        ({"seq_len": 63, "num_pairs": 4}, "seq_len must be even"),
        ({"seq_len": 64, "num_pairs": 4, "vocab_size": 64}, "vocab_size must be > seq_len"),
        ({"seq_len": 64, "num_pairs": 17}, "num_pairs must be in [1, seq_len/4"),
        ({"seq_len": 64, "num_pairs": 4, "num_queries": 2}, "num_queries must be num_pairs"),
        ({"seq_len": 64, "num_pairs": 4, "query_at_end": True}, "query_at_end must be false"),
        ({"seq_len": 64, "num_pairs": 4, "power_a": 0.0}, "power_a must be a finite number > 0"),
        ({"seq_len": 64, "num_pairs": 4, "power_a": float("nan")}, "power_a must be a finite number"),
        ({"seq_len": 64, "num_pairs": 4, "random_filler": "yes"}, "random_filler must be true or false"),
    ],
)
def test_zoology_settings_refused_by_name(args, named):
    with pytest.raises(InputError, match=named.replace("[", r"\[")):
        build_task("mqar", **{"vocab_size": 8192, "protocol": "zoology", **args})


def test_other_protocol_arguments_refused():
    with pytest.raises(InputError, match="protocol must be one of seqzoo, zoology"):
        build_task("mqar", protocol="hazy")
    with pytest.raises(InputError, match="apply only to protocol='zoology'"):
        build_task("mqar", power_a=0.5)


def test_cli_task_arg_protocol(tmp_path):
    out = tmp_path / "run"
    base = [sys.executable, "-m", "seqzoo", "train", "--model", "attention-tiny", "--task", "mqar"]
    args = ["--task-arg", "protocol=zoology", "--task-arg", "vocab_size=40", "--task-arg", "num_pairs=4"]
    bad = subprocess.run(
        [*base, *args, "--task-arg", "seq_len=33", "--steps", "1", "--out", str(out)], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "seq_len must be even" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert not out.exists()
    ok = subprocess.run(
        [*base, *args, "--task-arg", "seq_len=32", "--steps", "1", "--batch-size", "4", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr

    assert json.loads((out / "task.json").read_text())["protocol"] == "zoology"
