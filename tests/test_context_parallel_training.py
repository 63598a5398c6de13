"""Training with each sequence split along time (``TrainConfig.context_parallel``, seqzoo/train/context_parallel.py)
equals one process step by step: the logged losses and the parameters after every run, on gloo CPU ranks (2 ranks
as one context group; 4 ranks as 2 data x 2 context with DDP over the data dimension, with -m slow), and the refusals
that come before any work or file."""

import json
import os
import re

import pytest
import torch
from cp_harness import hybrid_lm, run_ranks
from packed_helpers import segment_pos_from_starts

from seqzoo.errors import InputError
from seqzoo.models import ModelConfig
from seqzoo.models.lm import LanguageModel
from seqzoo.tasks import build_task
from seqzoo.train import TrainConfig, train

STEPS = 3


def _model():
    """Global attention with a short convolution, then a window shorter than a rank's block, GQA, RoPE."""
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=64,
        d_model=32,
        pattern=["attention", "local_attention"],
        mixer_kwargs={
            "attention": {"n_heads": 4, "n_kv_heads": 2, "short_conv": 3},
            "local_attention": {"n_heads": 2, "window": 5},
        },
    )
    model = LanguageModel(config)
    with torch.no_grad():  # the short convolution starts at zero: give it weights, so that its halo matters
        model.blocks[0].mixer.conv_weight.normal_(std=0.3)
    return model


def _cfg(out, context_parallel, distributed="none"):
    return TrainConfig(
        steps=STEPS, batch_size=4, lr=3e-3, warmup_steps=0, log_every=1, eval_every=0, eval_samples=8,
        eval_batch_size=8, device="cpu", precision="fp32", progress=False, out_dir=str(out),
        context_parallel=context_parallel, distributed=distributed, seed=3,
    )  # fmt: skip


def _task():
    return build_task("mqar", vocab_size=64, num_pairs=4, seq_len=32)


def _losses(out):
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in lines if r["split"] == "train"]


def _ranked(rank, n, out, context_parallel):
    from pathlib import Path

    os.environ.update(WORLD_SIZE=str(n), RANK=str(rank), LOCAL_RANK=str(rank))  # as torchrun sets them
    model = _model()
    result = train(model, _task(), _cfg(Path(out), context_parallel, "ddp"))
    return {"params": {k: v.detach().clone() for k, v in model.state_dict().items()}, "result": result}


@pytest.mark.parametrize("n, context_parallel", [(2, 2), pytest.param(4, 2, marks=pytest.mark.slow)])
def test_training_steps_equal_one_process(tmp_path, n, context_parallel):
    one = _model()
    train(one, _task(), _cfg(tmp_path / "one", 1))
    ranks = run_ranks(_ranked, n, str(tmp_path / "split"), context_parallel)
    want, got = _losses(tmp_path / "one"), _losses(tmp_path / "split")
    assert len(got) == len(want) == STEPS
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-5, atol=0)
    for r in ranks:
        for name, p in one.state_dict().items():
            # AdamW divides by sqrt(v): an element whose gradient is float32 rounding noise moves by up to lr, so the
            # parameters are compared to a small fraction of lr (the float64 gradients are checked to 1e-10 below)
            torch.testing.assert_close(r["params"][name], p, rtol=1e-5, atol=5e-5, msg=lambda m, k=name: f"{k}: {m}")
        assert r["result"]["valid_loss"] == pytest.approx(ranks[0]["result"]["valid_loss"], rel=1e-6)


MODELS = {"attention": _model, "hybrid": hybrid_lm}
# packed documents: row 0 has a document crossing the cut of 2 ranks (t = 16) and of 4 ranks (t = 8, 24), row 1
# one starting exactly at the cut of 2 ranks; neither row starts at t = 0, so the initial states enter
SEGMENT_POS = segment_pos_from_starts([{10, 20}, {16}], 32)


def _model_loss(model, ids, labels, states, segment_pos=None, **split):
    """Summed cross-entropy over the scored tokens (float64), and the states after the sequence."""
    out = model(ids, states=states, segment_pos=segment_pos, **split)
    loss = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), labels.flatten(), reduction="sum")
    return loss, out.states


def _model_inputs():
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 64, (2, 4 + 32), generator=g)
    return ids[:, :4], ids[:, 4:], torch.randint(0, 64, (2, 32), generator=g)  # prefix, sequence, labels


def _model_grads(rank, n, kind, packed):
    import torch.distributed as dist

    model = MODELS[kind]().double()
    prefix, ids, labels = _model_inputs()
    with torch.no_grad():
        states = model(prefix).states  # an initial state per layer
    L = ids.shape[1] // n
    cut = slice(rank * L, (rank + 1) * L)
    pos = SEGMENT_POS[:, cut] if packed else None
    loss, _ = _model_loss(model, ids[:, cut], labels[:, cut], states, pos, context_parallel=dist.group.WORLD)
    loss.backward()
    total = loss.detach().clone()
    dist.all_reduce(total)
    for p in model.parameters():
        dist.all_reduce(p.grad)
    return {"loss": total, **{k: p.grad for k, p in model.named_parameters()}}


@pytest.mark.parametrize(
    "kind, packed, n",
    [("attention", False, 2), ("hybrid", True, 2), pytest.param("hybrid", True, 4, marks=pytest.mark.slow)],
)
def test_model_loss_and_gradients_equal_one_process_float64(kind, packed, n):
    """The whole model (embedding, every layer with its state from a prefix, MLPs, head) on n ranks; the hybrid with
    packed documents that cross a cut."""
    model = MODELS[kind]().double()
    prefix, ids, labels = _model_inputs()
    with torch.no_grad():
        states = model(prefix).states
    loss, _ = _model_loss(model, ids, labels, states, SEGMENT_POS if packed else None)
    loss.backward()
    for r in run_ranks(_model_grads, n, kind, packed):
        torch.testing.assert_close(r["loss"], loss.detach(), rtol=1e-10, atol=0)
        for k, p in model.named_parameters():
            torch.testing.assert_close(r[k], p.grad, rtol=1e-10, atol=1e-12, msg=lambda m, k=k: f"{k}: {m}")


def test_context_parallel_must_be_positive():
    with pytest.raises(InputError, match="context_parallel must be a positive int"):
        TrainConfig(context_parallel=0)


@pytest.mark.parametrize(
    "world, n, task_args, pattern, match",
    [
        ("3", 2, {}, ["attention"], "must divide the number of processes"),
        ("4", 4, {"seq_len": 30}, ["attention"], "must divide the task's seq_len"),
        ("2", 2, {}, ["attention", "slstm"], r"layer 1 \(slstm\) does not support context parallelism: the sLSTM"),
    ],
)
def test_refused_before_any_file(tmp_path, monkeypatch, world, n, task_args, pattern, match):
    monkeypatch.setenv("WORLD_SIZE", world)
    model = LanguageModel(ModelConfig(vocab_size=64, d_model=16, pattern=pattern))
    task = build_task("mqar", **{"vocab_size": 64, "num_pairs": 4, "seq_len": 32, **task_args})
    out = tmp_path / "run"
    with pytest.raises(InputError, match=match):
        train(model, task, _cfg(out, n, "none"))
    assert not out.exists()


def test_cli_refuses_a_layer_that_cannot_split_before_writing(tmp_path, monkeypatch, capsys):
    from seqzoo.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")  # as under torchrun; nothing is launched: the refusal comes first
    out = tmp_path / "run"
    argv = ["train", "--model", "xlstm-tiny", "--task", "mqar", "--context-parallel", "2", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # the first layer that refuses is named: the sLSTM at layer 1 (the mLSTM at layer 0 until it splits)
    assert len(err) == 1 and re.search(r"layer [01] \((slstm|mlstm)\) does not support context parallelism", err[0])
    assert not out.exists()
