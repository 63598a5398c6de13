"""RMT around Hugging Face transformers backbones (optional dependency; skipped without transformers):
small random GPT-2 / GPT-NeoX / BERT configs, gradient equality with an unroll, KV-cache generation,
the position budget, and LoRA through peft (docs/rmt.md)."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from seqzoo.models.rmt import RMT, RMTConfig

V, M, L = 100, 3, 6


def gpt2(n_positions=64):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=V,
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=n_positions,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return transformers.GPT2LMHeadModel(cfg).eval()


def bert():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=2 * V + 10,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return transformers.BertModel(cfg).eval()


def ids(T, B=2, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def test_gpt2_gradient_equals_unroll():
    model = gpt2().double()
    r = RMT(model, RMTConfig(num_mem_tokens=M, segment_size=L)).double()
    x = ids(15)  # 3 segments, the last one short
    labels = torch.cat([x[:, 1:], torch.full((2, 1), -100)], 1)
    r.zero_grad()
    r(x, labels=labels).loss.backward()
    g_rmt = {n: p.grad.clone() for n, p in r.named_parameters() if p.grad is not None}
    r.zero_grad()
    mem, total = r.memory.expand(2, M, 64), 0.0
    emb = model.get_input_embeddings()
    for a in range(0, 15, L):
        seg = x[:, a : a + L]
        n = seg.shape[1]
        h = model(inputs_embeds=torch.cat([mem, emb(seg), mem], 1), output_hidden_states=True).hidden_states[-1]
        logits = model.lm_head(h[:, M : M + n])
        total = total + torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), labels[:, a : a + n].flatten(), ignore_index=-100, reduction="sum"
        )
        mem = h[:, M + n :]
    (total / (labels != -100).sum()).backward()
    for n, p in r.named_parameters():
        if n in g_rmt:
            assert torch.allclose(g_rmt[n], p.grad, rtol=1e-10, atol=1e-14), n


def test_gpt2_generate_uses_kv_cache_and_matches_teacher_forcing():
    r = RMT(gpt2(), RMTConfig(num_mem_tokens=M, segment_size=L))
    x = ids(4)
    out = r.generate(x, max_new_tokens=10)  # rolls over twice
    tf = r(out).logits
    assert torch.equal(tf.argmax(-1)[:, 3:-1], out[:, 4:])


def test_gpt2_position_budget():
    with pytest.raises(ValueError, match=r"= 20 exceeds the backbone's max_positions=16"):
        RMT(gpt2(n_positions=16), RMTConfig(num_mem_tokens=3, segment_size=14))


def test_gpt_neox_backbone():
    torch.manual_seed(0)
    cfg = transformers.GPTNeoXConfig(
        vocab_size=V,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=64,
    )
    r = RMT(transformers.GPTNeoXForCausalLM(cfg).eval(), RMTConfig(num_mem_tokens=M, segment_size=L))
    x = ids(13)
    out = r(x, labels=x, shift_labels=True)
    out.loss.backward()
    assert out.logits.shape == (2, 13, V) and r.memory.grad.abs().sum() > 0


def test_bert_encoder_classification_layout():
    model = bert()
    r = RMT(model, RMTConfig(num_mem_tokens=M, segment_size=L, num_labels=6))
    assert r.config.placement == "encoder" and r.cls_token is None  # [CLS] comes from BERT's vocabulary
    x = ids(14)
    y = torch.tensor([0, 5])
    out = r(x, labels=y)
    out.loss.backward()
    assert out.logits.shape == (2, 6) and r.memory.grad.abs().sum() > 0
    # budget: [CLS] + m + [SEP] + L + [SEP] <= 32 positions
    with pytest.raises(ValueError, match="max_positions=32"):
        RMT(model, RMTConfig(num_mem_tokens=10, segment_size=20, num_labels=6))
    with pytest.raises(ValueError, match="bidirectional"):
        RMT(gpt2(), RMTConfig(num_mem_tokens=M, segment_size=L, placement="encoder"))


def test_lora_peft_trains_only_memory_and_adapters():
    pytest.importorskip("peft")
    from seqzoo.models.rmt_hf import lora_backbone

    r = RMT(lora_backbone(gpt2(), r=4, target_modules=["c_attn"]), RMTConfig(num_mem_tokens=M, segment_size=L))
    n_train = r.freeze_backbone()
    names = [n for n, p in r.named_parameters() if p.requires_grad]
    assert "memory" in names and names and all(n == "memory" or "lora_" in n for n in names)
    assert n_train < sum(p.numel() for p in r.parameters()) // 10
    x = ids(12)
    r(x, labels=x, shift_labels=True).loss.backward()
    assert all(p.grad is None for n, p in r.named_parameters() if not p.requires_grad)
    assert all(p.grad is not None for n, p in r.named_parameters() if p.requires_grad)


def test_padded_sample_keeps_memory_through_an_empty_segment():
    r = RMT(gpt2(), RMTConfig(num_mem_tokens=M, segment_size=L))
    x = ids(12)  # 2 segments; sample 1 has no real token in segment 1
    mask = torch.ones_like(x)
    mask[1, L:] = 0
    with torch.no_grad():
        full = r(x, attention_mask=mask, return_memory=True)
        first = r(x[:, :L], return_memory=True)
    assert torch.allclose(full.memory[1], first.memory[1], atol=1e-6)
    assert not torch.allclose(full.memory[0], first.memory[0], atol=1e-4)
