"""The RMT curriculum protocol (arXiv:2304.11062 Fig. 11; docs/rmt.md E4/E5): memorize keeps its fact in the first
segment at every evaluated length, the backbone is pre-trained in the same sweep and loaded by the curriculum runs,
whose configuration names the pre-training run (a changed pre-training retrains them), and a rerun trains nothing.
Tiny generated data (byte tokenizer, one small book), seconds."""

import inspect
import json

import pytest
import torch

from seqzoo.errors import InputError
from seqzoo.experiments import get_experiment
from seqzoo.experiments.rmt import _pretrained_model, rmt_curriculum
from seqzoo.models.encoder import Encoder
from seqzoo.tasks.babi import PLACES, BabiMemory

BOOK = "It was a bright cold day in April, and the clocks were striking thirteen. " * 40
TINY = {
    "n_train": 2,
    "segment_size": 64,
    "mem": 2,
    "total_steps": 4,
    "methods": "naive,mixed",
    "eval_max": 3,
    "batch_size": 4,
    "eval_samples": 8,
    "seeds": "0",
    "tokenizer": "byte",
    "pretrain_steps": 3,
    "pretrain_batch_size": 4,
}


@pytest.fixture
def data(tmp_path):
    books = tmp_path / "data" / "gutenberg-nltk"
    books.mkdir(parents=True)
    (books / "a.txt").write_text(BOOK)
    return tmp_path / "data"


def _run(out, data, **kw):
    return get_experiment("rmt-curriculum").run(out, data_dir=str(data), cache_dir=str(data / "cache"), **kw)


def _logs(out):
    """run key -> mtime of its training log (it changes only when the run trains)."""
    logs = list((out / "runs").glob("*/train/curriculum.jsonl")) + list((out / "runs").glob("*/train/pretrain.jsonl"))
    return {p.parent.parent.name: p.stat().st_mtime_ns for p in logs}


def test_defaults_follow_the_protocol():
    p = inspect.signature(rmt_curriculum).parameters
    assert p["task"].default == "memorize" and p["seeds"].default == "0,1" and p["eval_max"].default == 16
    assert p["pretrain_steps"].default > 0 and p["lr"].default < p["pretrain_lr"].default  # low fine-tuning rate


def test_memorize_fact_is_in_the_first_segment_at_every_length(data):
    t = BabiMemory("memorize", 4, 64, tokenizer="byte", data_dir=data, cache_dir=data / "cache")
    for n in (1, 2, 4, 16):
        tn = t.with_segments(n)
        for split in ("train", "test"):
            samples = tn.build_samples(25, seed=1, split=split)
            for s in samples:
                ids = s["input_ids"]
                assert len(ids) == 64 * n and s["fact_offsets"] == [0] and s["fact_segments"] == [0]
                first = tn.decode(ids[:64])
                fact = first.split(".")[0] + "."
                assert first.startswith(" ") and f" to the {PLACES[s['label']]}." in fact  # whole fact, segment 0
                name = fact.split()[0]
                assert tn.decode(ids[-64:]).endswith(f" Where is {name}?")  # the question ends the last segment
                if n > 1:
                    assert " to the " not in tn.decode(ids[64:])  # nowhere else: only memory can carry it
            # no-memory ceiling: the fact is visible without memory only when it shares the question's segment
            assert tn.no_memory_ceiling(samples) == pytest.approx(1.0 if n == 1 else 1 / 6)


def test_pretrain_then_curriculum_files_and_rerun(tmp_path, data):
    out = tmp_path / "cur"
    rows = _run(out, data, **TINY)["results"]
    assert {(r["method"], r["n_eval"]) for r in rows} == {(m, n) for m in ("naive", "mixed") for n in (1, 2, 3)}
    pre = json.loads((out / "pretrain.json").read_text())
    key = pre["key"]
    assert (out / "runs" / key / "backbone" / "model.safetensors").is_file() and pre["steps"] == 3
    assert {r["pretrained"] for r in rows} == {key}
    for r in rows:  # every curriculum run names the pre-training run in its hashed configuration
        cfg = json.loads((out / "runs" / r["run"] / "config.json").read_text())["config"]
        assert cfg["model"]["pretrained"] == key and cfg["task"]["task"] == "memorize"
        assert cfg["optim"]["lr"] == pytest.approx(1e-4)
    assert [r["no_memory_ceiling"] for r in rows if r["method"] == "naive"] == pytest.approx(
        [1.0, 1 / 6, 1 / 6], abs=1e-4
    )
    for f in ("results.csv", "results.md", "config.json", "accuracy_vs_segments.png"):
        assert (out / f).is_file()
    first = _logs(out)
    assert len(first) == 3 and key in first  # one pre-training + two arms

    again = _run(out, data, **TINY)["results"]
    assert _logs(out) == first  # nothing trained again
    assert [r["accuracy"] for r in again] == [r["accuracy"] for r in rows]

    changed = _run(out, data, **{**TINY, "pretrain_steps": 4})["results"]
    now = _logs(out)
    new_keys = {r["run"] for r in changed} | {r["pretrained"] for r in changed}
    assert len(now) == 6 and not new_keys & set(first)  # a changed pre-training retrains every arm


def test_pretraining_learns_and_loads_into_the_rmt(tmp_path, data):
    out = tmp_path / "pre"
    _run(out, data, **{**TINY, "pretrain_steps": 40, "pretrain_lr": 3e-3, "total_steps": 2, "methods": "naive"})
    pre = json.loads((out / "pretrain.json").read_text())
    assert pre["valid_loss"] < pre["valid_loss_init"] - 0.5  # masked-LM on the book text did learn
    run = out / "runs" / pre["key"]
    task = BabiMemory("memorize", 2, 64, tokenizer="byte", data_dir=data, cache_dir=data / "cache")
    rmt = _pretrained_model(run, task, {"preset": "rmt-tiny", "num_mem_tokens": 2}, pool="cls")
    saved = Encoder.from_pretrained(run / "backbone").state_dict()
    got = rmt.backbone.model.state_dict()
    assert set(got) == set(saved) and all(torch.equal(got[k], saved[k]) for k in saved)
    with pytest.raises(InputError, match="has not finished"):
        _pretrained_model(out / "runs" / "missing", task, {"preset": "rmt-tiny", "num_mem_tokens": 2})
    other = BabiMemory("memorize", 2, 64, tokenizer="byte", data_dir=data, cache_dir=data / "cache", remap=False)
    with pytest.raises(InputError, match="vocab_size"):
        _pretrained_model(run, other, {"preset": "rmt-tiny", "num_mem_tokens": 2})


def test_bad_options(tmp_path, data):
    with pytest.raises(InputError, match="pretrain_steps"):
        _run(tmp_path / "x", data, **{**TINY, "pretrain_steps": -1})
    with pytest.raises(InputError, match="total_steps"):
        _run(tmp_path / "x", data, **{**TINY, "total_steps": 1})
