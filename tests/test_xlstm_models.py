"""xLSTM mixers as layers, the 7B-style variant, presets (parameter counts), stacks and decoding."""

import math

import pytest
import torch

import seqzoo
from seqzoo.mixers import build_mixer
from seqzoo.models.presets.xlstm import xlstm_config, xlstm_init_

# paper sizes (arXiv:2405.04517 §4; millions of parameters, untied, vocab 50304) and xLSTM 7B (arXiv:2503.13427)
PAPER_COUNTS = {
    "xlstm71-125m": 163.7,
    "xlstm10-125m": 163.8,
    "xlstm71-350m": 408.4,
    "xlstm10-350m": 409.3,
    "xlstm71-760m": 839.7,
    "xlstm10-760m": 840.4,
    "xlstm71-1.3b": 1420.1,
    "xlstm10-1.3b": 1422.6,
    "xlstm-7b": 6865.0,
}


@pytest.mark.parametrize("name", sorted(PAPER_COUNTS))
def test_paper_parameter_counts(name):
    with torch.device("meta"):
        model = seqzoo.build_model(name)
    got = model.num_parameters() / 1e6
    assert abs(got - PAPER_COUNTS[name]) <= 0.005 * PAPER_COUNTS[name], (name, got)


def test_paper_placement_rules():
    cfg = seqzoo.PRESETS["xlstm71-350m"].config()
    assert [i for i, m in enumerate(cfg.layer_mixers()) if m == "slstm"] == [3, 5, 7, 40, 42, 44]
    assert [i for i, m in enumerate(seqzoo.PRESETS["xlstm71-125m"].config().layer_mixers()) if m == "slstm"] == [3, 20]
    assert set(seqzoo.PRESETS["xlstm10-350m"].config().layer_mixers()) == {"mlstm"}
    with pytest.raises(ValueError, match="slstm_at"):
        xlstm_config(64, 4, [4])


def _variant_7b(**kw):
    torch.manual_seed(0)
    return build_mixer("mlstm", d_model=16, variant="7b", n_heads=2, chunk_size=4, **kw).double().eval()


def test_7b_variant_modes_split_and_steps():
    m = _variant_7b()
    with torch.no_grad():  # give the gates a spread (the 7B init sets the input-gate bias to -10)
        m.igate.bias.normal_()
        m.igate.weight.normal_(std=0.3)
    x = torch.randn(2, 13, 16, dtype=torch.float64)
    torch.set_grad_enabled(False)
    ref, s_ref = m(x, mode="recurrent")
    for mode in ("parallel", "chunkwise"):
        y, s = m(x, mode=mode)
        assert float((y - ref).abs().max()) <= 1e-6 * max(1.0, float(ref.abs().max()))
    y1, s = m(x[:, :6])
    outs = [y1]
    for t in range(6, 13):
        y, s = m(x[:, t : t + 1], state=s)
        outs.append(y)
    assert float((torch.cat(outs, 1) - ref).abs().max()) <= 1e-6 * max(1.0, float(ref.abs().max()))
    assert s.conv is None and s.C.shape == (2, 2, 4, 8)
    torch.set_grad_enabled(True)


def test_mlstm_layer_structure_and_state_shapes():
    m = build_mixer("mlstm", d_model=32, n_heads=4)
    assert m.inner == 64 and m.qk_dim == 16 and m.q_proj.shape == (16, 4, 4)
    y, s = m(torch.randn(2, 5, 32))
    assert (s.C.shape, s.n.shape, s.m.shape, s.conv.shape) == ((2, 4, 16, 16), (2, 4, 16), (2, 4), (2, 3, 64))
    assert s.C.dtype == torch.float32
    yb, sb = m.bfloat16()(torch.randn(2, 5, 32).bfloat16())
    assert yb.dtype == torch.bfloat16 and sb.C.dtype == torch.float32 and torch.isfinite(yb.float()).all()


def test_bad_configurations_raise():
    with pytest.raises(ValueError, match="n_heads"):
        build_mixer("mlstm", d_model=32, n_heads=5)
    with pytest.raises(ValueError, match="n_heads"):
        build_mixer("slstm", d_model=32, n_heads=3)
    with pytest.raises(ValueError, match="variant"):
        build_mixer("mlstm", d_model=32, variant="8b")
    with pytest.raises(ValueError, match="forget_gate"):
        build_mixer("mlstm", d_model=32, forget_gate="relu")
    with pytest.raises(ValueError, match="mode"):
        build_mixer("mlstm", d_model=32, mode="scan")
    with pytest.raises(ValueError, match="cell_mode"):
        build_mixer("slstm", d_model=32, cell_mode="cuda")
    with pytest.raises(ValueError, match="n_heads"):
        build_mixer("mlstm", d_model=64, variant="7b", n_heads=3)
    m = build_mixer("mlstm", d_model=32)
    with pytest.raises(ValueError, match="mode"):
        m(torch.randn(1, 3, 32), mode="scan")
    with pytest.raises(ValueError, match="shape"):
        m(torch.randn(1, 3, 31))
    with pytest.raises(TypeError, match="MLSTMState"):
        m(torch.randn(1, 3, 32), state=(1, 2, 3))
    _, s = m(torch.randn(2, 3, 32))
    with pytest.raises(ValueError, match="state.C"):
        m(torch.randn(1, 3, 32), state=s)


def test_init_recipe():
    model = seqzoo.build_model("xlstm-tiny")
    xlstm_init_(model)
    D, N = 128, 4
    sl = model.blocks[1].mixer
    assert sl.block_idx == 1 and float(sl.R.detach().abs().max()) == 0.0
    fb = sl.bias[0, 1]  # forget bias of head 0: +5 -> -7 power law
    assert abs(float(fb[0]) - 5.0) < 1e-6 and abs(float(fb[-1]) + 7.0) < 1e-5
    ml = model.blocks[0].mixer
    assert torch.allclose(ml.fgate.bias, torch.linspace(3, 6, 4)) and float(ml.igate.weight.abs().max()) == 0.0
    assert abs(float(ml.proj_down.weight.std()) - 2 / (N * math.sqrt(D))) < 0.1 * 2 / (N * math.sqrt(D))
    assert float(ml.skip.min()) == 1.0


@pytest.mark.parametrize("name", ["xlstm-tiny", "xlstm7b-tiny"])
def test_prefill_then_decode_equals_full_forward(name):
    torch.manual_seed(0)
    model = seqzoo.build_model(name, vocab_size=64).eval()
    ids = torch.randint(0, 64, (2, 37))
    with torch.no_grad():
        full = model(ids).logits
        out = model(ids[:, :29])
        logits = [out.logits]
        states = out.states
        for t in range(29, 37):
            out = model(ids[:, t : t + 1], states=states)
            logits.append(out.logits)
            states = out.states
    assert float((torch.cat(logits, 1) - full).abs().max()) <= 1e-4


def test_model_trains_and_generates():
    torch.manual_seed(0)
    model = seqzoo.build_model("xlstm-tiny", vocab_size=32)
    ids = torch.randint(0, 32, (2, 16))
    out = model(ids, labels=ids)
    out.loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    gen = model.generate(ids[:, :4], max_new_tokens=5, temperature=0)
    assert gen.shape == (2, 9)


@pytest.mark.parametrize("bs_out", [4, 2])
@pytest.mark.parametrize("nb", [3, 16, 7])  # one group of 3; two groups of 8 blocks; 7 blocks in groups of 7
@pytest.mark.parametrize("T", [5, 40])  # 10 tokens: one bmm over the blocks (decoding); 80: the grouped matmuls
@pytest.mark.parametrize("path", ["dispatch", "matmul"])  # the dispatcher takes the C path for 4 x 4 from 64 tokens
def test_headwise_matches_einsum_and_gradcheck(bs_out, nb, T, path):
    """The block-diagonal q/k/v map (bmm over groups of blocks, saving x rather than its block-major copy) against
    the einsum it replaces, with and without autograd, and its hand-written backward by gradcheck (float64)."""
    from seqzoo.ops.mlstm.headwise import _group, headwise_matmul
    from seqzoo.ops.mlstm.headwise import headwise as dispatched

    headwise = dispatched if path == "dispatch" else headwise_matmul
    assert _group(128, 4) == 8 and _group(7, 4) == 7 and _group(5, 64) == 1
    g = torch.Generator().manual_seed(nb + T)
    x = torch.randn(2, T, nb * 4, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(nb, bs_out, 4, dtype=torch.float64, generator=g, requires_grad=True)
    ref = torch.einsum("btni,noi->btno", x.view(2, T, nb, 4), w).reshape(2, T, nb * bs_out)
    torch.testing.assert_close(headwise(x, w), ref)
    with torch.no_grad():
        torch.testing.assert_close(headwise(x, w), ref)
    fast = T > 5  # random projections instead of the full Jacobian of 2·T·4·nb inputs
    torch.autograd.gradcheck(headwise, (x, w), fast_mode=fast)
    torch.autograd.gradcheck(lambda a: headwise(a, w.detach()), (x,), fast_mode=fast)  # only x needs a gradient


def test_torch_compile_leaves_the_slstm_time_loop_uncompiled():
    """torch.compile of a whole model must not trace the sLSTM loop over T (traced, a 10M xLSTM[7:1] did not finish
    compiling in 20 minutes at T = 1024; excluded, it compiles in 40 s): ``ops.slstm.slstm`` is excluded, so the
    forward and backward graphs captured through AOT autograd have the same size at T = 32 and T = 48. The recording
    backend runs them as they are (no Inductor, fast), and the compiled model gives the eager logits and gradients."""
    from torch._dynamo.backends.common import aot_autograd

    torch.manual_seed(0)
    model = seqzoo.build_model("xlstm-tiny", vocab_size=32)
    assert "slstm" in model.config.layer_mixers()
    nodes = {}
    # both lengths give B·T >= 64 rows, so the q/k/v blocks take the same (grouped) path: only an unrolled time
    # loop could make the graphs differ
    for T in (32, 48):
        torch._dynamo.reset()
        sizes = []

        def record(gm, example_inputs, sizes=sizes):
            sizes.append(len(gm.graph.nodes))
            return gm.forward

        ids = torch.randint(0, 32, (2, T))
        model.zero_grad(set_to_none=True)
        eager = model(ids, labels=ids)
        eager.loss.backward()
        g_eager = {n: p.grad.clone() for n, p in model.named_parameters()}
        model.zero_grad(set_to_none=True)
        backend = aot_autograd(fw_compiler=record, bw_compiler=record)
        compiled = torch.compile(model, backend=backend, dynamic=False)(ids, labels=ids)
        compiled.loss.backward()
        assert float((compiled.logits - eager.logits).abs().max()) <= 1e-5
        for n, p in model.named_parameters():
            assert float((p.grad - g_eager[n]).abs().max()) <= 1e-5 * max(1.0, float(g_eager[n].abs().max())), n
        nodes[T] = sum(sizes)
    torch._dynamo.reset()
    assert nodes[32] > 0 and nodes[48] == nodes[32], nodes
