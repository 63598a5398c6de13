"""The MAD tasks (seqzoo/tasks/mad/) against small, deliberately plain reimplementations of mad-lab's generators
written here (one sample at a time, Python's ``random``, dictionaries and lists as mad-lab keeps them), compared
statistically; plus layout, determinism, the split rule and the refused settings."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
import torch
from helpers import assert_same_distribution

from seqzoo.errors import InputError
from seqzoo.tasks import IGNORE_INDEX, build_task

N = 2000


# ------------------------------------------------------------------ reference generators (loops, mad-lab's order)
def ref_recall(rng: random.Random, V: int, T: int, NV: int = 0, frac_noise: float = 0.0, train: bool = False):
    s = V - NV
    keys, values, noise = list(range(s // 2)), list(range(s // 2, s)), list(range(s, V))
    P = T // 2
    protected = rng.randrange(P)
    kv, presented, inputs, targets = {}, {}, [], []
    for i in range(P - 1):
        if frac_noise > 0 and i != protected and rng.random() < frac_noise:
            inputs += [rng.choice(noise), rng.choice(noise)]
            targets += [IGNORE_INDEX, IGNORE_INDEX]
            continue
        k = rng.choice(keys)
        v = kv.setdefault(k, rng.choice(values))
        inputs += [k, v]
        targets += [IGNORE_INDEX, v if k in presented else IGNORE_INDEX]
        presented[k] = v
    k = rng.choice(sorted(presented))
    inputs += [k, presented[k]]
    targets += [IGNORE_INDEX, presented[k]]
    return inputs[:-1], (inputs if train else targets)[1:]


def ref_selective_copy(rng: random.Random, V: int, T: int, N_copy: int):
    tokens = [rng.randrange(V - 2) for _ in range(N_copy)]
    region = list(tokens)
    for _ in range(T - 2 * N_copy - 1):  # each blank goes in front of a token drawn uniformly (list insert)
        region.insert(_index_of_token(region, rng.randrange(N_copy)), "blank")
    inputs = [V - 2 if t == "blank" else t for t in region] + [V - 1] + [V - 2] * N_copy
    targets = [IGNORE_INDEX] * (T - N_copy) + tokens
    return inputs, targets


def _index_of_token(region, j):
    """Position of the j-th non-blank entry (blanks inserted before it land in front of token j)."""
    seen = -1
    for i, t in enumerate(region):
        if t != "blank":
            seen += 1
            if seen == j:
                return i
    raise AssertionError


def ref_fuzzy(rng: random.Random, V: int, T: int, K: int = 3, Vm: int = 3, train: bool = False):
    pad, s = V - 1, V - 1
    kvoc, vvoc = list(range(s // 2)), list(range(s // 2, s))
    keys = {m: list(itertools.permutations(kvoc, m)) for m in (range(1, K + 1) if train else [K])}
    vals = {m: list(itertools.permutations(vvoc, m)) for m in range(1, Vm + 1)}
    kps, vps = rng.choice(sorted(keys)), rng.choice(sorted(vals))
    kp, vp = rng.choice(keys[kps]), rng.choice(vals[vps])
    probe_at = rng.randrange(T - 2 * (kps + vps))
    added, kv, presented, inputs, targets = False, {}, {}, [], []
    while len(inputs) < T - (kps + vps) - (K + Vm):
        ks, vs = rng.choice(sorted(keys)), rng.choice(sorted(vals))
        if len(inputs) >= probe_at and not added:
            inputs += [*kp, *vp]
            targets += [IGNORE_INDEX] * (kps + vps)
            kv[kp] = presented[kp] = vp
            added = True
            continue
        k = rng.choice(keys[ks])
        if k == kp:
            v, added = vp, True
        else:
            if k not in kv:
                kv[k] = rng.choice(vals[vs])
            v = kv[k]
        inputs += [*k, *v]
        targets += [IGNORE_INDEX] * ks + (list(v) if k in presented else [IGNORE_INDEX] * len(v))
        presented[k] = v
    inputs += [*kp, *vp]
    targets += [IGNORE_INDEX] * kps + list(vp)
    n_pad = T + 1 - len(inputs)
    inputs, targets = [pad] * n_pad + inputs, [IGNORE_INDEX] * n_pad + targets
    return inputs[:-1], (inputs if train else targets)[1:]


def reference(fn, n, seed=0, **kw):
    rng = random.Random(seed)
    rows = [fn(rng, **kw) for _ in range(n)]
    return torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows])


def scored_per_row(y):
    return (y != IGNORE_INDEX).sum(1)


# ------------------------------------------------------------------ in-context recall and noisy recall
@pytest.mark.parametrize(
    "name,args,ref",
    [
        ("mad-recall", {}, {"V": 16, "T": 128}),
        ("mad-noisy-recall", {}, {"V": 32, "T": 128, "NV": 16, "frac_noise": 0.2}),
        ("mad-noisy-recall", {"frac_noise": 0.6, "seq_len": 64}, {"V": 32, "T": 64, "NV": 16, "frac_noise": 0.6}),
    ],
)
def test_recall_matches_the_reference(name, args, ref):
    task = build_task(name, **args)
    x, y = task.build(N, 0, "valid")
    rx, ry = reference(ref_recall, N, **ref)
    T, V = ref["T"], ref["V"]
    assert x.shape == y.shape == (N, T - 1) and rx.shape == x.shape
    assert int(x.min()) >= 0 and int(x.max()) < V
    assert_same_distribution(x, rx, V, "input tokens")
    assert_same_distribution(scored_per_row(y), scored_per_row(ry), T, "scored positions per row")
    # the last position is always scored: the final query's value; scored positions are value slots
    assert (y[:, -1] != IGNORE_INDEX).all()
    s = V - ref.get("NV", 0)
    scored = y[y != IGNORE_INDEX]
    assert scored.min() >= s // 2 and scored.max() < s
    # noise tokens appear at the rate of the reference
    noise = (x >= s).double().mean()
    assert abs(float(noise) - float((rx >= s).double().mean())) < 0.01


def test_recall_targets_follow_the_samples_own_map():
    x, y = build_task("mad-noisy-recall").build(300, 3, "valid")
    s = 16
    for r in range(300):
        toks, tg = x[r].tolist(), y[r].tolist()
        seen = {}
        for t in range(0, 126, 2):
            k, v = toks[t], toks[t + 1]
            if k >= s:  # noise slot
                assert v >= s and tg[t] == IGNORE_INDEX
                continue
            assert k < s // 2 and s // 2 <= v < s
            assert seen.setdefault(k, v) == v  # one value per key within a sample
            assert tg[t] == (v if t > 0 and k in dict(list(seen.items())) and _before(toks, t, k) else IGNORE_INDEX)
        assert toks[-1] in seen and y[r, -1] == seen[toks[-1]]  # the final query is a presented key


def _before(toks, t, k):
    return any(toks[u] == k for u in range(0, t, 2))


def test_recall_train_split_is_next_token_prediction():
    task = build_task("mad-recall")
    x, y = task.build(16, 5, "train")
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert (y != IGNORE_INDEX).all()


# ------------------------------------------------------------------ fuzzy recall
@pytest.mark.parametrize("split", ["train", "valid"])
def test_fuzzy_recall_matches_the_reference(split):
    n = 1500
    task = build_task("mad-fuzzy-recall")
    x, y = task.build(n, 1, split)
    rx, ry = reference(ref_fuzzy, n, seed=1, V=16, T=128, train=split == "train")
    assert x.shape == y.shape == rx.shape == (n, 128)
    pad = 15
    assert_same_distribution((x == pad).sum(1), (rx == pad).sum(1), 128, "pad tokens per row")
    assert_same_distribution(x[x != pad], rx[rx != pad], 16, "tokens")
    if split == "train":
        assert torch.equal(x[:, 1:], y[:, :-1])
    else:
        assert_same_distribution(scored_per_row(y), scored_per_row(ry), 129, "scored positions per row")
        # the final query's value is scored in every row: its last 1 to 3 tokens
        assert (y[:, -1] != IGNORE_INDEX).all()


def unanswerable(x: torch.Tensor, y: torch.Tensor, key_size: int = 3) -> float:
    """Fraction of test rows whose final query's key (the ``key_size`` tokens before its value) appears nowhere
    earlier in the row: mad-lab's probe pair was never inserted."""
    missing = 0
    for row, tg in zip(x.tolist(), y.tolist()):
        n_value = next(i for i, t in enumerate(reversed(tg)) if t == IGNORE_INDEX)
        end = len(row) - (n_value - 1)  # inputs stop one token before the end of the value
        key, body = row[end - key_size : end], row[: end - key_size]
        missing += not any(body[i : i + key_size] == key for i in range(len(body) - key_size + 1))
    return missing / len(x)


def test_fuzzy_recall_keeps_mads_uninserted_probes():
    x, y = build_task("mad-fuzzy-recall").build(4000, 0, "valid")
    rx, ry = reference(ref_fuzzy, 4000, seed=0, V=16, T=128)
    ours, ref = unanswerable(x, y), unanswerable(rx, ry)
    assert 0.005 < ours < 0.05 and abs(ours - ref) < 0.015, (ours, ref)


# ------------------------------------------------------------------ selective copying
def test_selective_copy_matches_the_reference():
    V, T, n_copy = 16, 64, 8
    x, y = build_task("mad-selective-copy", seq_len=T, num_tokens_to_copy=n_copy).build(N, 2)
    rx, ry = reference(ref_selective_copy, N, seed=2, V=V, T=T, N_copy=n_copy)
    assert x.shape == y.shape == rx.shape == (N, T)
    assert (x[:, T - n_copy - 1] == V - 1).all() and (x[:, T - n_copy :] == V - 2).all()
    # the tokens before the copy token, in order, are the targets; blanks elsewhere
    region = x[:, : T - n_copy - 1]
    for r in range(0, N, 50):
        kept = [t for t in region[r].tolist() if t != V - 2]
        assert kept == y[r, T - n_copy :].tolist()
    assert (region[:, -1] != V - 2).all()  # mad-lab never inserts a blank after the last token

    # where the tokens sit: the same distribution as the reference, position by position
    def where(a):  # (n, n_copy): the positions of the tokens to copy, in order
        return torch.argsort((a[:, : T - n_copy - 1] != V - 2).long(), dim=1, descending=True, stable=True)[:, :n_copy]

    for j in (0, n_copy // 2):
        assert_same_distribution(where(x)[:, j], where(rx)[:, j], T, f"position of token {j}")
    assert_same_distribution(y[:, T - n_copy :], ry[:, T - n_copy :], V, "tokens to copy")


# ------------------------------------------------------------------ compression
def test_compression_layout():
    x, y = build_task("mad-compression").build(N, 4)
    assert x.shape == (N, 32) and torch.equal(x, y)
    assert (x[:, -1] == 15).all() and int(x[:, :-1].max()) <= 14
    counts = torch.bincount(x[:, :-1].flatten(), minlength=15).double()
    expected = x[:, :-1].numel() / 15
    assert float(((counts - expected) ** 2 / expected).sum()) < 60  # chi-square, 14 dof: far below
    assert getattr(build_task("mad-compression"), "needs_autoencoder", False)


# ------------------------------------------------------------------ memorization
def test_memorization_map_is_fixed_and_injective():
    task = build_task("mad-memorization")
    xs, ys = task.build(500, 0, "train")
    xv, yv = build_task("mad-memorization").build(500, 7, "valid")  # another task object, split and seed
    facts = {}
    for x, y in ((xs, ys), (xv, yv)):
        assert (x[:, 1::2] == 255).all() and (y[:, 0::2] == IGNORE_INDEX).all()
        for k, v in zip(x[:, 0::2].flatten().tolist(), y[:, 1::2].flatten().tolist()):
            assert facts.setdefault(k, v) == v
    assert set(facts) == set(range(127))  # 32,000 draws reach every key
    assert len(set(facts.values())) == 127 and min(facts.values()) >= 127 and max(facts.values()) < 255
    other = build_task("mad-memorization", map_seed=1).build(500, 0, "train")[1]
    assert not torch.equal(other, ys)
    counts = Counter(xs[:, 0::2].flatten().tolist())
    assert max(counts.values()) < 3 * (8000 / 127)  # keys uniform with repetition


# ------------------------------------------------------------------ shared contract
ALL = [
    "mad-recall",
    "mad-noisy-recall",
    "mad-fuzzy-recall",
    "mad-selective-copy",
    "mad-compression",
    "mad-memorization",
]


@pytest.mark.parametrize("name", ALL)
def test_seeded_split_apart_and_mads_defaults(name):
    task = build_task(name)
    a, b = task.build(4, 9), task.build(4, 9)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(task.build(4, 9, "valid")[0], a[0])
    assert task.train_size == (256 if name == "mad-memorization" else 12_800)
    assert task.config()["train_size"] == task.train_size
    with pytest.raises(InputError, match="split must be one of"):
        task.build(2, 0, "dev")


@pytest.mark.parametrize(
    "name,args,named",
    [
        ("mad-recall", {"seq_len": 127}, "seq_len must be even"),
        ("mad-recall", {"vocab_size": 1}, "vocab_size must be an int >= 2"),
        ("mad-noisy-recall", {"frac_noise": 1.0}, r"frac_noise must be a number in \[0, 1\)"),
        ("mad-noisy-recall", {"noise_vocab_size": 0}, "noise_vocab_size must be >= 1 when frac_noise > 0"),
        ("mad-noisy-recall", {"vocab_size": 17}, "vocab_size must be an int >= 18"),
        ("mad-fuzzy-recall", {"vocab_size": 6}, "vocab_size must be an int >= 7"),
        ("mad-fuzzy-recall", {"seq_len": 20}, "seq_len must be an int >= 25"),
        ("mad-selective-copy", {"seq_len": 33}, "seq_len must be > 2\\*num_tokens_to_copy \\+ 1 = 33"),
        ("mad-compression", {"train_size": 0}, "train_size must be an int >= 1"),
        ("mad-memorization", {"seq_len": 31}, "seq_len must be even"),
        ("mad-memorization", {"vocab_size": 2}, "vocab_size must be an int >= 3"),
    ],
)
def test_impossible_settings_refused_by_name(name, args, named):
    with pytest.raises(InputError, match=named):
        build_task(name, **args)
