"""Parity of seqzoo's RMT + Hugging Face GPT-2 with the RMT authors' decoder wrapper (fixtures/rmt, README §8
there): logits, loss, the memory written by every segment and the gradients w.r.t. memory and embeddings;
the authors' truncation rule (``bptt_keep_first``) against a hand-written unroll. Skipped without transformers
or without ../shared."""

import itertools
from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqzoo.errors import InputError
from seqzoo.models.rmt import RMT, RMTConfig
from seqzoo.parity.rmt import (
    authors_kept_handovers,
    authors_truncation,
    build_from_case,
    load_case,
    run_case,
    truncation,
)

# float32 bars: measured gap 0 (bit for bit) for every key in both cases except the k2 case's loss (4.8e-7, one
# float32 ulp at 4.15: seqzoo sums the cross-entropy per segment) with torch 2.13.0+cpu, transformers 5.23.0; the
# bars leave room for other kernels / thread counts. |logits|, |memory| <= 3.2, |grad| <= 0.15.
ATOL32 = {"output": 2e-5, "state": 2e-5, "grad": 1e-6}
# float64 model vs the float32 fixture: measured max gaps 1.4e-7 (logits), 1.6e-7 (loss), 7.9e-7 (states),
# 3.8e-9 (grad:memory), 2.8e-8 (grad:wte): the fixture's own float32 rounding
ATOL64 = {"output": 2e-6, "state": 5e-6, "grad": 2e-7}


@pytest.fixture
def fixtures_dir(shared):
    path = shared / "fixtures" / "rmt"
    if not path.is_dir():
        pytest.skip(f"{path} not present")
    return path


def _gaps(got, fx):
    ref = {f"{kind}:{name}": v for kind in ("output", "state", "grad") for name, v in fx[kind].items()}
    assert set(got) == set(ref)
    return {k: float((got[k].double() - ref[k].double()).abs().max()) for k in ref}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", ["gpt2_full_bptt", "gpt2_k2_1"])
def test_matches_the_authors_wrapper(fixtures_dir, case, dtype):
    """Both cases, with the truncation the fixture's code actually ran (none: see the next test)."""
    fx = load_case(fixtures_dir, case)
    model = build_from_case(fx, dtype, rule="as_stored")
    assert model.config.bptt_depth == -1
    gaps = _gaps(run_case(model, fx), fx)
    bars = ATOL32 if dtype == torch.float32 else ATOL64
    assert len(gaps) == 8  # logits, loss, 4 segment memories, 2 gradients
    for key, gap in gaps.items():
        assert gap <= bars[key.split(":")[0]], f"{case} {dtype} {key}: {gap:.2e}"


def test_stored_k2_gradients_are_full_bptt(fixtures_dir):
    """At the fixture's commit (9d0ebe1) the authors' truncation is a no-op: the stored k2 = 1 gradients differ
    from both truncation rules by about their own size, while logits, loss and states agree under every rule."""
    fx = load_case(fixtures_dir, "gpt2_k2_1")
    scale = float(fx["grad"]["memory"].abs().max())
    for rule in ("authors", "last_k"):
        model = build_from_case(fx, torch.float32, rule=rule)
        assert model.config.bptt_depth == (0 if rule == "authors" else 1)
        gaps = _gaps(run_case(model, fx), fx)
        assert gaps["grad:memory"] > 0.3 * scale, rule  # measured 1.6e-2 (authors), 1.7e-2 (last_k); scale 1.6e-2
        assert gaps["grad:wte"] > 1e-4, rule  # measured 9.0e-4, 1.1e-3
        for key, gap in gaps.items():
            if not key.startswith("grad:"):
                assert gap <= ATOL32[key.split(":")[0]], f"{rule} {key}: {gap:.2e}"


def _unroll_grads(model, ids, kept):
    """Reference: the authors' cell written out with transformers calls, ``.detach()`` at hand-overs not kept."""
    gpt2 = model.backbone.model
    emb, m, L = gpt2.get_input_embeddings(), model.config.num_mem_tokens, model.config.segment_size
    B, T = ids.shape
    mem, logits = model.memory.repeat(B, 1, 1), []  # the authors' set_memory uses repeat
    for tau, a in enumerate(range(0, T, L)):
        if tau >= 1 and tau not in kept:
            mem = mem.detach()
        seg = ids[:, a : a + L]
        out = gpt2(inputs_embeds=torch.cat([mem, emb(seg), mem], dim=1), output_hidden_states=True)
        logits.append(out.logits[:, m:-m])
        mem = out.hidden_states[-1][:, -m:]
    full = torch.cat(logits, dim=1)
    loss = torch.nn.functional.cross_entropy(full[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("backward", ["autograd", "memory_replay"])
def test_keep_first_equals_authors_fixed_rule(fixtures_dir, backward):
    """``bptt_keep_first`` reproduces the authors' fixed rule (commit 9e94a1d) on the fixture's model (float64):
    k2 = 1, max_n_segments = 4, N = 4 keeps only hand-over 1."""
    fx = load_case(fixtures_dir, "gpt2_k2_1")
    model = build_from_case(fx, torch.float64, rule="authors")
    assert model.config.bptt_keep_first
    ids = fx["input"]["input_ids"]
    kept = authors_kept_handovers(1, 4, 4)
    assert kept == [1]
    ref = _unroll_grads(model, ids, kept)
    model.zero_grad(set_to_none=True)
    if backward == "autograd":
        model(ids, labels=ids, shift_labels=True).loss.backward()
    else:
        model.backward_mrbp(ids, labels=ids, shift_labels=True)
    got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert set(got) == set(ref)
    for n in ref:
        torch.testing.assert_close(got[n], ref[n], rtol=1e-10, atol=1e-13, msg=n)
    # the option matters: without it (plain bptt_depth=0) P gets a different gradient
    full = _unroll_grads(model, ids, kept=[])
    assert float((full["memory"] - ref["memory"]).abs().max()) > 1e-3


def test_authors_truncation_map():
    """The closed form keeps exactly the hand-overs of the authors' rule, for every k2, max_n_segments, N."""
    for max_n, k2 in itertools.product(range(1, 7), [-1, None, 0, 1, 2, 3, 4, 5, 8]):
        for n in range(1, max_n + 1):
            cfg = authors_truncation(k2, max_n, n)
            holder = SimpleNamespace(config=RMTConfig(segment_size=16, num_mem_tokens=1, **cfg))
            got = [tau for tau in range(1, n) if RMT.handover_kept(holder, tau, n)]  # needs only the config
            assert got == authors_kept_handovers(k2, max_n, n), (k2, max_n, n, cfg)
    assert authors_kept_handovers(1, 4, 4) == [1]
    assert authors_kept_handovers(3, 4, 4) == [1, 3]
    assert truncation("last_k", 1, 4, 4) == {"bptt_depth": 1, "bptt_keep_first": False}
    assert truncation("as_stored", 1, 4, 4) == {"bptt_depth": -1, "bptt_keep_first": False}


def test_bad_input():
    with pytest.raises(InputError, match="max_n_segments"):
        authors_truncation(1, 3, 4)  # the input has more segments than the authors' limit
    with pytest.raises(InputError, match="rule"):
        truncation("paper", 1, 4, 4)
    with pytest.raises(InputError, match="bptt_keep_first"):
        RMT(_tiny_gpt2(), RMTConfig(num_mem_tokens=2, segment_size=4, bptt_keep_first=1))


def _tiny_gpt2():
    cfg = transformers.GPT2Config(vocab_size=16, n_positions=16, n_embd=8, n_layer=1, n_head=2)
    return transformers.GPT2LMHeadModel(cfg)
