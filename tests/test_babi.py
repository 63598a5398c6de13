"""bAbI memory tasks (seqzoo.tasks.babi): layout, placement, determinism, parsing and errors (arXiv:2304.11062 memory tasks; docs/rmt.md).

Runs on small generated data (byte tokenizer, tiny bAbI files and books written to tmp_path); one test also
reads the real files from ../shared when present."""

import warnings

import numpy as np
import pytest
import torch

from seqzoo.tasks.babi import PLACES, BabiMemory, babi_items, parse_babi

QA4 = """1 The office is north of the kitchen.
2 The garden is south of the kitchen.
3 What is north of the kitchen?\toffice\t1
1 The kitchen is west of the garden.
2 The hallway is west of the kitchen.
3 What is the kitchen east of?\thallway\t2
"""
QA3 = """1 Mary moved to the bathroom.
2 Mary got the football there.
3 Mary went to the kitchen.
4 Where was the football before the kitchen?\tbathroom\t2 3 1
"""


@pytest.fixture
def data_dir(tmp_path):
    babi = tmp_path / "babi" / "tasks_1-20_v1-2"
    (babi / "en-10k").mkdir(parents=True)
    (babi / "en").mkdir()
    for split in ("train", "test"):
        (babi / "en-10k" / f"qa4_two-arg-relations_{split}.txt").write_text(QA4 * 10)
        (babi / "en" / f"qa3_three-supporting-facts_{split}.txt").write_text(QA3 * 10)
    (babi / "en-10k" / "qa3_three-supporting-facts_test.txt").write_text(QA3 * 10)
    books = tmp_path / "gutenberg-nltk"
    books.mkdir()
    (books / "a.txt").write_text("A" * 900 + "B" * 50 + "C" * 50)  # train / valid / test token ranges
    (books / "b.txt").write_text("x" * 2000)
    (books / "README.md").write_text("not a book")
    return tmp_path


def task(data_dir, name="memorize", N=3, L=64, **kw):
    return BabiMemory(name, N, L, tokenizer="byte", data_dir=data_dir, cache_dir=data_dir / "cache", **kw)


def test_layout_and_memorize_offset(data_dir):
    t = task(data_dir)
    x, y = t.build(20, seed=0, split="train")
    assert x.shape == (20, 192) and y.shape == (20,) and t.kind == "cls"
    for i in range(20):
        s = t.sample("train", i)
        assert s["fact_offsets"] == [0] and s["fact_segments"] == [0]
        text = t.decode(s["input_ids"])
        assert text.startswith(" " + text.split(".")[0].strip()) and text.endswith("?")
        name = text.split()[0]
        assert text.endswith(f" Where is {name}?") and PLACES[s["label"]] in text.split(".")[0]


def test_detect_on_segment_boundaries_and_uniform_labels(data_dir):
    t = task(data_dir, "detect", N=4)
    samples = t.build_samples(600, seed=3, split="train")
    segs = [s["fact_segments"][0] for s in samples]
    assert all(s["fact_offsets"][0] % 64 == 0 or s["fact_segments"][0] == 3 for s in samples)
    assert set(segs) == {0, 1, 2, 3}
    counts = np.bincount([s["label"] for s in samples], minlength=6)
    chi2 = float(((counts - 100.0) ** 2 / 100.0).sum())
    assert chi2 < 20.5  # chi-square, 5 dof, p = 0.001
    ceiling = t.no_memory_ceiling(samples)
    assert abs(ceiling - (np.mean([s == 3 for s in segs]) * (5 / 6) + 1 / 6)) < 1e-12


def test_reasoning_facts_in_order_without_overlap(data_dir):
    t = task(data_dir, "reasoning", N=3, L=80, placement="uniform")
    for i in range(30):
        s = t.sample("valid", i)
        ids = s["input_ids"]
        text = t.decode(ids)
        assert len(ids) == 240
        o = s["fact_offsets"]
        assert o[0] < o[1]
        q = text.rindex(" What is")
        first = text.index(" The ")
        assert first < q and text.count(" is ") >= 3  # two statements and the question, question last
        assert s["label"] in (PLACES.index("office"), PLACES.index("hallway"))


def test_generate_head_targets_answer_and_eos(data_dir):
    t = task(data_dir, "memorize", head="generate", L=80)
    x, y = t.build(5, seed=0, split="test")
    assert t.kind == "lm" and x.shape == y.shape == (5, 240)
    for i in range(5):
        scored = (y[i] != -100).nonzero().flatten()
        n_ans = len(t.encode(" Answer: " + t.sample("test", i)["answer"])) - len(t.encode(" Answer:"))
        assert len(scored) == n_ans + 1 and int(scored[-1]) == 238
        assert torch.equal(y[i, scored], x[i, scored + 1])  # next-token targets
        assert t.decode(y[i, scored[:-1]].tolist()).strip() == t.sample("test", i)["answer"]
        assert int(x[i, -1]) == t.eos_id


def test_determinism_and_split_separation(data_dir):
    a, b = task(data_dir, "detect"), task(data_dir, "detect")
    xa, ya = a.build(50, seed=7, split="valid")
    xb, yb = b.build(50, seed=7, split="valid")
    assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(a.build(50, seed=7, split="test")[0], xa)
    assert not torch.equal(a.build(50, seed=8, split="valid")[0], xa)
    # noise streams come from disjoint token ranges of each book: A.. train, B.. valid, C.. test
    enc = {k: a.decode(v.tolist()) for k, v in a.noise.items()}
    assert "B" not in enc["train"] and "C" not in enc["train"]
    assert "A" not in enc["valid"] and "C" not in enc["valid"]
    assert "A" not in enc["test"] and "B" not in enc["test"]


def test_bad_arguments(data_dir):
    with pytest.raises(ValueError, match="n_segments"):
        task(data_dir, N=0)
    with pytest.raises(ValueError, match="task must be one of"):
        task(data_dir, "qa9")
    with pytest.raises(ValueError, match="segment_size=20 is too small"):
        task(data_dir, L=20).sample("train", 0)
    with pytest.raises(FileNotFoundError, match="qa2_two-supporting-facts_train.txt"):
        task(data_dir, "qa2")
    with pytest.raises(FileNotFoundError, match="gutenberg"):
        BabiMemory(
            "memorize", 2, 64, tokenizer="byte", data_dir=data_dir, noise_dir=data_dir / "gutenberg", cache_dir=None
        )


def test_qa3_fallback_warns_and_parses(data_dir):
    babi_items.cache_clear()
    with pytest.warns(UserWarning, match="missing"):
        t = task(data_dir, "qa3", N=4, L=80)
    s = t.sample("train", 0)
    text = t.decode(s["input_ids"])
    # supporting facts 2 3 1 are kept in story order (1, 2, 3)
    assert text.index("moved to the bathroom") < text.index("got the football") < text.index("went to the kitchen")
    assert s["label"] == PLACES.index("bathroom")


def test_parse_counts(data_dir):
    items = parse_babi(data_dir / "babi" / "tasks_1-20_v1-2" / "en-10k" / "qa4_two-arg-relations_train.txt")
    assert len(items) == 20 and items[1].support == ("The hallway is west of the kitchen.",)
    assert items[1].story == ("The kitchen is west of the garden.", "The hallway is west of the kitchen.")


def test_real_babi_counts(shared):
    babi = str(shared / "data" / "babi" / "tasks_1-20_v1-2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train, valid = babi_items(babi, "reasoning", "train"), babi_items(babi, "reasoning", "valid")
        test = babi_items(babi, "reasoning", "test")
    assert len(train) + len(valid) == 10_000 and len(valid) == 1000 and len(test) == 1000
    assert all(len(q.story) == 2 and len(q.support) == 1 and q.answer in PLACES for q in train[:500])
