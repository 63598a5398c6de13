"""Tasks: determinism, independent target checks, text windows, GPT-2 BPE tokeniser."""

import numpy as np
import pytest
import torch

from seqzoo.tasks import TASKS, build_task
from seqzoo.tasks.tokenizers import ByteTokenizer, GPT2Tokenizer


def test_mqar_is_deterministic_and_splits_differ():
    t = build_task("mqar", vocab_size=32, num_pairs=4, seq_len=24)
    a, b = t.build(16, seed=3), t.build(16, seed=3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(t.build(16, 3, "valid")[0], a[0])
    assert not torch.equal(t.build(16, 4)[0], a[0])


@pytest.mark.parametrize("query_at_end", [False, True])
def test_mqar_targets_recomputed_independently(query_at_end):
    P, T, V = 5, 30, 40
    t = build_task("mqar", vocab_size=V, num_pairs=P, seq_len=T, num_queries=3, query_at_end=query_at_end)
    inputs, targets = t.build(50, seed=0)
    for x, y in zip(inputs.tolist(), targets.tolist()):
        pairs = {x[2 * i]: x[2 * i + 1] for i in range(P)}
        assert len(pairs) == P, "keys must be distinct"
        assert all(1 <= k < V // 2 for k in pairs) and all(V // 2 <= v < V for v in pairs.values())
        scored = [i for i, v in enumerate(y) if v != -100]
        assert len(scored) == 3 and all(i >= 2 * P for i in scored)
        for i in scored:
            assert y[i] == pairs[x[i]]
        for i in range(2 * P, T):
            if i not in scored:
                assert x[i] == 0
        if query_at_end:
            assert scored == [T - 3, T - 2, T - 1]


def test_mqar_rejects_impossible_settings():
    with pytest.raises(ValueError, match="num_pairs"):
        build_task("mqar", vocab_size=8, num_pairs=10, seq_len=64)
    with pytest.raises(ValueError, match="seq_len"):
        build_task("mqar", vocab_size=64, num_pairs=8, seq_len=10)
    with pytest.raises(ValueError, match="unknown task"):
        build_task("mqarr")


def test_byte_text_windows(tmp_path):
    text = "".join(chr(97 + (i * 7) % 26) for i in range(5000))
    (tmp_path / "a.txt").write_text(text)
    t = build_task("text", path=str(tmp_path), seq_len=32, cache_dir=str(tmp_path / "cache"))
    assert t.vocab_size == 256
    x, y = t.build(8, seed=0)
    assert x.shape == (8, 32) and torch.equal(x[:, 1:], y[:, :-1])
    for row in x.tolist():  # every window is a real substring of the train part
        assert bytes(row).decode() in text[: int(len(text) * 0.9) + 1]
    w_in, w_out = t.windows("valid")
    assert w_in.shape[1] == 32 and torch.equal(w_in[1:, 0], w_out[:-1, -1])
    assert len(list((tmp_path / "cache").glob("*.tokens"))) == 1
    build_task("text", path=str(tmp_path), seq_len=32, cache_dir=str(tmp_path / "cache"))  # reuses the cache
    assert len(list((tmp_path / "cache").glob("*.tokens"))) == 1
    with pytest.raises(ValueError, match="seq_len"):
        build_task("text", path=str(tmp_path), seq_len=4000, cache_dir=str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError):
        build_task("text", path=str(tmp_path / "missing.txt"))


def test_gpt2_tokenizer_known_ids_and_round_trip(shared):
    tok = GPT2Tokenizer(shared / "data" / "gpt2-bpe")
    assert tok.vocab_size == 50257 and tok.eos_token_id == 50256
    assert tok.encode("Hello world") == [15496, 995]
    assert tok.encode(" the") == [262]
    text = (shared / "data" / "tinyshakespeare" / "input.txt").read_text()[:3000]
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) < len(text) / 2.5  # BPE actually merges


def test_gpt2_tokenizer_matches_transformers(shared):
    transformers = pytest.importorskip("transformers")
    d = shared / "data" / "gpt2-bpe"
    import inspect

    params = inspect.signature(transformers.GPT2Tokenizer.__init__).parameters
    names = ("vocab", "merges") if "vocab" in params else ("vocab_file", "merges_file")  # transformers 5 vs 4
    ref = transformers.GPT2Tokenizer(**{names[0]: str(d / "encoder.json"), names[1]: str(d / "vocab.bpe")})
    ours = GPT2Tokenizer(d)
    text = (shared / "data" / "wikitext-2-raw" / "wiki.valid.raw").read_text()[:20000]
    assert ours.encode(text) == ref.encode(text)


def test_byte_tokenizer_round_trip():
    tok = ByteTokenizer()
    s = "héllo ✓"
    assert tok.decode(tok.encode(s)) == s


def test_registry_lists_the_core_tasks():
    assert {"mqar", "text"} <= set(TASKS)


def test_mlm_masking_rule_and_determinism(tmp_path):
    (tmp_path / "a.txt").write_text("the quick brown fox jumps over the lazy dog. " * 400)
    task = build_task("mlm", path=str(tmp_path / "a.txt"), seq_len=64, cache_dir=str(tmp_path / "c"), mask_prob=0.3)
    assert task.vocab_size == 257 and task.mask_token == 256
    x, y = task.build(256, seed=3)
    x2, y2 = task.build(256, seed=3)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(task.build(256, seed=4)[0], x)
    chosen = y != -100
    # rebuild the clean windows independently and check every rule
    clean, _ = build_task("text", path=str(tmp_path / "a.txt"), seq_len=64, cache_dir=str(tmp_path / "c")).build(
        256, seed=3
    )
    assert torch.equal(y[chosen], clean[chosen])  # targets are the original tokens
    assert torch.equal(x[~chosen], clean[~chosen])  # unchosen positions are untouched
    frac = chosen.float().mean().item()
    assert 0.27 < frac < 0.33, frac
    masked = (x[chosen] == 256).float().mean().item()
    kept = (x[chosen] == clean[chosen]).float().mean().item()
    assert 0.76 < masked < 0.84 and 0.08 < kept < 0.14, (masked, kept)  # kept includes random draws of the same id
    assert int(x.max()) <= 256 and (x[~chosen] != 256).all()
    vx, vy = task.windows("valid", max_windows=3)
    assert vx.shape == (3, 64) and (vy != -100).any()
    with pytest.raises(ValueError, match="mask_prob"):
        build_task("mlm", path=str(tmp_path / "a.txt"), mask_prob=1.0)


def test_mlm_trains_an_orchid_bert(tmp_path):
    """A few steps of masked-LM training through the trainer lower the masked-token loss."""
    import seqzoo
    from seqzoo.models.presets.orchid import orchid_bert_config
    from seqzoo.train import TrainConfig, train

    (tmp_path / "a.txt").write_text("abcabcabd " * 2000)
    task = build_task("mlm", path=str(tmp_path / "a.txt"), seq_len=32, cache_dir=str(tmp_path / "c"))
    torch.manual_seed(0)
    model = seqzoo.Encoder(orchid_bert_config(32, n_layers=1, filter_width=8, seq_len=32, vocab_size=task.vocab_size))
    res = train(
        model,
        task,
        TrainConfig(
            steps=60,
            batch_size=16,
            lr=3e-3,
            eval_every=60,
            eval_samples=64,
            out_dir=str(tmp_path / "run"),
            progress=False,
        ),
    )
    assert res["valid_loss"] < 0.6 * np.log(257), res
