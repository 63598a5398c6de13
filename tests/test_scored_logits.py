"""The LM head at scored positions only (``LanguageModel(logits_mask=)``, ``TrainConfig.scored_logits``) against the
full head: logits, loss and every gradient in float64; training and evaluation give the same numbers."""

from __future__ import annotations

import json

import pytest
import torch

import seqzoo
from seqzoo.errors import InputError
from seqzoo.eval import evaluate
from seqzoo.tasks import IGNORE_INDEX, build_task
from seqzoo.train import TrainConfig, train


def tiny_lm(vocab=50, softcap=None, seed=0):
    torch.manual_seed(seed)
    cfg = seqzoo.ModelConfig(
        vocab_size=vocab, d_model=16, n_layers=2, pattern=["attention"], mixer_kwargs={"attention": {"n_heads": 2}}
    )
    if softcap is not None:
        cfg = cfg.replace(logit_softcap=softcap)
    return seqzoo.LanguageModel(cfg)


@pytest.mark.parametrize("softcap", [None, 5.0])
def test_masked_head_equals_full_head_float64(softcap):
    model = tiny_lm(softcap=softcap).double()
    task = build_task("mqar", vocab_size=50, num_pairs=3, seq_len=24, protocol="zoology")
    x, y = task.build(4, 0)
    mask = y != IGNORE_INDEX

    full = model(x, labels=y)
    part = model(x, labels=y, logits_mask=mask)
    assert part.logits.shape == (int(mask.sum()), 50)
    torch.testing.assert_close(part.logits, full.logits[mask], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(part.loss, full.loss, rtol=1e-6, atol=0.0)  # lm_loss sums in float32
    # gradients through a float64 cross-entropy: only the head's rows differ between the two paths
    ce = torch.nn.functional.cross_entropy
    loss_full = ce(full.logits.reshape(-1, 50), y.flatten(), ignore_index=IGNORE_INDEX)
    grads_full = torch.autograd.grad(loss_full, list(model.parameters()))
    grads_part = torch.autograd.grad(ce(part.logits, y[mask]), list(model.parameters()))
    for a, b in zip(grads_part, grads_full):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_bad_mask_refused():
    model = tiny_lm()
    x = torch.randint(0, 50, (2, 8))
    with pytest.raises(InputError, match="logits_mask must be a bool tensor of shape"):
        model(x, logits_mask=torch.ones(2, 7, dtype=torch.bool))
    with pytest.raises(InputError, match="logits_mask must be a bool tensor"):
        model(x, logits_mask=torch.ones(2, 8))


def test_evaluate_same_numbers():
    model = tiny_lm()
    x, y = build_task("mqar", vocab_size=50, num_pairs=3, seq_len=24).build(40, 1, "valid")
    a = evaluate(model, x, y, batch_size=16)
    b = evaluate(model, x, y, batch_size=16, scored_logits=True)
    assert a["scored"] == b["scored"] and a["accuracy"] == b["accuracy"]
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-6)


def test_training_follows_the_full_head(tmp_path):
    task = build_task("mqar", vocab_size=50, num_pairs=3, seq_len=24, protocol="zoology")
    results = {}
    for scored in (False, True):
        cfg = TrainConfig(
            steps=6, batch_size=8, lr=3e-3, warmup_steps=1, eval_every=3, eval_samples=32, log_every=1,
            device="cpu", precision="fp32", progress=False, scored_logits=scored, out_dir=str(tmp_path / str(scored)),
        )  # fmt: skip
        results[scored] = train(tiny_lm(), task, cfg)
        lines = (tmp_path / str(scored) / "metrics.jsonl").read_text().splitlines()
        results[scored]["losses"] = [json.loads(line)["loss"] for line in lines]
    assert results[True]["losses"] == pytest.approx(results[False]["losses"], rel=1e-5)
    assert results[True]["valid_accuracy"] == results[False]["valid_accuracy"]


def test_refused_before_anything_is_written(tmp_path):
    class NoMask(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids):
            raise AssertionError("never reached")

    out = tmp_path / "run"
    task = build_task("mqar", vocab_size=50, num_pairs=3, seq_len=24)
    with pytest.raises(InputError, match="scored_logits needs a model whose forward takes logits_mask"):
        train(NoMask(), task, TrainConfig(steps=1, scored_logits=True, out_dir=str(out), progress=False))
    assert not out.exists()
    with pytest.raises(InputError, match="TrainConfig.scored_logits must be true or false"):
        TrainConfig(scored_logits="yes")
