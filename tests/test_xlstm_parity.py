"""Parity with NX-AI's official ``xlstm`` 2.0.6 (docs/xlstm.md, "Parity").

* Fixture tests (run everywhere, no install): ``fixtures/xlstm`` under ``conftest.shared_dir()`` holds the official weights, inputs,
  outputs and states for an mLSTM layer, an sLSTM layer, a 4-block xLSTM LM (sLSTM at 1) and a tiny 7B-style
  xLSTMLarge. Weights are mapped with seqzoo.parity.xlstm and compared at the tolerances set in this file.
* Live tests (``-m parity``, skipped unless ``xlstm`` imports): build other configurations in both, copy weights,
  compare outputs and states. Run with an environment that has the package, e.g.
  ``<venv with xlstm>/bin/python -m pytest -m parity tests/test_xlstm_parity.py``.
"""

import pytest
import torch
from helpers import assert_close, assert_close_fp32

import seqzoo
from seqzoo.mixers import build_mixer
from seqzoo.parity.xlstm import (
    large_config_from_official,
    large_state_dict,
    lm_config_from_official,
    lm_state_dict,
    load_fixture,
    mlstm_layer_state_dict,
    mlstm_state_from_neurips,
    mlstm_state_to_neurips,
    slstm_layer_state_dict,
    slstm_state_from_official,
)

F32 = dict(atol=1e-5, rtol=1.3e-6)


def dbl(sd):
    return {k: v.double() for k, v in sd.items()}


def fixture(shared, case):
    return load_fixture(shared / "fixtures" / "xlstm" / case)


# ---------------------------------------------------------------------------------------------- fixtures
def test_mlstm_layer_fixture(shared):
    fx = fixture(shared, "mlstm_layer")
    x = fx["input"]["x"]
    m = build_mixer("mlstm", d_model=32, n_heads=4).eval()
    m.load_state_dict(mlstm_layer_state_dict(fx["official"]))
    with torch.no_grad():
        # parallel form vs the official forward (parallel cell); recurrent/chunkwise vs the official step loop
        assert_close_fp32(m(x, mode="parallel")[0], fx["output"]["y"])
        for mode in ("recurrent", "chunkwise"):
            assert_close_fp32(m(x, mode=mode)[0], fx["output"]["y_step"])
        m64 = m.double()
        m64.load_state_dict(mlstm_layer_state_dict(dbl(fx["official"])))
        x64 = x.double()
        assert_close(m64(x64, mode="parallel")[0], fx["output"]["y_fp64"], 1e-12, floor=0)
        assert_close(m64(x64, mode="recurrent")[0], fx["output"]["y_step_fp64"], 1e-12, floor=0)
        assert_close(
            m64(x64, mode="chunkwise")[0], fx["output"]["y_step_fp64"], 1e-6, floor=0
        )  # eps effect across forms
        # states after the prefill (29 tokens) and after all 37, in the NeurIPS convention (C, n / sqrt(DH))
        m32 = m.float()
        m32.load_state_dict(mlstm_layer_state_dict(fx["official"]))
        _, s = m32(x[:, :29])
        for stage, state in (("prefill", s), ("decode", m32(x[:, 29:], state=s)[1])):
            ours = mlstm_state_to_neurips(state)
            for name in "Cnm":
                assert_close_fp32(ours[name], fx["state"][f"{stage}.{name}"])
            assert_close_fp32(ours["conv"], fx["state"][f"{stage}.conv"][:, 1:])
        # and the other way: continue from the official prefill state with single steps
        st = mlstm_state_from_neurips(*(fx["state"][f"prefill.{k}"] for k in ("C", "n", "m", "conv")))
        ys = []
        for t in range(29, 37):
            y, st = m32(x[:, t : t + 1], state=st)
            ys.append(y)
        assert_close_fp32(torch.cat(ys, 1), fx["output"]["y_step"][:, 29:])


def test_mlstm_layer_intermediates(shared):
    fx = fixture(shared, "mlstm_layer")
    m = build_mixer("mlstm", d_model=32, n_heads=4).eval()
    m.load_state_dict(mlstm_layer_state_dict(fx["official"]))
    assert_close_fp32(m.proj_up(fx["input"]["x"]), fx["inter"]["proj_up"])


def test_slstm_layer_fixture(shared):
    fx = fixture(shared, "slstm_layer")
    x = fx["input"]["x"]
    m = build_mixer("slstm", d_model=32, n_heads=4).eval()
    m.load_state_dict(slstm_layer_state_dict(fx["official"], num_heads=4))
    assert_close_fp32(m.R.detach(), fx["view"]["slstm_cell.recurrent_kernel"], atol=0, rtol=0)
    assert_close_fp32(m.bias.detach(), fx["view"]["slstm_cell.bias"], atol=0, rtol=0)
    with torch.no_grad():
        for impl in ("fused", "naive"):
            m.impl = impl
            y, s = m(x)
            assert_close_fp32(y, fx["output"]["y"])
            ref = slstm_state_from_official(fx["state"]["full.slstm"], fx["state"]["full.conv"])
            for k in ("h", "c", "n", "m", "conv"):
                assert_close_fp32(getattr(s, k), getattr(ref, k))
        y1, s1 = m(x[:, :29])
        assert_close_fp32(y1, fx["output"]["y_prefill"])
        ys = []
        for t in range(29, 37):
            y, s1 = m(x[:, t : t + 1], state=s1)
            ys.append(y)
        assert_close_fp32(torch.cat(ys, 1), fx["output"]["y_decode"])
        ref = slstm_state_from_official(fx["state"]["decode.slstm"], fx["state"]["decode.conv"])
        for k in ("h", "c", "n", "m", "conv"):
            assert_close_fp32(getattr(s1, k), getattr(ref, k))
        m64 = m.double()
        m64.load_state_dict(slstm_layer_state_dict(dbl(fx["official"]), num_heads=4))
        assert_close(m64(x.double())[0], fx["output"]["y_fp64"], 1e-12, floor=0)


def _lm(fx, dtype=torch.float32):
    cfg = lm_config_from_official(fx["meta"]["config"])
    model = seqzoo.LanguageModel(cfg).to(dtype).eval()
    sd = fx["official"] if dtype == torch.float32 else dbl(fx["official"])
    model.load_state_dict(lm_state_dict(sd, cfg))
    return model


def test_xlstm_lm_fixture(shared):
    fx = fixture(shared, "xlstm_lm")
    ids = fx["input"]["input_ids"]
    model = _lm(fx)
    assert model.num_parameters() == fx["meta"]["num_parameters"] == 37196
    with torch.no_grad():
        out = model(ids)
        assert_close_fp32(out.logits, fx["output"]["logits"], atol=1e-5, rtol=1e-5)
        assert_close_fp32(model.trunk(ids)[0], fx["inter"]["xlstm_block_stack.post_blocks_norm"], atol=1e-5, rtol=1e-5)
        # prefill 29 + 8 single-token steps: logits and every block's state
        out = model(ids[:, :29])
        logits, states = [out.logits], out.states
        for stage in ("prefill", "decode"):
            if stage == "decode":
                for t in range(29, 37):
                    out = model(ids[:, t : t + 1], states=states)
                    logits.append(out.logits)
                    states = out.states
            for b, st in enumerate(states):
                P = f"{stage}.block_{b}."
                if b == 1:
                    ref = slstm_state_from_official(fx["state"][P + "slstm_state"], fx["state"][P + "conv_state"])
                    for k in ("h", "c", "n", "m", "conv"):
                        assert_close_fp32(getattr(st, k), getattr(ref, k), atol=1e-5, rtol=1e-5)
                else:
                    ours = mlstm_state_to_neurips(st)
                    for k in "Cnm":
                        assert_close_fp32(ours[k], fx["state"][P + f"mlstm_state.{k}"], atol=1e-5, rtol=1e-5)
                    assert_close_fp32(ours["conv"], fx["state"][P + "conv_state"][:, 1:])
        assert_close_fp32(torch.cat(logits, 1), fx["output"]["logits_step"], atol=1e-5, rtol=1e-5)
    model64 = _lm(fx, torch.float64)
    with torch.no_grad():
        assert_close(model64(ids, mode=None).logits, fx["output"]["logits_step_fp64"], 1e-6, floor=0)


def test_xlstm_lm_fixture_fp64_same_algorithm(shared):
    """mLSTM layers in the parallel form (the official forward) match the official float64 logits to 1e-12."""
    fx = fixture(shared, "xlstm_lm")
    cfg = lm_config_from_official(fx["meta"]["config"])
    cfg.mixer_kwargs["mlstm"]["mode"] = "parallel"
    model = seqzoo.LanguageModel(cfg).double().eval()
    model.load_state_dict(lm_state_dict(dbl(fx["official"]), cfg))
    with torch.no_grad():
        assert_close(model(fx["input"]["input_ids"]).logits, fx["output"]["logits_fp64"], 1e-12, floor=0)


@pytest.mark.parametrize("layout", ["single", "fused"])
def test_xlstm_large_fixture(shared, layout):
    fx = fixture(shared, "xlstm_large")
    ids = fx["input"]["input_ids"]
    cfg = large_config_from_official(fx["meta"]["config"])
    model = seqzoo.LanguageModel(cfg).eval()
    model.load_state_dict(large_state_dict(fx["official"] if layout == "single" else fx["fused"], cfg))
    assert model.num_parameters() == 115656
    with torch.no_grad():
        out = model(ids)
        assert_close_fp32(out.logits, fx["output"]["logits"])
        for b, st in enumerate(out.states):
            for k in "Cnm":
                assert_close_fp32(getattr(st, k), fx["state"][f"full.block_{b}.{k}"].reshape(getattr(st, k).shape))
        out = model(ids[:, :29])
        assert_close_fp32(out.logits, fx["output"]["logits_prefill"])
        logits, states = [], out.states
        for t in range(29, 37):
            out = model(ids[:, t : t + 1], states=states)
            logits.append(out.logits)
            states = out.states
        assert_close_fp32(torch.cat(logits, 1), fx["output"]["logits_decode"])
        for b, st in enumerate(states):
            for k in "Cnm":
                assert_close_fp32(getattr(st, k), fx["state"][f"decode.block_{b}.{k}"].reshape(getattr(st, k).shape))


# ----------------------------------------------------------------------------------- live official package
def _perturb(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            std = 0.1 * float(p.std()) if p.numel() > 1 and float(p.std()) > 0 else 0.1
            p.add_(std * torch.randn(p.shape, generator=g))


@pytest.mark.parity
@pytest.mark.parametrize("D,H,T", [(48, 4, 50), (64, 2, 23)])
def test_live_mlstm_layer(D, H, T):
    xlstm = pytest.importorskip("xlstm")
    torch.manual_seed(0)
    off = xlstm.mLSTMLayer(xlstm.mLSTMLayerConfig(embedding_dim=D, num_heads=H, context_length=T)).eval()
    off.reset_parameters()
    _perturb(off, 1)
    ours = build_mixer("mlstm", d_model=D, n_heads=H).eval()
    ours.load_state_dict(mlstm_layer_state_dict(off.state_dict()))
    x = torch.randn(2, T, D)
    with torch.no_grad():
        assert_close_fp32(ours(x, mode="parallel")[0], off(x), atol=2e-5, rtol=1e-5)
        st, conv, ys = None, None, []
        for t in range(T):
            y, s = off.step(x[:, t : t + 1], mlstm_state=st, conv_state=conv)
            st, conv = s["mlstm_state"], s["conv_state"]
            ys.append(y)
        y_ours, s_ours = ours(x, mode="chunkwise")
        assert_close_fp32(y_ours, torch.cat(ys, 1), atol=2e-5, rtol=1e-5)
        neu = mlstm_state_to_neurips(s_ours)
        for k, ref in zip("Cnm", st):
            assert_close_fp32(neu[k], ref, atol=2e-5, rtol=1e-5)


@pytest.mark.parity
@pytest.mark.parametrize("D,H", [(24, 3), (64, 4)])
def test_live_slstm_layer(D, H):
    xlstm = pytest.importorskip("xlstm")
    torch.manual_seed(0)
    off = xlstm.sLSTMLayer(
        xlstm.sLSTMLayerConfig(embedding_dim=D, num_heads=H, conv1d_kernel_size=4, backend="vanilla")
    ).eval()
    off.reset_parameters()
    _perturb(off, 2)
    with torch.no_grad():
        off.slstm_cell._recurrent_kernel_.add_(0.3 * torch.randn_like(off.slstm_cell._recurrent_kernel_))
    ours = build_mixer("slstm", d_model=D, n_heads=H).eval()
    cell = off.slstm_cell
    # the cell's properties are ParameterProxy objects: .clone() gives the external view, .detach() the raw tensor
    ours.load_state_dict(
        slstm_layer_state_dict(
            off.state_dict(), H, R=cell.recurrent_kernel.clone().detach(), bias=cell.bias.clone().detach()
        )
    )
    x = torch.randn(2, 31, D)
    with torch.no_grad():
        y_off, s_off = off(x, return_last_state=True)
        y, s = ours(x)
        assert_close_fp32(y, y_off, atol=2e-5, rtol=1e-5)
        ref = slstm_state_from_official(s_off["slstm_state"], s_off["conv_state"])
        for k in ("h", "c", "n", "m", "conv"):
            assert_close_fp32(getattr(s, k), getattr(ref, k), atol=2e-5, rtol=1e-5)


@pytest.mark.parity
def test_live_xlstm71_lm():
    xlstm = pytest.importorskip("xlstm")
    from dataclasses import asdict

    torch.manual_seed(0)
    cfg = xlstm.xLSTMLMModelConfig(
        vocab_size=50,
        embedding_dim=32,
        num_blocks=8,
        slstm_at=[3],
        context_length=40,
        tie_weights=False,
        mlstm_block=xlstm.mLSTMBlockConfig(mlstm=xlstm.mLSTMLayerConfig(num_heads=4)),
        slstm_block=xlstm.sLSTMBlockConfig(
            slstm=xlstm.sLSTMLayerConfig(backend="vanilla", num_heads=4),
            feedforward=xlstm.FeedForwardConfig(proj_factor=1.3, act_fn="gelu"),
        ),
    )
    off = xlstm.xLSTMLMModel(cfg).eval()
    off.reset_parameters()
    _perturb(off, 3)
    ours_cfg = lm_config_from_official(asdict(cfg))
    model = seqzoo.LanguageModel(ours_cfg).eval()
    model.load_state_dict(lm_state_dict(off.state_dict(), ours_cfg))
    ids = torch.randint(0, 50, (2, 40))
    with torch.no_grad():
        assert_close_fp32(model(ids).logits, off(ids), atol=5e-5, rtol=1e-5)


@pytest.mark.parity
def test_live_xlstm_large():
    pytest.importorskip("xlstm")
    from dataclasses import asdict

    from xlstm.xlstm_large.model import xLSTMLarge, xLSTMLargeConfig

    torch.manual_seed(0)
    cfg = xLSTMLargeConfig(
        embedding_dim=96,
        num_heads=3,
        num_blocks=3,
        vocab_size=40,
        chunk_size=8,
        chunkwise_kernel="chunkwise--native_autograd",
        sequence_kernel="native_sequence__native",
        step_kernel="native",
        mode="inference",
        return_last_states=True,
        autocast_kernel_dtype="float32",
        inference_state_dtype="float32",
    )
    off = xLSTMLarge(cfg).eval()
    _perturb(off, 4)
    ours_cfg = large_config_from_official(asdict(cfg))
    model = seqzoo.LanguageModel(ours_cfg).eval()
    model.load_state_dict(large_state_dict(off.state_dict(), ours_cfg))
    ids = torch.randint(0, 40, (2, 27))
    with torch.no_grad():
        ref, ref_state = off(ids)
        out = model(ids)
        assert_close_fp32(out.logits, ref, atol=5e-5, rtol=1e-5)
        for b, st in enumerate(out.states):
            for k, r in zip("Cnm", ref_state[b]):
                assert_close_fp32(getattr(st, k), r.reshape(getattr(st, k).shape), atol=5e-5, rtol=1e-5)
