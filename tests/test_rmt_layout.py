"""RMT wrapper: zero-memory sanity, layout, streaming, generation, save/load and bad input
(docs/rmt.md "Tests"). Helpers and tiny float64 backbones come from rmt_helpers.py."""

import itertools
import math

import pytest
import torch
from rmt_helpers import CFG, D, L, M, V, data, make

from seqzoo.models import LanguageModel
from seqzoo.models.rmt import RMT, RMTConfig, read_write_mask, segment_bounds


# ------------------------------------------------------------------ zero memory (sanity)
@pytest.mark.parametrize("T", [1, 5, 17, 20])
def test_zero_memory_equals_backbone_per_segment(T):
    r = make("lm", num_mem_tokens=0)
    assert r.memory is None and not [n for n, _ in r.named_parameters() if not n.startswith("backbone.")]
    ids, _, _ = data(T)
    logits = r(ids).logits
    bb = r.backbone.model
    ref = torch.cat([bb(ids[:, a:b]).logits for a, b in segment_bounds(T, L, "left")], dim=1)
    assert logits.shape == (2, T, V)
    assert float((logits - ref).abs().max()) <= 1e-12
    if T <= L:  # N = 1: the plain backbone on the whole input
        assert float((logits - bb(ids).logits).abs().max()) <= 1e-12


def test_reset_ablation_equals_each_segment_from_P():
    r = make("lm", reset_memory=True)
    ids, _, _ = data(17)
    logits = r(ids).logits
    bb = r.backbone.model
    P = r.memory.expand(2, M, D)
    ref = []
    for a, b in segment_bounds(17, L, "left"):
        h, _ = bb.trunk(inputs_embeds=torch.cat([P, bb.embed_tokens(ids[:, a:b]), P], 1))
        ref.append(bb.lm_head(h[:, M : M + b - a]))
    assert float((logits - torch.cat(ref, 1)).abs().max()) <= 1e-12


# ------------------------------------------------------------------ layout
@pytest.mark.parametrize("align", ["left", "right", "center"])
@pytest.mark.parametrize("T", [1, 5, 17, 20])
def test_output_length_and_segments(align, T):
    r = make("lm", segment_alignment=align)
    out = r(data(T)[0], labels=data(T)[1])
    assert out.logits.shape == (2, T, V) and out.n_segments == math.ceil(T / L)
    assert out.segment_losses.shape == (out.n_segments,)
    b = segment_bounds(T, L, align)
    assert b[0][0] == 0 and b[-1][1] == T and all(x[1] == y[0] for x, y in itertools.pairwise(b))
    assert all(0 < s - a <= L for a, s in b)
    if align == "right":
        assert b[-1][1] - b[-1][0] == min(L, T)


def test_write_slot_inputs_never_reach_logits():
    r = make("lm", write_init="learned")
    ids, _, _ = data(17)
    before = r(ids).logits[:, :L]  # first segment: only the write-slot input changes
    with torch.no_grad():
        r.write_table.add_(torch.randn_like(r.write_table))
    after = r(ids).logits
    assert float((before - after[:, :L]).abs().max()) <= 1e-12
    assert float((r(ids).logits[:, L:] - after[:, L:]).abs().max()) == 0.0


def test_later_segments_see_earlier_ones_only_through_memory():
    ids, _, _ = data(10)
    ids2 = ids.clone()
    ids2[:, :L] = (ids2[:, :L] + 1) % V  # change segment 0 only
    r0 = make("lm", num_mem_tokens=0)
    assert float((r0(ids).logits[:, L:] - r0(ids2).logits[:, L:]).abs().max()) == 0.0
    r = make("lm")
    assert float((r(ids).logits[:, L:] - r(ids2).logits[:, L:]).abs().max()) > 1e-6
    # the (B, m, D) memory is the only thing passed: continuing from segment 0's memory reproduces segment 1
    mem = r(ids2[:, :L], return_memory=True).memory
    assert float((r(ids2[:, L:], memory=mem).logits - r(ids2).logits[:, L:]).abs().max()) <= 1e-12


def test_streaming_two_calls_equal_one():
    r = make("lm")
    ids, _, _ = data(17)
    one = r(ids, return_memory=True)
    first = r(ids[:, :10], return_memory=True)
    second = r(ids[:, 10:], memory=first.memory, return_memory=True)
    assert float((torch.cat([first.logits, second.logits], 1) - one.logits).abs().max()) <= 1e-12
    assert float((second.memory - one.memory).abs().max()) <= 1e-12


@pytest.mark.parametrize("prompt", [3, 5, 7])
def test_generate_matches_teacher_forcing_across_rollover(prompt):
    r = make("lm", memory_slot_emb=True)
    ids, _, _ = data(prompt)
    out = r.generate(ids, max_new_tokens=12)  # crosses at least two segment boundaries
    assert out.shape == (2, prompt + 12)
    tf = r(out).logits.argmax(-1)
    assert torch.equal(tf[:, prompt - 1 : -1], out[:, prompt:])


def test_shift_labels_is_one_global_shift():
    r = make("lm")
    ids, _, _ = data(17)
    aligned = torch.cat([ids[:, 1:], torch.full((2, 1), -100)], 1)
    a = r(ids, labels=aligned).loss
    b = r(ids, labels=ids, shift_labels=True).loss
    assert abs(float(a - b)) <= 1e-12


def test_save_and_load_roundtrip(tmp_path):
    r = make("enc", memory_slot_emb=True)
    ids, _, _ = data(12)
    r.save_pretrained(tmp_path / "rmt")
    r2 = RMT.from_pretrained(tmp_path / "rmt").double()
    assert r2.config == r.config
    assert float((r(ids).logits - r2(ids).logits).abs().max()) <= 1e-12


def test_local_attention_backbone_works():
    """Memory on any registered causal mixer stack (here sliding-window attention)."""
    torch.manual_seed(0)
    cfg = CFG.replace(pattern=["local_attention"], mixer_kwargs={"local_attention": {"n_heads": 4, "window": 16}})
    r = RMT(LanguageModel(cfg), num_mem_tokens=2, segment_size=6).double()
    with pytest.warns(UserWarning, match="sliding-window"):
        RMT(LanguageModel(cfg), num_mem_tokens=2, segment_size=15)
    ids, labels, _ = data(15)
    out = r(ids, labels=labels)
    out.loss.backward()
    assert out.logits.shape == (2, 15, V) and r.memory.grad.abs().sum() > 0
    assert torch.equal(r(r.generate(ids[:, :4], 5)).logits.argmax(-1)[:, 3:-1], r.generate(ids[:, :4], 5)[:, 4:])


# ------------------------------------------------------------------ bad input
class NoEmbeds(torch.nn.Module):
    d_model, causal = 8, True

    def forward(self, x):
        return x


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_mem_tokens": -1}, "num_mem_tokens"),
        ({"num_mem_tokens": 2.0}, "num_mem_tokens"),
        ({"segment_size": 0}, "segment_size"),
        ({"segment_size": 3, "num_mem_tokens": 3}, r"segment_size \(3\) must be larger than num_mem_tokens \(3\)"),
        ({"placement": "encoder"}, "bidirectional"),
        ({"attn_mask": "rmt"}, "supports_custom_mask"),
        ({"bptt_depth": -2}, "bptt_depth"),
        ({"task": "classification"}, "num_labels"),
        ({"checkpoint": "bogus"}, "checkpoint"),
    ],
)
def test_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make("lm", **kwargs)


def test_bad_backbones():
    with pytest.raises(TypeError, match="input embeddings"):
        RMT(NoEmbeds(), num_mem_tokens=2, segment_size=5)
    with pytest.raises(ValueError, match="task='lm' needs a causal backbone"):
        make("enc", task="lm")

    class Small(NoEmbeds):
        max_positions = 10

        def embed(self, ids):
            return torch.zeros(*ids.shape, 8)

        def forward_embeds(self, x, **kw):
            return x

    with pytest.raises(ValueError, match=r"= 11 exceeds the backbone's max_positions=10"):
        RMT(Small(), num_mem_tokens=3, segment_size=5)


def test_bad_inputs():
    r = make("lm", max_n_segments=3)
    ids, labels, _ = data(10)
    with pytest.raises(TypeError, match="input_ids"):
        r(ids.double())
    with pytest.raises(ValueError, match="input_ids must have shape"):
        r(ids[0])
    with pytest.raises(ValueError, match="T = 0"):
        r(ids[:, :0])
    with pytest.raises(ValueError, match="max_n_segments=3"):
        r(torch.zeros(2, 16, dtype=torch.long))
    with pytest.raises(ValueError, match="memory must have shape"):
        r(ids, memory=torch.zeros(2, 4, D))
    with pytest.raises(ValueError, match="labels must have the shape of input_ids"):
        r(ids, labels=labels[:, :3])
    e = make("enc")
    with pytest.raises(ValueError, match=r"labels must have shape \(B,\)"):
        e(ids, labels=labels)
    with pytest.raises(ValueError, match=r"num_labels=6"):
        e(ids, labels=torch.tensor([0, 6]))


def test_carry_backbone_state_runs_and_is_detached():
    r = make("lm", carry_backbone_state=True)
    ids, labels, _ = data(17)
    out = r(ids, labels=labels)
    out.loss.backward()
    assert out.logits.shape == (2, 17, V) and float(r.memory.grad.abs().sum()) > 0
    # the carried KV cache changes later segments compared with the plain recurrence
    plain = make("lm")
    assert float((plain(ids).logits[:, L:] - r(ids).logits[:, L:]).abs().max()) > 1e-6


class ToyMaskedBackbone(torch.nn.Module):
    """One explicit softmax-attention layer that accepts a (T, T) boolean mask; records its last hidden states."""

    d_model, causal, max_positions, supports_custom_mask = 16, True, None, True

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(V, 16)
        self.qkv = torch.nn.Linear(16, 48)
        self.head = torch.nn.Linear(16, V)
        self.last = None

    def embed(self, ids):
        return self.emb(ids)

    def forward_embeds(self, x, attn_mask=None, key_padding_mask=None, **kw):
        T = x.shape[1]
        mask = attn_mask if attn_mask is not None else torch.ones(T, T, dtype=torch.bool).tril()
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # (B, T, 16) each
        att = (q @ k.transpose(1, 2) / 4).masked_fill(~mask, float("-inf")).softmax(-1)  # (B, T, T)
        self.last = x + att @ v
        return self.last

    def lm_head(self, h):
        return self.head(h)


@pytest.mark.parametrize("kind", ["causal", "rmt"])
def test_read_write_masks(kind):
    bb = ToyMaskedBackbone().double()
    r = RMT(bb, RMTConfig(num_mem_tokens=M, segment_size=L, attn_mask=kind)).double()
    ids, _, _ = data(L)
    r(ids)
    h1 = bb.last.clone()  # (B, L + 2m, D): [read ; segment ; write]
    ids2 = ids.clone()
    ids2[:, 2] = (ids2[:, 2] + 1) % V
    r(ids2)
    h2 = bb.last
    assert torch.equal(h1[:, :M], h2[:, :M])  # read slots never see the segment
    assert not torch.allclose(h1[:, L + M :], h2[:, L + M :])  # write slots do
    mask = read_write_mask(M, L, kind)
    assert bool(mask[0, 1]) == (kind == "rmt")  # read slot 0 sees read slot 1 only under "rmt"
    assert not mask[M : M + L, M + L :].any()  # segment tokens never see the write slots
    assert mask[M + L :, : M + L].all()  # write slots see the read block and the whole segment
