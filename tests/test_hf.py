"""seqzoo.hf: transformers Auto* classes, save/load in both directions, generate(), labels, tokenizer, pipeline.

Tiny random models only, no hub access. Skipped when transformers is not installed (the core's independence from
transformers is tested in test_hf_optional.py).
"""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    DynamicCache,
)

import seqzoo
import seqzoo.hf as H
from seqzoo import LanguageModel, ModelConfig
from seqzoo.errors import InputError
from seqzoo.mixers import MIXERS
from seqzoo.models import Encoder

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

CAUSAL = sorted(name for name, cls in MIXERS.items() if cls.causal)
V = 64


def tiny_lm(mixer: str, vocab: int = V, **kw) -> LanguageModel:
    """Two layers of ``mixer`` at d_model 16 with the registry's own small constructor arguments."""
    cfg = ModelConfig(
        vocab_size=vocab,
        d_model=16,
        n_layers=2,
        pattern=[mixer],
        mlp_ratio=2.0,
        mixer_kwargs={mixer: dict(getattr(MIXERS[mixer], "test_kwargs", {}))},
        **kw,
    )
    torch.manual_seed(0)
    return LanguageModel(cfg).eval()


def ids(B=2, T=9, vocab=V, seed=1):
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


def test_registry_has_the_causal_families():
    # the parametrisation below covers every registered causal mixer; make sure the families are all there
    assert {"attention", "local_attention", "gateloop", "mlstm", "slstm", "rglru"} <= set(CAUSAL)


# ------------------------------------------------------------------ causal LM, every causal mixer
@pytest.mark.parametrize("mixer", CAUSAL)
def test_causal_lm_from_seqzoo_dir_matches_seqzoo(mixer, tmp_path):
    model = tiny_lm(mixer)
    model.save_pretrained(tmp_path / "sz")
    hf, info = AutoModelForCausalLM.from_pretrained(tmp_path / "sz", output_loading_info=True)
    assert isinstance(hf, H.SeqzooForCausalLM) and not hf.training
    assert not info["missing_keys"] and not info["unexpected_keys"]  # seqzoo's names are the wrapper's names
    assert hf.lm_head.weight is hf.embed.weight  # tied weights stay tied
    x = ids()
    with torch.no_grad():
        ref = model(x)
        out = hf(x)
    assert torch.equal(out.logits, ref.logits)
    assert isinstance(out.past_key_values, H.SeqzooCache) and out.past_key_values.get_seq_length() == x.shape[1]

    # the HF cache continues the stream: prompt in two calls == one call
    with torch.no_grad():
        first = hf(x[:, :5], use_cache=True)
        second = hf(x[:, 5:], past_key_values=first.past_key_values, use_cache=True)
    torch.testing.assert_close(second.logits, ref.logits[:, 5:], rtol=1e-4, atol=1e-5)

    # greedy decoding through transformers' generate() == seqzoo's generate(), token for token
    want = model.generate(x, max_new_tokens=6, do_sample=False)
    got = hf.generate(x, max_new_tokens=6, do_sample=False)
    assert torch.equal(got, want)

    # transformers' labels convention: labels=input_ids is shifted inside == seqzoo's aligned loss on shifted labels
    aligned = torch.cat([x[:, 1:], torch.full_like(x[:, :1], -100)], dim=1)
    with torch.no_grad():
        loss = hf(x, labels=x).loss
        seqzoo_loss = model(x, labels=aligned).loss
    torch.testing.assert_close(loss, seqzoo_loss, rtol=0, atol=0)

    # logits_to_keep: only the last k positions, identical values
    with torch.no_grad():
        tail = hf(x, logits_to_keep=3).logits
    assert tail.shape == (2, 3, V)
    torch.testing.assert_close(tail, ref.logits[:, -3:])  # same values; a (B*3)-row GEMM may round differently

    # and back: a directory written by the wrapper loads with seqzoo itself, exactly
    hf.save_pretrained(tmp_path / "hf")
    meta = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert meta["model_type"] == "seqzoo-lm" and meta["pattern"] == [mixer]
    again = LanguageModel.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        assert torch.equal(again(x).logits, ref.logits)


@pytest.mark.parametrize("mixer", ["local_attention", "rglru"])
def test_beam_search_and_sampling_through_the_cache(mixer):
    """Beam search reorders the carried states (SeqzooCache.reorder_cache); with and without the cache agree."""
    hf = H.from_seqzoo(tiny_lm(mixer))
    x = ids(B=2, T=6)
    beam = {"max_new_tokens": 5, "num_beams": 3, "do_sample": False, "num_return_sequences": 2}
    with_cache = hf.generate(x, **beam)
    without = hf.generate(x, use_cache=False, **beam)
    assert with_cache.shape == (4, 11) and torch.equal(with_cache, without)

    sample = {"max_new_tokens": 5, "do_sample": True, "top_k": 8, "temperature": 0.9}
    torch.manual_seed(3)
    a = hf.generate(x, **sample)
    torch.manual_seed(3)
    b = hf.generate(x, use_cache=False, **sample)
    assert torch.equal(a, b)


def test_generate_continues_from_a_returned_cache_and_from_embeddings():
    model = tiny_lm("gateloop")
    hf = H.from_seqzoo(model)
    x = ids()
    want = model.generate(x, max_new_tokens=7, do_sample=False)
    first = hf.generate(x, max_new_tokens=4, do_sample=False, return_dict_in_generate=True)
    name = "cache" if "cache" in first else "past_key_values"  # transformers 5.24 renamed it
    cache = first[name]
    assert isinstance(cache, H.SeqzooCache) and cache.get_seq_length() == x.shape[1] + 3  # last token not fed yet
    more = hf.generate(first.sequences, **{name: cache}, max_new_tokens=3, do_sample=False)
    assert torch.equal(more, want)
    new = hf.generate(inputs_embeds=model.embed(x), max_new_tokens=4, do_sample=False)
    assert torch.equal(new, want[:, x.shape[1] : x.shape[1] + 4])


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["griffin-tiny", "hawk-tiny", "xlstm-tiny", "gateloop-tiny", "local-attention-tiny"])
def test_tiny_presets_generate_through_transformers(preset, tmp_path):
    model = seqzoo.build_model(preset).eval()
    model.save_pretrained(tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path)
    x = ids(B=1, T=8, vocab=model.config.vocab_size)
    assert torch.equal(hf.generate(x, max_new_tokens=8, do_sample=False), model.generate(x, 8, do_sample=False))


def test_untied_head_and_dtype_on_load(tmp_path):
    model = tiny_lm("attention", tie_embeddings=False, logit_softcap=0.5, embed_scale=4.0)
    model.save_pretrained(tmp_path)
    hf, info = AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and hf.lm_head.weight is not hf.embed.weight
    x = ids()
    with torch.no_grad():
        ref = model(x).logits
        assert torch.equal(hf(x).logits, ref) and torch.equal(hf(x, logits_to_keep=2).logits, ref[:, -2:])
    assert ref.abs().max() <= 0.5  # the soft-cap is applied
    half = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16)
    assert half.embed.weight.dtype == torch.bfloat16 and half.generate(x, max_new_tokens=2).shape == (2, 11)


def test_resize_token_embeddings_keeps_seqzoo_in_step(tmp_path):
    hf = H.from_seqzoo(tiny_lm("rglru"))
    x = ids()
    with torch.no_grad():
        before = hf(x).logits
    hf.resize_token_embeddings(V + 6)
    assert hf.seqzoo_model.config.vocab_size == hf.config.vocab_size == V + 6
    with torch.no_grad():
        after = hf(torch.cat([x, torch.full((2, 1), V + 5)], dim=1)).logits  # a new id is accepted
    assert after.shape == (2, x.shape[1] + 1, V + 6)
    torch.testing.assert_close(after[:, :-1, :V], before)
    hf.save_pretrained(tmp_path)
    assert LanguageModel.from_pretrained(tmp_path).config.vocab_size == V + 6


def test_hf_config_round_trips_through_seqzoo_format(tmp_path):
    cfg = H.SeqzooLMConfig(
        vocab_size=32,
        d_model=16,
        pattern=["rglru", "local_attention"],
        n_layers=3,
        mixer_kwargs={"local_attention": {"n_heads": 2, "window": 4}},
        id2label={0: "x"},
    )
    assert cfg.hidden_size == 16 and cfg.num_hidden_layers == 3 and cfg.tie_word_embeddings is True
    cfg.save_pretrained(tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    assert meta["model_type"] == "seqzoo-lm" and meta["extra"]["hf"]["id2label"] == {"0": "x"}
    meta.pop("model_type")
    assert ModelConfig.from_dict(meta).pattern == ["rglru", "local_attention"]  # seqzoo reads it as it is
    again = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(again, H.SeqzooLMConfig) and again.to_seqzoo() == cfg.to_seqzoo()
    assert again.id2label == {0: "x"} and again.extra == {}
    with pytest.raises(ValueError, match="d_model"):
        H.SeqzooLMConfig(d_model=0)
    with pytest.raises(ValueError, match="unknown ModelConfig field|pool"):
        H.SeqzooLMConfig(pool="max")
    with pytest.raises(ValueError, match="model_type"):
        H.SeqzooLMConfig(model_type="encoder")


def test_output_hidden_states_and_base_model(tmp_path):
    model = tiny_lm("attention")
    model.save_pretrained(tmp_path)
    base = AutoModel.from_pretrained(tmp_path)
    assert isinstance(base, H.SeqzooLMModel)
    x = ids()
    with torch.no_grad():
        out = base(x, output_hidden_states=True)
        ref = model(x, output_hidden=True).hidden
    assert torch.equal(out.last_hidden_state, ref)
    assert len(out.hidden_states) == model.config.n_layers + 1 and torch.equal(out.hidden_states[-1], ref)
    torch.testing.assert_close(out.hidden_states[0], model.embed(x))


def test_wrapper_shares_parameters_and_trains():
    model = tiny_lm("gateloop")
    hf = H.from_seqzoo(model)
    assert not hf.training  # follows the wrapped model's mode
    hf.train()
    assert hf.seqzoo_model is model and hf.lm_head.weight is model.embed.weight  # tied, not copied
    assert hf.num_parameters() == model.num_parameters()
    x = ids()
    hf(x, labels=x).loss.backward()
    assert model.embed.weight.grad is not None and model.embed.weight.grad.abs().sum() > 0
    assert model.training


def test_clear_errors_for_bad_input():
    hf = H.from_seqzoo(tiny_lm("attention"))
    x = ids()
    padded = torch.ones_like(x)
    padded[0, 0] = 0
    with pytest.raises(ValueError, match="padding"):
        hf(x, attention_mask=padded)
    hf(x, attention_mask=torch.ones_like(x))  # an all-ones mask is fine
    with pytest.raises(ValueError, match="labels must have shape"):
        hf(x, labels=x[:, :-1])
    with pytest.raises(ValueError, match="logits_to_keep"):
        hf(x, labels=x, logits_to_keep=1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        hf(x, bogus=1)
    full = DynamicCache()
    full.update(torch.zeros(2, 1, 3, 4), torch.zeros(2, 1, 3, 4), 0)
    with pytest.raises(TypeError, match="SeqzooCache"):
        hf(x, past_key_values=full)
    assert hf(x, past_key_values=DynamicCache()).past_key_values.get_seq_length() == x.shape[1]  # empty: replaced
    cache = hf(x, use_cache=True).past_key_values
    with pytest.raises(NotImplementedError, match="rolled back"):
        cache.crop(1)
    with pytest.raises(TypeError, match="SeqzooLMConfig"):
        H.SeqzooForCausalLM(H.SeqzooEncoderConfig(d_model=16))


def test_cache_batch_operations_follow_every_state_tensor():
    model = tiny_lm("mlstm")
    x = ids(B=3, T=5)
    with torch.no_grad():
        states = model(x).states
    cache = H.SeqzooCache.from_states(states, 5)
    assert len(cache) == 2 and cache.batch_size == 3 and cache.get_seq_length() == 5
    cache.reorder_cache(torch.tensor([2, 2, 0]))
    want = model(x[[2, 2, 0]]).states
    got_t, want_t = [], []
    H.map_state_tensors(cache.states, lambda t: got_t.append(t) or t)
    H.map_state_tensors(want, lambda t: want_t.append(t) or t)
    assert len(got_t) == len(want_t) > 0
    for g, w in zip(got_t, want_t):
        torch.testing.assert_close(g, w)
    cache.batch_repeat_interleave(2)
    assert cache.batch_size == 6
    cache.reset()
    assert cache.states is None and cache.get_seq_length() == 0


# ------------------------------------------------------------------------------------ encoders
@pytest.mark.parametrize("preset", ["encoder-tiny", "orchid-ar-tiny"])
def test_encoder_masked_lm_and_classification(preset, tmp_path):
    torch.manual_seed(0)
    model = seqzoo.build_model(preset).eval()
    model.save_pretrained(tmp_path / "sz")
    vocab = model.config.vocab_size
    x = ids(B=2, T=16, vocab=vocab)
    labels = torch.full_like(x, -100)
    labels[:, 3] = x[:, 3]

    mlm = AutoModelForMaskedLM.from_pretrained(tmp_path / "sz")
    assert isinstance(mlm, H.SeqzooForMaskedLM) and isinstance(
        AutoConfig.from_pretrained(tmp_path / "sz"), H.SeqzooEncoderConfig
    )
    with torch.no_grad():
        ref, out = model(x, labels=labels), mlm(x, labels=labels)
    assert torch.equal(out.logits, ref.logits) and torch.equal(out.loss, ref.loss)

    n = model.config.n_classes or 3
    cls = AutoModelForSequenceClassification.from_pretrained(tmp_path / "sz", num_labels=n)
    assert isinstance(cls, H.SeqzooForSequenceClassification) and cls.config.n_classes == n
    y = torch.tensor([0, n - 1])
    with torch.no_grad():
        out = cls(x, labels=y)
    assert out.logits.shape == (2, n) and torch.isfinite(out.loss)
    if model.config.n_classes:  # the seqzoo checkpoint has the head: identical to seqzoo's "cls" head
        with torch.no_grad():
            ref = model(x, labels=y, head="cls")
        assert torch.equal(out.logits, ref.logits) and torch.equal(out.loss, ref.loss)
    else:  # a new head, initialised as seqzoo would (torch's default Linear init: |w| <= 1/sqrt(d))
        bound = model.config.d_model**-0.5
        assert 0 < cls.cls_head.weight.abs().max() <= bound and cls.cls_head.weight.std() > bound / 4

    # a directory written by the wrapper loads with seqzoo.Encoder, head included
    cls.save_pretrained(tmp_path / "hf")
    again = Encoder.from_pretrained(tmp_path / "hf").eval()
    assert again.config.n_classes == n
    with torch.no_grad():
        assert torch.equal(again(x, head="cls").logits, cls(x).logits)
        assert torch.equal(again(x).logits, model(x).logits)


def test_sequence_classification_problem_types():
    enc = Encoder(
        ModelConfig(vocab_size=V, d_model=16, n_layers=1, n_classes=1, mixer_kwargs={"attention": {"n_heads": 2}})
    ).eval()
    reg = H.from_seqzoo(enc)
    x = ids(B=2, T=6)
    out = reg(x, labels=torch.tensor([0.5, -1.0]))
    torch.testing.assert_close(
        out.loss, torch.nn.functional.mse_loss(out.logits.squeeze(-1), torch.tensor([0.5, -1.0]))
    )
    with pytest.raises(ValueError, match="classification labels"):
        H.from_seqzoo(Encoder(enc.config.replace(n_classes=3)))(x, labels=torch.tensor([[0, 1]]))


# ---------------------------------------------------------------------------- tokenizer, pipeline
def test_gpt2_tokenizer_matches_seqzoo_and_runs_a_text_generation_pipeline(shared):
    from seqzoo.tasks.tokenizers import GPT2Tokenizer

    bpe = shared / "data" / "gpt2-bpe"
    tok = H.gpt2_tokenizer(bpe)
    ours = GPT2Tokenizer(bpe)
    text = "Hello world! It's 2026, naïve café — 日本語\ttabs and  spaces "
    assert tok("Hello world")["input_ids"] == [15496, 995]
    assert tok(text)["input_ids"] == ours.encode(text) and tok.decode(ours.encode(text)) == text
    assert tok.eos_token_id == ours.eos_token_id == 50256
    with pytest.raises(FileNotFoundError):
        H.gpt2_tokenizer(shared / "no-such-dir")

    model = tiny_lm("rglru", vocab=tok.vocab_size)
    hf = H.from_seqzoo(model)
    gen = transformers.pipeline("text-generation", model=hf, tokenizer=tok)
    prompt = "The cat sat on"
    out = gen(prompt, max_new_tokens=5, do_sample=False, return_full_text=True)
    prompt_ids = torch.tensor([tok(prompt)["input_ids"]])
    want = model.generate(prompt_ids, 5, do_sample=False, eos_token_id=tok.eos_token_id)
    assert out[0]["generated_text"] == tok.decode(want[0])


def test_the_cache_is_taken_under_either_name_but_not_both():
    hf = H.from_seqzoo(tiny_lm("rglru"))
    x = ids()
    with torch.no_grad():
        first = hf(x[:, :5], use_cache=True)
        name = "cache" if "cache" in first else "past_key_values"
        state = first[name]
        by_old = hf(x[:, 5:6], past_key_values=state.__class__(len(hf.blocks)), use_cache=True)  # fresh, empty
        assert by_old[name].get_seq_length() == 1
        by_new = hf(x[:, 5:], cache=state, use_cache=True)
        assert by_new[name] is state and state.get_seq_length() == x.shape[1]
        with pytest.raises(InputError, match="past_key_values or as cache, not both"):
            hf(x[:, :1], past_key_values=state, cache=state)
