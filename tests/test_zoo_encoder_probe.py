"""The zoo's encoder-side recall probe (``orchid_recall``): the task's multi-query layout, and that the encoder
models read the scored positions with the whole context in view (no training; docs/zoo.md "The encoder probe")."""

import pytest

from seqzoo.errors import InputError
from seqzoo.experiments.zoo import OPTIONS, build_specs
from seqzoo.sweep import resolve_options
from seqzoo.sweep.train_run import build
from seqzoo.tasks import build_task
from seqzoo.tasks.base import IGNORE_INDEX


@pytest.mark.parametrize("n_queries", [1, 3, 8])
def test_associative_recall_queries_are_scored_with_their_values_and_never_answered_in_the_input(n_queries):
    task = build_task("associative_recall", vocab_size=10, seq_len=32, num_queries=n_queries)
    x, y = task.build(200, seed=1)
    assert x.shape == y.shape == (200, 32 + 1 + n_queries) and task.seq_len == x.shape[1]
    assert (x[:, 32] == task.query_token).all()
    assert (y[:, :-n_queries] == IGNORE_INDEX).all() and (y[:, -n_queries:] != IGNORE_INDEX).all()
    keys, vals, queries = x[:, 0:32:2], x[:, 1:32:2], x[:, -n_queries:]
    assert (queries < task.n_keys).all()  # the query region holds keys only: no answer can be read off
    for i in range(200):
        for j in range(n_queries):
            hit = keys[i] == queries[i, j]
            assert hit.any() and (vals[i][hit] == y[i, -n_queries + j]).all()
    # one query keeps the old run configuration (and hence the old run hashes)
    assert "num_queries" not in build_task("associative_recall", vocab_size=10, seq_len=32).config()
    assert task.config().get("num_queries", 1) == n_queries


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_associative_recall_refuses_bad_num_queries(bad):
    with pytest.raises(InputError, match="num_queries"):
        build_task("associative_recall", vocab_size=10, seq_len=32, num_queries=bad)


def test_zoo_encoders_score_the_targets_with_the_whole_context_in_view():
    """Each encoder of ``orchid_recall`` is built as the zoo builds it; the logits at the scored positions must
    depend on every context token (a causal or a pooled reference would break this) and the output must have one
    position per target."""
    opts = resolve_options(OPTIONS, {"probes": "orchid_recall", "seeds": "0", "progress": False}, "zoo")
    specs = build_specs(opts)[0]
    assert sorted(s.labels["model"] for s in specs) == ["attention_encoder", "orchid"]
    for spec in specs:
        model, task = build(spec.config)
        assert not getattr(model, "causal_stack", True)
        assert not any(block.mixer.causal for block in model.blocks)  # each query also sees what comes after it
        if spec.labels["model"] == "attention_encoder":  # Orchid's short convolution (conv_size 3) before attention
            assert all(block.mixer.short_conv == 3 for block in model.blocks)
        x, y = task.build(4, seed=0)
        emb = model.embed_tokens(x).detach().requires_grad_(True)
        logits = model(inputs_embeds=emb).logits
        assert logits.shape[:2] == y.shape
        scored = y != IGNORE_INDEX
        logits[scored].logsumexp(-1).sum().backward()
        reach = emb.grad.abs().sum(-1)  # (B, T): how much each input position moves the scored logits
        assert (reach > 0).all(), spec.labels["model"]
