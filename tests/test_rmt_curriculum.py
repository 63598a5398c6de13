"""Curriculum over segment counts (seqzoo.train.curriculum) and the memory-carries-information check:
a tiny RMT recalls a class token from the first segment only when it has memory tokens (arXiv:2304.11062 curriculum; docs/rmt.md)."""

import json

import numpy as np
import pytest
import torch

from seqzoo.models import Encoder, ModelConfig
from seqzoo.models.rmt import RMT, RMTConfig
from seqzoo.train.curriculum import (
    Curriculum,
    OptimConfig,
    evaluate_segments,
    train_curriculum,
)


class FirstTokenRecall:
    """Label = the first token (one of 6); everything after it is random filler from the other tokens."""

    vocab_size = 16

    def __init__(self, n_segments=2, segment_size=6):
        self.n_segments, self.segment_size = n_segments, segment_size

    def with_segments(self, n):
        return FirstTokenRecall(n, self.segment_size)

    def build(self, n, seed, split="train"):
        g = torch.Generator().manual_seed(seed * 10 + {"train": 0, "valid": 1, "test": 2}[split])
        x = torch.randint(6, self.vocab_size, (n, self.n_segments * self.segment_size), generator=g)
        y = torch.randint(0, 6, (n,), generator=g)
        x[:, 0] = y
        return x, y


def tiny_rmt(m):
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=16,
        d_model=32,
        n_layers=1,
        pattern=["attention"],
        mixer_kwargs={"attention": {"n_heads": 4}},
        mlp="gelu",
        mlp_ratio=2.0,
    )
    return RMT(Encoder(cfg), RMTConfig(num_mem_tokens=m, segment_size=6, num_labels=6, pool="cls"))


def test_curriculum_validation_and_sampling():
    with pytest.raises(ValueError, match="stages"):
        Curriculum(stages=[2, 1])
    with pytest.raises(ValueError, match="stages"):
        Curriculum(stages=[0, 1])
    with pytest.raises(ValueError, match="steps_per_stage"):
        Curriculum(steps_per_stage=0)
    rng = np.random.default_rng(0)
    fixed, mixed = Curriculum(stages=[1, 2, 4]), Curriculum(stages=[1, 2, 4], mix_previous=True)
    assert {fixed.batch_segments(2, rng) for _ in range(50)} == {4}
    assert {mixed.batch_segments(2, rng) for _ in range(200)} == {1, 2, 3, 4}
    assert {mixed.batch_segments(0, rng) for _ in range(20)} == {1}


def test_advance_rules():
    c = Curriculum(threshold=0.9, patience=2)
    assert not c.should_advance([0.95])
    assert c.should_advance([0.5, 0.95, 0.92])
    assert not c.should_advance([0.5, 0.95, 0.6])  # not two consecutive
    assert c.should_advance([0.6, 0.5, 0.55])  # two evaluations without beating 0.6
    assert not c.should_advance([0.5, 0.55, 0.6])
    naive = Curriculum.naive(3, 100)
    assert naive.stages == [3] and not naive.should_advance([1.0] * 50)


def test_memory_carries_information_and_curriculum_runs(tmp_path):
    """m=4 solves first-token recall over 2 segments; m=0 stays near chance (1/6). Stages run 1 -> 2."""
    task = FirstTokenRecall()
    accs = {}
    for m in (4, 0):
        model = tiny_rmt(m)
        res = train_curriculum(
            model,
            task,
            Curriculum(stages=[1, 2], steps_per_stage=40, threshold=0.99, patience=3),
            OptimConfig(lr=3e-3, batch_size=32, warmup_steps=10),
            eval_every=20,
            eval_samples=100,
            out_dir=tmp_path / f"m{m}",
        )
        accs[m] = evaluate_segments(model, task, 2, 300, seed=5, split="test")["accuracy"]
        assert [s["stage"] for s in res["stages"]] == [1, 2]
        first, second = res["stages"]
        assert second["budget"] == 80 - first["steps"]  # steps left by an early stage carry over to the next
        assert res["total_steps"] == first["steps"] + second["steps"] <= 80
    assert accs[4] >= 0.9, accs
    assert accs[0] <= 0.3, accs
    lines = [json.loads(x) for x in (tmp_path / "m4" / "curriculum.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in lines} == {1, 2} and any(r["split"] == "valid" for r in lines)


@pytest.mark.slow
def test_memorize_on_babi_needs_memory(shared, tmp_path):
    """E1 at small size on the real data: memorize over 3 segments of 16 tokens (GPT-2 BPE, Gutenberg noise)."""
    from seqzoo.models.presets.rmt import build_rmt
    from seqzoo.tasks.babi import BabiMemory

    task = BabiMemory("memorize", 3, 16, data_dir=shared / "data", cache_dir=tmp_path / "cache")
    accs = {}
    for m in (4, 0):
        model = build_rmt(
            "rmt-tiny", vocab_size=task.vocab_size, rmt_overrides={"num_mem_tokens": m, "segment_size": 16}
        )
        train_curriculum(
            model,
            task,
            Curriculum.naive(3, 200),
            OptimConfig(batch_size=32, warmup_steps=40),
            eval_every=100,
            eval_samples=100,
        )
        accs[m] = evaluate_segments(model, task, 3, 500, split="test")["accuracy"]
    assert accs[4] >= 0.9 and accs[0] <= 0.22, accs
