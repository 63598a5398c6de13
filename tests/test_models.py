"""LanguageModel / Encoder: shapes, loss, states, generation, save/load, presets, errors."""

import json

import pytest
import torch
import torch.nn.functional as F

import seqzoo
from seqzoo import LanguageModel, ModelConfig
from seqzoo.models import PRESETS, Encoder
from seqzoo.models.sampling import filter_logits


def tiny(pattern=("attention",), **kw):
    cfg = dict(
        vocab_size=50,
        d_model=32,
        n_layers=3,
        pattern=list(pattern),
    )
    kwargs = {"attention": {"n_heads": 4}, "local_attention": {"n_heads": 4, "window": 4}}
    cfg["mixer_kwargs"] = {name: kwargs[name] for name in pattern if name in kwargs}
    cfg.update(kw)
    torch.manual_seed(0)
    return LanguageModel(ModelConfig(**cfg)).eval()


def ids(B=2, T=12, V=50, seed=0):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def test_forward_shapes_and_loss_matches_cross_entropy():
    m = tiny()
    x = ids()
    labels = x.clone()
    labels[:, :3] = -100
    out = m(x, labels=labels)
    assert out.logits.shape == (2, 12, 50)
    want = F.cross_entropy(out.logits.reshape(-1, 50), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, want)
    assert m(x).loss is None


def test_pattern_repeats_and_truncates():
    cfg = ModelConfig(
        vocab_size=10,
        d_model=16,
        n_layers=5,
        pattern=["attention", "attention", "local_attention"],
        mixer_kwargs={"attention": {"n_heads": 2}, "local_attention": {"n_heads": 2}},
    )
    assert cfg.layer_mixers() == ["attention", "attention", "local_attention", "attention", "attention"]
    m = LanguageModel(cfg)
    assert [b.mixer.name for b in m.blocks] == cfg.layer_mixers()


def test_states_continue_the_stream():
    m = tiny(pattern=("attention", "local_attention"))
    x = ids(T=14)
    full = m(x).logits
    a = m(x[:, :9])
    b = m(x[:, 9:], states=a.states)
    torch.testing.assert_close(torch.cat([a.logits, b.logits], 1), full, atol=1e-5, rtol=1e-5)


def test_greedy_generate_equals_recomputing_the_whole_prefix():
    m = tiny(pattern=("attention", "local_attention"))
    prompt = ids(B=2, T=5)
    out = m.generate(prompt, 8, temperature=0)
    ref = prompt
    for _ in range(8):  # no states: recompute everything each token
        nxt = m(ref).logits[:, -1].argmax(-1, keepdim=True)
        ref = torch.cat([ref, nxt], 1)
    assert torch.equal(out, ref)


def test_sampling_is_seeded_and_respects_top_k():
    m = tiny()
    prompt = ids(B=1, T=4)
    a = m.generate(prompt, 10, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(1))
    b = m.generate(prompt, 10, temperature=1.0, top_k=3, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    logits = torch.tensor([[1.0, 5.0, 3.0, 4.0, 2.0]])
    kept = torch.isfinite(filter_logits(logits, top_k=2))
    assert kept.tolist() == [[False, True, False, True, False]]
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    kept = torch.isfinite(filter_logits(probs, top_p=0.7))  # 0.5 < 0.7, 0.5+0.3 >= 0.7: keep two
    assert kept.tolist() == [[True, True, False, False]]
    with pytest.raises(ValueError, match="top_p"):
        filter_logits(logits, top_p=1.5)


def test_generate_stops_at_eos():
    m = tiny()
    prompt = ids(B=1, T=3)
    first = m.generate(prompt, 1, temperature=0)[0, -1].item()
    out = m.generate(prompt, 10, temperature=0, eos_token_id=first)
    assert out.shape[1] == 4


@pytest.mark.parametrize("tie", [True, False])
def test_save_pretrained_round_trip_is_exact(tmp_path, tie):
    m = tiny(tie_embeddings=tie, logit_softcap=30.0)
    m.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["tie_embeddings"] is tie
    m2 = LanguageModel.from_pretrained(tmp_path)
    x = ids()
    assert torch.equal(m(x).logits, m2(x).logits)
    for (n1, p1), (n2, p2) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2)
    assert (m2.lm_head.weight is m2.embed.weight) is tie
    with pytest.raises(ValueError, match="encoder"):
        Encoder.from_pretrained(tmp_path)


def test_encoder_is_bidirectional_with_both_heads(tmp_path):
    cfg = ModelConfig(
        vocab_size=30,
        d_model=32,
        n_layers=2,
        pattern=["attention"],
        n_classes=3,
        mixer_kwargs={"attention": {"n_heads": 4}},
    )
    torch.manual_seed(0)
    enc = Encoder(cfg).eval()
    assert all(not b.mixer.causal for b in enc.blocks)
    x = ids(V=30)
    x2 = x.clone()
    x2[:, -1] = (x2[:, -1] + 1) % 30
    assert not torch.allclose(enc(x).logits[:, 0], enc(x2).logits[:, 0])  # position 0 sees the last token
    out = enc(x, labels=torch.tensor([0, 2]), head="cls")
    assert out.logits.shape == (2, 3) and out.loss.ndim == 0
    enc.save_pretrained(tmp_path)
    assert torch.equal(Encoder.from_pretrained(tmp_path)(x, head="cls").logits, out.logits)
    with pytest.raises(ValueError, match="head"):
        enc(x, head="nope")


def test_optim_overrides_are_collected_with_full_names():
    m = tiny()

    class Probe(torch.nn.Module):
        pass

    m.blocks[0].mixer.optim_overrides = lambda: {"q_proj.weight": {"lr": 1e-4, "weight_decay": 0.0}}
    assert m.optim_overrides() == {"blocks.0.mixer.q_proj.weight": {"lr": 1e-4, "weight_decay": 0.0}}


def test_bad_model_input_raises_clear_errors():
    m = tiny()
    with pytest.raises(ValueError, match="vocab_size"):
        m(torch.tensor([[1, 2, 99]]))
    with pytest.raises(TypeError, match="integer"):
        m(torch.randn(1, 3))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        m(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="labels"):
        m(ids(), labels=ids()[:, :-1])
    with pytest.raises(ValueError, match="unknown ModelConfig"):
        ModelConfig.from_dict({"d_modle": 3})
    with pytest.raises(ValueError, match="unknown mixer"):
        LanguageModel(ModelConfig(pattern=["nope"]))
    with pytest.raises(ValueError, match="unknown preset"):
        seqzoo.build_model("no-such-preset")
    with pytest.raises(ValueError, match="d_model"):
        ModelConfig(d_model=0)


TINY_PRESETS = sorted(n for n in PRESETS if n.endswith("-tiny"))


@pytest.mark.parametrize("name", TINY_PRESETS)
def test_every_tiny_preset_builds_and_runs(name):
    torch.manual_seed(0)
    model = seqzoo.build_model(name)
    V = model.config.vocab_size
    x = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(0))
    if PRESETS[name].kind == "lm":
        out = model(x, labels=x)
        assert out.logits.shape == (2, 16, V) and torch.isfinite(out.loss)
        out.loss.backward()
    else:
        out = model(x, labels=x)
        assert torch.isfinite(out.loss)


def test_paper_presets_build_on_meta_device():
    # paper sizes are instantiated without memory; each family tests its own parameter counts
    for name in ("transformer-125m",):
        with torch.device("meta"):
            model = seqzoo.build_model(name)
        assert 120e6 < model.num_parameters() < 170e6


def test_mode_reaches_only_the_layers_that_have_it():
    m = tiny(pattern=("attention", "local_attention"))
    x = ids()
    ref = m(x).logits
    torch.testing.assert_close(m(x, mode="blocked").logits, ref, atol=1e-5, rtol=1e-5)  # local layers only
    torch.testing.assert_close(
        m(x, mode={"attention": "naive", "local_attention": "naive"}).logits, ref, atol=1e-5, rtol=1e-5
    )
    with pytest.raises(ValueError, match="no layer has mode"):
        m(x, mode="chunkwise")
    with pytest.raises(ValueError, match="does not use"):
        m(x, mode={"rglru": "scan"})
