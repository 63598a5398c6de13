"""seqzoo.convert against transformers' own RecurrentGemmaForCausalLM and xLSTMForCausalLM (tiny, random, offline).

Each case builds a random transformers model, saves it, converts it and compares in fp32: logits of one full pass,
greedy generation, and a prefill followed by one-token steps with carried states (relative error ≤ 1e-5); then
seqzoo -> transformers (loaded by transformers' own class, same logits) -> seqzoo is bit-exact.
"""

from __future__ import annotations

import inspect
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

import seqzoo
from seqzoo import LanguageModel
from seqzoo.convert import convert, from_transformers, to_transformers
from seqzoo.errors import InputError
from seqzoo.models.presets.griffin import TINY, bf16_sqrt, griffin_config

RTOL = 1e-5
V, B, T, P = 64, 2, 37, 29  # T > every window below and not a multiple of any chunk size

RG_CASES = {
    # MQA, tied head, lru_width != hidden_size, window 6 < T (transformers counts the query in its window)
    "mqa_tied": dict(num_key_value_heads=1, lru_width=48, attention_window_size=6),
    # GQA, q/k/v biases, untied head, conv width 3, full-width RoPE with another base, one attention layer first
    "gqa_untied": dict(
        num_key_value_heads=2,
        attention_bias=True,
        tie_word_embeddings=False,
        conv1d_width=3,
        attention_window_size=9,
        block_types=["attention", "recurrent"],
        rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 1.0},
    ),
}
XL_CASES = {
    # unequal q/k (32) and v (64) head dims, chunk 16 with T = 37 (two chunks + a recurrent tail)
    "single": dict(qk_dim_factor=0.5, v_dim_factor=1.0, chunk_size=16),
    # tied head, another gate soft-cap and eps; q/k wider than v. eps large enough that a converter dropping it
    # fails every comparison (at 1e-5 it hid below RTOL: test_the_xlstm_cases_see_the_mlstm_eps checks that it shows)
    "tied": dict(
        tie_word_embeddings=True,
        qk_dim_factor=1.0,
        v_dim_factor=0.5,
        gate_soft_cap=5.0,
        chunk_size=8,
        norm_eps=1e-5,
        eps=0.5,
    ),
}


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Away from the init (zero norms and gate weights, equal biases) so every tensor's role shows in the logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "norm" in name:
                p.copy_(0.2 * noise if p.abs().max() == 0 else 1.0 + 0.2 * noise)  # RecurrentGemma stores w, xLSTM γ
            elif "gate" in name and p.dim() == 1:
                p.copy_(2.0 * noise)
            else:
                p.add_(0.1 * noise)


def hf_recurrent_gemma(case: str, seed: int = 0):
    cfg = transformers.RecurrentGemmaConfig(
        num_hidden_layers=3, vocab_size=V, hidden_size=32, intermediate_size=96, num_attention_heads=4, **RG_CASES[case]
    )
    torch.manual_seed(seed)
    model = transformers.RecurrentGemmaForCausalLM(cfg).eval()
    _randomise(model, seed)
    return model


def hf_xlstm(case: str, seed: int = 0):
    kw = dict(XL_CASES[case])
    # the native torch kernels (xlstm package absent); fp32 states so the comparison is exact to rounding
    cfg = transformers.xLSTMConfig(
        vocab_size=V, hidden_size=128, num_hidden_layers=2, num_heads=2, autocast_kernel_dtype="float32", **kw
    )
    torch.manual_seed(seed)
    model = transformers.xLSTMForCausalLM(cfg).eval()
    _randomise(model, seed)
    return model


def _seg(n: int, start: int = 0) -> torch.Tensor:
    return torch.arange(start, start + n).expand(B, n)


def fresh_stream_resets(model: LanguageModel, ids: torch.Tensor) -> bool:
    """Does a call without segment_pos start a document (RG-LRU reset at t = 0) as transformers' position 0 does?"""
    with torch.no_grad():
        a, b = model(ids).logits, model(ids, segment_pos=_seg(ids.shape[1])).logits
        return rel(a, b) <= RTOL


def _cache_name(hf, old: str) -> str:
    """transformers 5.24 renamed past_key_values / cache_params to cache; use the name the installed version takes."""
    return "cache" if "cache" in inspect.signature(hf.forward).parameters else old


def _hf_steps(hf, ids, family):
    """transformers: prefill P tokens, then one token per call with its cache; logits (B, T, V)."""
    name = _cache_name(hf, "past_key_values" if family == "rg" else "cache_params")
    with torch.no_grad():
        if family == "rg":  # its output carries no cache: the KV cache is passed in, the recurrent states live in it
            cache = transformers.DynamicCache(config=hf.config)
            hf._setup_cache(hf.config, B, ids.device, torch.float32)
            out = hf(ids[:, :P], **{name: cache}, use_cache=True)
        else:
            out = hf(ids[:, :P], use_cache=True)
        logits = [out.logits]
        for t in range(P, T):
            if family == "rg":
                out = hf(ids[:, t : t + 1], **{name: cache}, position_ids=_seg(1, t), use_cache=True)
            else:
                out = hf(ids[:, t : t + 1], **{name: out[name]}, use_cache=True)
            logits.append(out.logits)
    return torch.cat(logits, 1)


def _our_steps(model, ids, family):
    with torch.no_grad():
        seg = {"segment_pos": _seg(P)} if family == "rg" else {}  # position 0 starts the document, as theirs
        out = model(ids[:, :P], **seg)
        logits = [out.logits]
        for t in range(P, T):
            out = model(ids[:, t : t + 1], states=out.states)
            logits.append(out.logits)
    return torch.cat(logits, 1)


CASES = [("rg", c) for c in RG_CASES] + [("xlstm", c) for c in XL_CASES]


@pytest.fixture(params=CASES, ids=[f"{f}-{c}" for f, c in CASES])
def converted(request, tmp_path):
    family, case = request.param
    hf = hf_recurrent_gemma(case) if family == "rg" else hf_xlstm(case)
    hf.save_pretrained(tmp_path / "hf")
    return family, hf, from_transformers(tmp_path / "hf"), tmp_path


def test_full_pass(converted):
    family, hf, ours, _ = converted
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))
    seg = {"segment_pos": _seg(T)} if family == "rg" else {}
    with torch.no_grad():
        ref, got = hf(ids).logits, ours(ids, **seg).logits
    assert got.shape == ref.shape == (B, T, V)
    assert rel(got, ref) <= RTOL


def test_prefill_then_steps(converted):
    family, hf, ours, _ = converted
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(2))
    ref, got = _hf_steps(hf, ids, family), _our_steps(ours, ids, family)
    assert rel(got, ref) <= RTOL
    with torch.no_grad():  # and the steps equal one full pass of transformers
        assert rel(got, hf(ids).logits) <= RTOL


def test_greedy_generation(converted):
    family, hf, ours, _ = converted
    ids = torch.randint(0, V, (B, 7), generator=torch.Generator().manual_seed(3))
    if family == "rg":  # generate() passes no segment_pos: the fresh stream must start a document at t = 0
        assert fresh_stream_resets(ours, ids)
    # an explicit all-ones mask: without it transformers treats prompt tokens equal to pad_token_id as padding
    mask = torch.ones_like(ids)
    ref = hf.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False, min_new_tokens=12, pad_token_id=0)
    got = ours.generate(ids, max_new_tokens=12, temperature=0.0)
    assert torch.equal(got, ref)


def test_round_trip_bit_exact(converted):
    """seqzoo -> transformers (its own class loads it, same logits) -> seqzoo: state dicts equal bit for bit."""
    family, hf, ours, tmp = converted
    to_transformers(ours, tmp / "back")
    cls = type(hf)
    again, info = cls.from_pretrained(tmp / "back", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert rel(again.eval()(ids).logits, hf(ids).logits) <= RTOL
    third = from_transformers(tmp / "back")
    a, b = ours.state_dict(), third.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k
    assert third.config == ours.config


def test_folder_conversion_both_ways(converted):
    """``convert`` folder -> seqzoo folder (from_pretrained) -> transformers folder; same tensors as in memory."""
    family, hf, ours, tmp = converted
    convert(tmp / "hf", tmp / "sz")
    loaded = LanguageModel.from_pretrained(tmp / "sz")
    for k, v in ours.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    convert(tmp / "sz", tmp / "hf2")
    hf2 = type(hf).from_pretrained(tmp / "hf2").eval()
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert rel(hf2(ids).logits, hf(ids).logits) <= RTOL


def test_an_untrained_seqzoo_model_round_trips(tmp_path):
    """The way out starts from seqzoo: a freshly initialised 7B-style toy (γ = 1 norms) goes out and back exactly."""
    model = seqzoo.build_model("xlstm7b-tiny").eval()  # d = 64: q/k width 32, not a multiple of 64
    with pytest.warns(UserWarning, match="use_cache=False"):
        to_transformers(model, tmp_path / "hf")
    hf = transformers.xLSTMForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = torch.randint(0, 256, (B, 20), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        assert rel(model(ids).logits, hf(ids, use_cache=False).logits) <= RTOL
        with pytest.raises(RuntimeError):  # transformers' own limit, the reason for the warning
            hf(ids)
    back = from_transformers(tmp_path / "hf")
    for k, v in model.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k


def test_fused_layout(tmp_path):
    """``weight_mode="fused"`` checkpoints are split on the way in. transformers 5.23 cannot build a fused xLSTM
    itself (its ``_init_weights`` fails on the fused gate bias), so the fused file is made from a single-layout
    model by concatenating the rows as the fused layout stores them, and compared with that model."""
    from safetensors.torch import save_file

    hf = hf_xlstm("single")
    sd = dict(hf.state_dict())
    for i in range(hf.config.num_hidden_layers):
        X, F = f"backbone.blocks.{i}.mlstm_layer.", f"backbone.blocks.{i}.ffn."
        sd[X + "qkv_opreact.weight"] = torch.cat([sd.pop(X + f"{n}.weight") for n in ("q", "k", "v", "ogate_preact")])
        for p in ("weight", "bias"):
            sd[X + f"ifgate_preact.{p}"] = torch.cat([sd.pop(X + f"{g}_preact.{p}") for g in ("igate", "fgate")])
        sd[F + "proj_up_gate_z.weight"] = torch.cat([sd.pop(F + "proj_up_gate.weight"), sd.pop(F + "proj_up.weight")])
    (tmp_path / "fused").mkdir()
    save_file({k: v.contiguous() for k, v in sd.items()}, str(tmp_path / "fused" / "model.safetensors"))
    cfg = hf.config.to_dict()
    cfg["weight_mode"] = "fused"
    (tmp_path / "fused" / "config.json").write_text(json.dumps(cfg))
    ours = from_transformers(tmp_path / "fused")
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        assert rel(ours(ids).logits, hf(ids).logits) <= RTOL


# ------------------------------------------------------------ settings the converter must follow
def _ids(seed: int, vocab: int = V) -> torch.Tensor:
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


def test_xlstm_num_blocks_gives_the_blocks_transformers_builds(tmp_path):
    """``xLSTMConfig(num_blocks=2)`` keeps ``num_hidden_layers=32`` and builds (and runs) two blocks."""
    cfg = transformers.xLSTMConfig(
        vocab_size=V, hidden_size=128, num_blocks=2, num_heads=2, chunk_size=16, autocast_kernel_dtype="float32"
    )
    assert (cfg.num_hidden_layers, cfg.num_blocks) == (32, 2)
    torch.manual_seed(0)
    hf = transformers.xLSTMForCausalLM(cfg).eval()
    assert len(hf.backbone.blocks) == 2
    _randomise(hf, 0)
    hf.save_pretrained(tmp_path / "hf")
    ours = from_transformers(tmp_path / "hf")
    assert ours.config.n_layers == 2
    with torch.no_grad():
        assert rel(ours(_ids(1)).logits, hf(_ids(1)).logits) <= RTOL
    to_transformers(ours, tmp_path / "back")
    again = transformers.xLSTMForCausalLM.from_pretrained(tmp_path / "back").eval()
    with torch.no_grad():
        assert rel(again(_ids(2)).logits, hf(_ids(2)).logits) <= RTOL


def test_the_xlstm_cases_see_the_mlstm_eps(tmp_path):
    """The ``tied`` case above sets a large ``eps``: converted, the logits match; with eps left at the
    default they are far off, so every comparison of that case fails when the converter drops eps."""
    hf = hf_xlstm("tied")
    hf.save_pretrained(tmp_path / "hf")
    ours = from_transformers(tmp_path / "hf")
    assert ours.config.mixer_kwargs["mlstm"]["eps"] == hf.config.eps
    kw = {**ours.config.mixer_kwargs["mlstm"], "eps": 1e-6}
    dropped = LanguageModel(ours.config.replace(mixer_kwargs={"mlstm": kw})).eval()
    dropped.load_state_dict(ours.state_dict())
    with torch.no_grad():
        ref = hf(_ids(3)).logits
        assert rel(ours(_ids(3)).logits, ref) <= RTOL
        assert rel(dropped(_ids(3)).logits, ref) > 10 * RTOL


@pytest.mark.parametrize("name", ["griffin-tiny", "hawk-tiny"])
def test_a_griffin_without_the_transformers_settings_is_refused_naming_all(name, tmp_path):
    with pytest.raises(InputError) as err:
        to_transformers(seqzoo.build_model(name, n_layers=3), tmp_path / "hf")
    message = str(err.value)
    assert "embed_scale" in message and f"{bf16_sqrt(128)}" in message and "logit_softcap" in message
    assert not (tmp_path / "hf").exists()  # refused before anything is written


@pytest.mark.parametrize("kind", ["griffin", "hawk"])
def test_a_griffin_with_the_settings_goes_to_transformers_and_back(kind, tmp_path):
    config = griffin_config(kind, **{**TINY, "n_layers": 3}, embed_scale=bf16_sqrt(128), logit_softcap=30.0)
    torch.manual_seed(0)
    ours = LanguageModel(config).eval()
    to_transformers(ours, tmp_path / "hf")
    hf, info = transformers.RecurrentGemmaForCausalLM.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ids = _ids(4, config.vocab_size)
    with torch.no_grad():
        # use_cache=False: transformers' cache asks an attention layer for its length, which a Hawk has none of
        assert rel(ours(ids, segment_pos=_seg(T)).logits, hf.eval()(ids, use_cache=False).logits) <= RTOL
    back = from_transformers(tmp_path / "hf")
    for k, v in ours.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k
    assert back.config.layer_mixers() == config.layer_mixers()
