"""Parity with DeepMind's recurrentgemma 1.0.1 (PyTorch) through the stored fixtures (docs/griffin.md).

Runs with no extra install: ``fixtures/recurrentgemma`` under ``conftest.shared_dir()`` holds the official weights, inputs, outputs
and caches. ``test_live_reference`` compares against the installed package on other configurations
(``pip install "recurrentgemma[torch]"``, JAX not needed; marked ``parity``, skipped when absent).
"""

import pytest
import torch
from helpers import assert_close_fp32

from seqzoo import LanguageModel
from seqzoo.mixers import build_mixer
from seqzoo.mixers.rglru import RGLRU
from seqzoo.parity.recurrentgemma import (
    griffin_state_dict,
    import_recurrentgemma_torch,
    load_fixture,
    local_attention_state_dict,
    model_config_from_griffin,
    recurrent_block_state_dict,
    rglru_state_dict,
    ring_from_linear,
)


@pytest.fixture
def fx(shared):
    return lambda case: load_fixture(shared / "fixtures" / "recurrentgemma" / case)


def run_prefill_decode(fn, x, sp, P):
    y, s = fn(x[:, :P], None, sp[:, :P])
    prefill_state, ys = s, []
    for t in range(P, x.shape[1]):
        y_t, s = fn(x[:, t : t + 1], s, sp[:, t : t + 1])
        ys.append(y_t)
    return y, prefill_state, torch.cat(ys, 1), s


@torch.no_grad()
def test_rglru_layer(fx):
    f = fx("rglru")
    m = RGLRU(96, 4)
    m.load_state_dict(rglru_state_dict(f["official"]))
    x, sp = f["input"]["x"], f["input"]["segment_pos"]
    for mode in ("recurrent", "scan"):
        y, h = m(x, sp == 0, None, mode)
        assert_close_fp32(y, f["output"]["y"])
        assert_close_fp32(h, f["state"]["full.h"])
    assert_close_fp32(m.input_gate(x), f["inter"]["input_gate"])
    step = lambda x, h, sp: m(x, sp == 0, h, "recurrent")  # noqa: E731
    y_p, h_p, y_d, h_d = run_prefill_decode(step, x, sp, 29)
    assert_close_fp32(y_p, f["output"]["y_prefill"]), assert_close_fp32(h_p, f["state"]["prefill.h"])
    (
        assert_close_fp32(y_d, f["output"]["y_decode"]),
        assert_close_fp32(h_d, f["state"]["decode.h"]),
    )  # includes a reset at t = 33


@torch.no_grad()
def test_recurrent_block(fx):
    f = fx("recurrent_block")
    m = build_mixer("rglru", d_model=64, d_rnn=96, n_blocks=4)
    m.load_state_dict(recurrent_block_state_dict(f["official"]))
    x, sp = f["input"]["x"], f["input"]["segment_pos"]
    for mode in m.modes:
        y, s = m(x, segment_pos=sp, mode=mode)
        assert_close_fp32(y, f["output"]["y"])
        (
            assert_close_fp32(s.h, f["state"]["full.rg_lru_state"]),
            assert_close_fp32(s.conv, f["state"]["full.conv1d_state"]),
        )
    step = lambda x, s, sp: m(x, state=s, segment_pos=sp)  # noqa: E731
    y_p, s_p, y_d, s_d = run_prefill_decode(step, x, sp, 29)
    assert_close_fp32(y_p, f["output"]["y_prefill"]), assert_close_fp32(y_d, f["output"]["y_decode"])
    for stage, s in (("prefill", s_p), ("decode", s_d)):
        (
            assert_close_fp32(s.h, f["state"][f"{stage}.rg_lru_state"]),
            assert_close_fp32(s.conv, f["state"][f"{stage}.conv1d_state"]),
        )


@torch.no_grad()
def test_local_attention_block(fx):
    f = fx("local_attention")
    m = build_mixer("local_attention", d_model=64, n_heads=4, n_kv_heads=1, window=8, rope_fraction=0.5, out_bias=True)
    m.load_state_dict(local_attention_state_dict(f["official"]))
    x, sp = f["input"]["x"], f["input"]["segment_pos"]

    def check_cache(s, stage):
        keys, values, n = ring_from_linear(s, 8)
        assert_close_fp32(keys, f["state"][f"{stage}.keys"]), assert_close_fp32(values, f["state"][f"{stage}.values"])
        assert torch.equal(n, f["state"][f"{stage}.num_tokens"])

    for mode in m.modes:
        y, s = m(x, segment_pos=sp, mode=mode)
        assert_close_fp32(y, f["output"]["y"])
        check_cache(s, "full")
    step = lambda x, s, sp: m(x, state=s, segment_pos=sp)  # noqa: E731
    y_p, s_p, y_d, s_d = run_prefill_decode(step, x, sp, 29)
    assert_close_fp32(y_p, f["output"]["y_prefill"]), assert_close_fp32(y_d, f["output"]["y_decode"])
    check_cache(s_p, "prefill"), check_cache(s_d, "decode")


@pytest.mark.parametrize("case", ["griffin", "griffin_w48"])
@torch.no_grad()
def test_griffin_model(fx, case):
    f = fx(case)
    cfg = model_config_from_griffin(f["meta"]["griffin_config"])
    assert cfg.embed_scale == f["meta"]["derived"]["embedding_scale_sqrt_width_in_bfloat16"]
    model = LanguageModel(cfg).eval()
    model.load_state_dict(griffin_state_dict(f["official"], cfg.n_layers))
    assert model.num_parameters() == f["meta"]["num_parameters"]
    ids, sp = f["input"]["tokens"], f["input"]["segment_pos"]
    out = model(ids, segment_pos=sp)
    assert_close_fp32(out.logits, f["output"]["logits"])
    # packed documents: row 1's second document equals that document run alone
    alone = model(ids[1:2, 20:], segment_pos=sp[1:2, 20:])
    assert_close_fp32(alone.logits, f["output"]["logits_doc2_alone"])
    assert_close_fp32(out.logits[1:2, 20:], alone.logits)
    # a fresh stream without segment_pos starts a document at t = 0, as the official block does
    assert torch.equal(sp[0], torch.arange(ids.shape[1]))
    assert_close_fp32(model(ids[0:1]).logits, f["output"]["logits"][0:1])
    assert_close_fp32(model(ids[1:2, 20:]).logits, f["output"]["logits_doc2_alone"])
    # prefill then 1-token decoding with the caches
    pre = model(ids[:, :29], segment_pos=sp[:, :29])
    assert_close_fp32(pre.logits, f["output"]["logits_prefill"])
    states, dec = pre.states, []
    for t in range(29, 37):
        o = model(ids[:, t : t + 1], states=states, segment_pos=sp[:, t : t + 1])
        states = o.states
        dec.append(o.logits)
    assert_close_fp32(torch.cat(dec, 1), f["output"]["logits_decode"])
    for i, (mixer, s) in enumerate(zip(cfg.layer_mixers(), states)):
        if mixer == "rglru":
            assert_close_fp32(s.h, f["state"][f"decode.blocks.{i}.rg_lru_state"])
            assert_close_fp32(s.conv, f["state"][f"decode.blocks.{i}.conv1d_state"])
        else:
            keys, values, n = ring_from_linear(s, cfg.mixer_kwargs["local_attention"]["window"])
            assert_close_fp32(keys, f["state"][f"decode.blocks.{i}.keys"])
            assert_close_fp32(values, f["state"][f"decode.blocks.{i}.values"])
            assert torch.equal(n, f["state"][f"decode.blocks.{i}.num_tokens"])


@pytest.mark.parity
@torch.no_grad()
def test_live_reference():
    """Against the installed recurrentgemma package on a configuration not in the fixtures."""
    try:  # without JAX the package __init__ fails; the helper imports the torch half alone, in any test order
        rg = import_recurrentgemma_torch()
    except ImportError as e:
        pytest.skip(f"recurrentgemma not importable: {e}")

    cfg = rg.GriffinConfig(
        vocab_size=128,
        width=64,
        mlp_expanded_width=192,
        num_heads=4,
        block_types=(rg.TemporalBlockType.RECURRENT, rg.TemporalBlockType.ATTENTION, rg.TemporalBlockType.RECURRENT),
        embeddings_scale_by_sqrt_dim=True,
        attention_window_size=6,
        logits_soft_cap=30.0,
        lru_width=96,
    )
    torch.manual_seed(0)
    ref = rg.Griffin(cfg, gradient_checkpointing=False).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(torch.randn_like(p) * 0.1 * (p.std() if p.numel() > 1 and p.std() > 0 else 1.0))
    ours_cfg = model_config_from_griffin(
        {
            "vocab_size": 128,
            "width": 64,
            "mlp_expanded_width": 192,
            "num_heads": 4,
            "block_types": ["RECURRENT", "ATTENTION", "RECURRENT"],
            "embeddings_scale_by_sqrt_dim": True,
            "attention_window_size": 6,
            "logits_soft_cap": 30.0,
            "lru_width": 96,
        }
    )
    ours = LanguageModel(ours_cfg).eval()
    ours.load_state_dict(griffin_state_dict(ref.state_dict(), 3))
    ids = torch.randint(0, 128, (2, 41))
    sp = torch.cat([torch.arange(25), torch.arange(16)]).expand(2, 41).clone()
    sp[0] = torch.arange(41)
    logits_ref, _ = ref(ids, sp)
    assert_close_fp32(ours(ids, segment_pos=sp).logits, logits_ref)
    # prefill 30 tokens, then 1-token decoding with the caches (no document starts in the decode range)
    P = 30
    ref_logits, cache = ref(ids[:, :P], sp[:, :P])
    out = ours(ids[:, :P], segment_pos=sp[:, :P])
    assert_close_fp32(out.logits, ref_logits)
    states = out.states
    for t in range(P, 41):
        ref_logits, cache = ref(ids[:, t : t + 1], sp[:, t : t + 1], cache=cache)
        out = ours(ids[:, t : t + 1], states=states, segment_pos=sp[:, t : t + 1])
        states = out.states
        assert_close_fp32(out.logits, ref_logits)
    for i in (0, 2):
        assert_close_fp32(states[i].h, cache[f"blocks.{i}"].rg_lru_state)
        assert_close_fp32(states[i].conv, cache[f"blocks.{i}"].conv1d_state)
    keys, values, n = ring_from_linear(states[1], 6)
    assert_close_fp32(keys, cache["blocks.1"].keys), assert_close_fp32(values, cache["blocks.1"].values)
    assert torch.equal(n, cache["blocks.1"].num_tokens)
