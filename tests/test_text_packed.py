"""The ``text`` task on packed documents (issue #43): rows, ``segment_pos``, targets, cache, configuration, training.

Documents are the files of a folder (one each) or the pieces a ``separator`` ends. Checked against positions
computed independently from the documents' texts: ``segment_pos`` is the position inside the current document,
no target crosses a start, the separator found where it straddles two reads; without documents nothing changes;
bad options are refused before anything is written; one training step on packed text has the loss of each
document computed alone, and evaluation passes ``segment_pos`` too.
"""

import copy
import itertools
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import seqzoo
from seqzoo.errors import InputError
from seqzoo.eval.evaluate import evaluate
from seqzoo.tasks import build_task
from seqzoo.tasks import text as text_mod
from seqzoo.tasks.base import IGNORE_INDEX
from seqzoo.train import TrainConfig, train
from seqzoo.train.loop import BatchSource

DOCS = ["first document, short. ", "b", "the third one is longer than the others by far; ", "xy", "fifth, last doc!"]


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    for i, text in enumerate(DOCS):
        (d / f"{i:02d}.txt").write_text(text)
    return d


def stream_positions(docs):
    """Bytes of the concatenated documents and each token's position inside its document."""
    data = b"".join(t.encode() for t in docs)
    pos = np.concatenate([np.arange(len(t.encode())) for t in docs])
    return np.frombuffer(data, dtype=np.uint8).astype(np.int64), pos


def locate(tokens, row):
    """Offset of ``row`` in the stream (the rows are windows of it; the test texts make the offset unique)."""
    hits = [o for o in range(len(tokens) - len(row) + 1) if np.array_equal(tokens[o : o + len(row)], row)]
    assert len(hits) == 1
    return hits[0]


def check_rows(batch, tokens, pos, split_offset=0):
    inputs, targets, sp = (t.numpy() for t in batch)
    for x, y, s in zip(inputs, targets, sp):
        o = split_offset + locate(tokens[split_offset:], x)
        T = len(x)
        np.testing.assert_array_equal(s, pos[o : o + T])
        nxt = pos[o + 1 : o + T + 1]
        want = np.where(nxt == 0, IGNORE_INDEX, tokens[o + 1 : o + T + 1])  # no target crosses a start
        np.testing.assert_array_equal(y, want)


def test_folder_rows_have_document_positions_and_no_target_crosses_a_start(folder, tmp_path):
    task = build_task("text", path=str(folder), seq_len=12, valid_fraction=0.2, cache_dir=str(tmp_path / "c"))
    tokens, pos = stream_positions(DOCS)
    batch = task.build_batch(64, seed=0, split="train")
    assert batch.segment_pos is not None and batch.segment_pos.dtype == torch.long
    assert int((batch.segment_pos == 0).sum()) > 0 and int((batch.targets == IGNORE_INDEX).sum()) > 0
    check_rows(batch, tokens, pos)
    cut = int(len(tokens) * 0.8)  # the valid split begins inside a document: its positions count from its start
    check_rows(task.build_batch(8, seed=0, split="valid"), tokens, pos, split_offset=cut)
    x, y = task.build(64, seed=0, split="train")  # build: the same rows and targets, without segment_pos
    assert torch.equal(x, batch.inputs) and torch.equal(y, batch.targets)
    assert task.config()["packed"] is True


def test_separator_ends_documents_also_across_reads(tmp_path, monkeypatch):
    monkeypatch.setattr(text_mod, "CHUNK_CHARS", 5)  # the separator straddles reads; long documents split
    docs = ["abc<E>", "a much longer document here<E>", "<E>", "q<E>", "tail without end"]
    (tmp_path / "one.txt").write_text("".join(docs))
    task = build_task(
        "text", path=str(tmp_path / "one.txt"), seq_len=8, valid_fraction=0.3, separator="<E>", cache_dir=str(tmp_path)
    )
    tokens, pos = stream_positions(docs)
    np.testing.assert_array_equal(np.asarray(task.tokens("train")), tokens[: len(task.tokens("train"))])
    check_rows(task.build_batch(64, seed=1, split="train"), tokens, pos)
    assert task.config()["separator"] == "<E>" and task.config()["packed"] is True


def test_without_documents_nothing_changes(tmp_path, folder):
    (tmp_path / "one.txt").write_text("".join(DOCS) * 3)
    task = build_task("text", path=str(tmp_path / "one.txt"), seq_len=8, cache_dir=str(tmp_path / "c"))
    batch = task.build_batch(16, seed=0)
    assert batch.segment_pos is None and int((batch.targets == IGNORE_INDEX).sum()) == 0
    assert set(task.config()) == {"path", "seq_len", "tokenizer", "bpe_dir", "valid_fraction", "test_path"}
    assert not list((tmp_path / "c").glob("*.starts"))  # one document: the cache it always had
    off = build_task("text", path=str(folder), seq_len=8, packed=False, cache_dir=str(tmp_path / "c"))
    assert off.build_batch(4, seed=0).segment_pos is None and "packed" not in off.config()
    mlm = build_task("mlm", path=str(folder), seq_len=8, cache_dir=str(tmp_path / "c"))
    assert mlm.build_batch(4, seed=0).segment_pos is None and "packed" not in mlm.config()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"separator": ""}, "separator must be a non-empty string"),
        ({"separator": 3}, "separator must be a"),
        ({"separator": "<E>", "packed": False}, "needs packed=true"),
        ({"packed": "no"}, "packed must be true or false"),
    ],
)
def test_bad_options_are_refused_before_anything_is_written(tmp_path, folder, kwargs, match):
    cache = tmp_path / "never"
    with pytest.raises(InputError, match=match):
        build_task("text", path=str(folder), seq_len=8, cache_dir=str(cache), **kwargs)
    assert not cache.exists()


def test_cli_refuses_a_bad_separator_with_exit_code_2(tmp_path, folder):
    import subprocess
    import sys

    args = ["train", "--model", "attention-tiny", "--task", "text", "--task-arg", f"path={folder}"]
    args += ["--task-arg", "separator=3", "--steps", "1", "--out", str(tmp_path / "run"), "--no-progress"]
    res = subprocess.run([sys.executable, "-m", "seqzoo", *args], capture_output=True, text=True)
    assert res.returncode == 2 and "separator" in res.stderr and not (tmp_path / "run").exists()


@torch.no_grad()
def doc_alone_loss(model, batch):
    """Sum of cross-entropy and count of scored targets, each document of each row run alone. A row's first piece
    may be the tail of a document that began before the row: alone, it keeps its positions (RoPE, the RG-LRU's
    first-step rule), as the packed row gives them."""
    total, count = 0.0, 0
    for x, y, s in zip(*batch):
        bounds = [int(t) for t in torch.nonzero(s == 0).flatten()]
        bounds = sorted({0, *bounds, len(x)})
        for lo, hi in itertools.pairwise(bounds):
            extra = {"segment_pos": s[None, lo:hi]} if s[lo] != 0 else {}
            logits = model(x[None, lo:hi], **extra).logits[0]
            total = total + F.cross_entropy(logits.float(), y[lo:hi], ignore_index=IGNORE_INDEX, reduction="sum")
            count += int((y[lo:hi] != IGNORE_INDEX).sum())
    return total, count


@pytest.mark.parametrize("preset", ["hawk-tiny", "attention-tiny"])
def test_one_training_step_on_packed_text_has_the_loss_of_documents_alone(preset, folder, tmp_path):
    task = build_task("text", path=str(folder), seq_len=16, valid_fraction=0.2, cache_dir=str(tmp_path / "c"))
    torch.manual_seed(0)
    model = seqzoo.build_model(preset, vocab_size=task.vocab_size, d_model=32)
    before = copy.deepcopy(model)
    cfg = TrainConfig(steps=1, batch_size=4, eval_samples=4, progress=False, warmup_steps=0)
    result = train(model, task, cfg)
    batch = BatchSource(task, cfg).global_batch(0)
    assert batch.segment_pos is not None and int((batch.segment_pos[:, 1:] == 0).sum()) > 0
    total, count = doc_alone_loss(before, batch)
    assert result["train_loss"] == pytest.approx(float(total) / count, rel=1e-5)
    # evaluation passes segment_pos too: the trained model's valid loss is that of documents alone
    valid = task.build_batch(cfg.eval_samples, cfg.seed, "valid")
    v_total, v_count = doc_alone_loss(model, valid)
    assert result["valid_loss"] == pytest.approx(float(v_total) / v_count, rel=1e-5)
    m = evaluate(model, *valid[:2], segment_pos=valid.segment_pos)
    assert m["loss"] == pytest.approx(result["valid_loss"], rel=1e-6)


def test_run_files_record_packing(folder, tmp_path):
    task = build_task("text", path=str(folder), seq_len=16, valid_fraction=0.2, cache_dir=str(tmp_path / "c"))
    model = seqzoo.build_model("attention-tiny", vocab_size=task.vocab_size, d_model=32)
    train(model, task, TrainConfig(steps=1, batch_size=2, eval_samples=2, progress=False, out_dir=str(tmp_path / "r")))
    assert json.loads((tmp_path / "r" / "task.json").read_text())["packed"] is True


def test_a_model_that_cannot_take_segment_pos_is_refused_before_anything_is_written(folder, tmp_path):
    from seqzoo.eval.evaluate import segment_pos_refusal

    task = build_task("text", path=str(folder), seq_len=8, valid_fraction=0.2, cache_dir=str(tmp_path / "c"))
    model = seqzoo.build_model("encoder-tiny", vocab_size=task.vocab_size)  # bidirectional: no document restarts
    assert segment_pos_refusal(model) is not None
    with pytest.raises(InputError, match="packs documents"):
        train(model, task, TrainConfig(steps=1, batch_size=2, progress=False, out_dir=str(tmp_path / "run")))
    assert not (tmp_path / "run").exists()
    assert segment_pos_refusal(seqzoo.build_model("hawk-tiny", vocab_size=32)) is None


def test_exact_windows_and_the_sweeps_length_evaluation_are_packed_too(folder, tmp_path):
    from seqzoo.sweep.train_run import length_eval

    task = build_task("text", path=str(folder), seq_len=8, valid_fraction=0.4, cache_dir=str(tmp_path / "c"))
    tokens, pos = stream_positions(DOCS)
    windows = task.windows_batch("valid", seq_len=6)
    check_rows(windows, tokens, pos, split_offset=int(len(tokens) * 0.6))
    assert torch.equal(windows.targets, task.windows("valid", seq_len=6)[1])
    torch.manual_seed(0)
    model = seqzoo.build_model("hawk-tiny", vocab_size=task.vocab_size, d_model=32)
    res = length_eval(model, task, [6], tokens=12, bins=2)
    total, count = doc_alone_loss(model, task.windows_batch("valid", seq_len=6, max_windows=2))
    assert res["by_length"][0][1] == pytest.approx(float(total) / count, rel=1e-5)
