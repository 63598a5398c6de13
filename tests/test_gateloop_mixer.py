"""GateLoop mixers and models: modes equal through the mixer, transitions, state handling, optimiser groups, errors."""

import math

import pytest
import torch

import seqzoo
from seqzoo.mixers import MIXERS, build_mixer
from seqzoo.mixers.gateloop import fixed_transition_init

MODES = MIXERS["gateloop"].modes
CONFIGS = {  # name -> constructor kwargs (d_model = 8)
    "maxhead": {},
    "heads": {"n_heads": 2, "d_qk": 6, "d_v": 8},
    "heads_outproj": {"n_heads": 3, "d_qk": 6, "d_v": 9},
}
TRANSITIONS = ["data", "fixed", "real", "retnet"]


def make(seed=0, dtype=torch.float64, **kw):
    torch.manual_seed(seed)
    m = build_mixer("gateloop", d_model=8, chunk_size=5, **kw).to(dtype)
    with torch.no_grad():  # γ̃ ~ 1 + 2·N(0,1)-like spread: shift the magnitude bias
        if getattr(m, "gamma_proj", None) is not None:
            m.gamma_proj.bias.add_(1.0)
    return m


def x_(B=2, T=33, seed=1, dtype=torch.float64):
    return torch.randn(B, T, 8, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def rel(a, b):
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("transition", TRANSITIONS)
def test_modes_equal_outputs_states_and_gradients_fp64(cfg, transition):
    m = make(transition=transition, **CONFIGS[cfg])
    x = x_()
    S0 = torch.randn(*m.state_shape(2), dtype=torch.complex128)
    results = {}
    for mode in MODES:
        m.zero_grad()
        xx = x.clone().requires_grad_(True)
        s0 = S0.clone().requires_grad_(True)
        y, S = m(xx, state=s0, mode=mode)
        ((y * torch.cos(torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape))).sum() + S.abs().sum()).backward()
        grads = [xx.grad, s0.grad] + [p.grad.clone() for p in m.parameters() if p.requires_grad]
        results[mode] = (y.detach(), S.detach(), grads)
    y0, S0r, g0 = results["recurrent"]
    for mode in MODES[1:]:
        y, S, g = results[mode]
        assert rel(y, y0) <= 1e-10 and rel(S, S0r) <= 1e-10, mode
        for a, b in zip(g, g0):
            assert rel(a, b) <= 1e-8, mode


@pytest.mark.parametrize("cfg", ["maxhead", "heads"])
@pytest.mark.parametrize("transition", ["data", "real"])
def test_modes_fp32_match_fp64(cfg, transition):
    m64 = make(transition=transition, **CONFIGS[cfg])
    m32 = make(transition=transition, dtype=torch.float32, **CONFIGS[cfg])
    x = x_(T=129)
    ref, S_ref = m64(x, mode="recurrent")
    for mode in MODES:
        y, S = m32(x.float(), mode=mode)
        assert y.dtype == torch.float32 and S.dtype == torch.complex64
        assert rel(y.double(), ref) <= 1e-4 and rel(S.to(torch.complex128), S_ref) <= 1e-4, mode


@pytest.mark.parametrize("cfg", ["maxhead", "heads"])
def test_split_with_state_equals_whole_at_chunk_edges(cfg):
    m = make(**CONFIGS[cfg])  # C = 5
    x = x_(T=23)
    for mode in MODES:
        whole, S_whole = m(x, mode=mode)
        for t in (1, 4, 5, 6, 22):
            y1, s = m(x[:, :t], mode=mode)
            y2, S = m(x[:, t:], state=s, mode=mode)
            assert rel(torch.cat([y1, y2], 1), whole) <= 1e-12 and rel(S, S_whole) <= 1e-12, (mode, t)


def test_default_modes():
    assert make().default_mode(x_(), None) == "scan"
    assert make(**CONFIGS["heads"]).default_mode(x_(), None) == "chunkwise"
    assert make().default_mode(x_(T=1), None) == "recurrent"


def test_gradcheck_max_head_mixer():
    torch.manual_seed(0)
    m = build_mixer("gateloop", d_model=3, chunk_size=4).double()
    x = torch.randn(1, 9, 3, dtype=torch.float64, requires_grad=True)
    for mode in MODES:
        assert torch.autograd.gradcheck(lambda x: m(x, mode=mode)[0], (x,), fast_mode=True)


def test_gradcheck_softmax_variant():
    torch.manual_seed(0)
    m = build_mixer("gateloop_softmax", d_model=4, n_heads=2).double()
    x = torch.randn(1, 9, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: m(x)[0], (x,), fast_mode=True)


def test_softmax_variant_matches_direct_formula():
    torch.manual_seed(0)
    m = build_mixer("gateloop_softmax", d_model=6, n_heads=2).double().requires_grad_(False)
    x = x_(B=1, T=11, dtype=torch.float64)[..., :6]
    y, _ = m(x)
    H, K = 2, 3
    q = m.q_proj(x).reshape(1, 11, H, K)
    k = m.k_proj(x).reshape(1, 11, H, K)
    v = m.v_proj(x).reshape(1, 11, H, K)
    lm, th = m.gates(x)
    a = torch.exp(torch.complex(lm, th)).reshape(1, 11, H, K)
    out = torch.zeros(1, 11, H, K, dtype=torch.float64)
    for n in range(11):
        for h in range(H):
            scores = []
            for j in range(n + 1):
                prod = torch.prod(a[0, j + 1 : n + 1, h], dim=0) if j < n else torch.ones(K, dtype=a.dtype)
                scores.append(float((q[0, n, h] * k[0, j, h] * prod).real.sum()))
            w = torch.softmax(torch.tensor(scores, dtype=torch.float64), 0)
            out[0, n, h] = (w[:, None] * v[0, : n + 1, h]).sum(0)
    assert rel(y, out.reshape(1, 11, 6)) <= 1e-10


def test_fixed_transitions_ignore_the_input():
    m = make(transition="fixed")
    x1, x2 = x_(seed=1), x_(seed=2)
    assert torch.equal(m.gates(x1)[0][0, 0], m.gates(x2)[0][1, 5])
    assert {n for n, _ in m.named_parameters()} >= {"gamma", "theta"}
    real = make(transition="real")
    assert real.gates(x1)[1] is None and not hasattr(real.theta_proj, "weight")


@pytest.mark.parametrize("H", [4, 8, 16])
def test_retnet_decays(H):
    """RetNet's γ_h = 1 - 2^{-5-h} per head at every H (arXiv:2307.08621; torchscale), not only at H = 8."""
    m = build_mixer("gateloop", d_model=16, transition="retnet", n_heads=H)
    lm, th = m.gates(torch.zeros(1, 2, 16))
    log_gamma = lm[0, 0].double().reshape(H, 16 // H)
    expect = torch.log1p(-(2.0 ** (-5.0 - torch.arange(H, dtype=torch.float64))))
    assert torch.allclose(log_gamma, expect[:, None].expand(H, 16 // H), rtol=1e-6, atol=0)
    assert not any(p.requires_grad for n, p in m.named_parameters() if "retnet" in n)
    assert torch.allclose(th[0, 0], 10000.0 ** (-torch.arange(16.0) / 16))


def _fixed_gates(kind, **kw):
    torch.manual_seed(0)
    m = build_mixer("gateloop", d_model=64, transition="fixed", fixed_init=kind, **kw).double()
    lm, th = m.gates(torch.zeros(1, 1, 64, dtype=torch.float64))
    return lm[0, 0].detach(), th[0, 0].detach()


def test_fixed_inits_map_to_the_intended_transitions():
    kk = torch.arange(64, dtype=torch.float64)
    for kw in ({}, {"magnitude": "exp_exp"}):
        lm, th = _fixed_gates("s4d_lin", **kw)  # a = exp(Δ(-1/2 + iπk)), Δ in [1e-3, 1e-1]
        dt = -2 * lm
        assert bool((dt >= 1e-3 * (1 - 1e-4)).all() and (dt <= 1e-1 * (1 + 1e-4)).all())
        assert torch.allclose(th, dt * math.pi * kk, rtol=1e-4, atol=1e-6)
        lm, th = _fixed_gates("s4d_inv", **kw)  # S4D's -1/2 + i(N/π)(N/(2k+1) - 1), N = 64
        dt = -2 * lm
        assert torch.allclose(th, dt * (64 / math.pi) * (64 / (2 * kk + 1) - 1), rtol=1e-4, atol=1e-6)
    for kw in ({}, {"magnitude": "exp_exp", "phase": "exp"}):  # LRU ring, also in LRU's own parametrisation
        lm, th = _fixed_gates("lru", **kw)
        assert bool((lm <= 0).all() and (lm.exp() > 0).all() and (th >= 0).all() and (th <= 2 * math.pi + 1e-6).all())
        assert float(th.std()) > 0.5 and float(lm.std()) > 0.1  # spread over the ring, not collapsed
    lm, th = _fixed_gates("zeros")
    assert torch.allclose(lm, torch.full_like(lm, math.log(0.5))) and bool((th == 0).all())
    lm, th = fixed_transition_init("lru", 1000, r_min=0.4, r_max=0.9, max_phase=math.pi)
    assert bool((lm.exp() >= 0.4 - 1e-9).all() and (lm.exp() <= 0.9).all() and (th <= math.pi).all())


def test_optim_overrides():
    m = make()
    names = dict(m.named_parameters())
    over = m.optim_overrides()
    assert set(over) == {"gamma_proj.weight", "gamma_proj.bias", "theta_proj.weight", "theta_proj.bias"}
    assert all(n in names and s == {"weight_decay": 0.0} for n, s in over.items())
    assert make(transition_weight_decay=None).optim_overrides() == {}
    assert set(make(transition="fixed", transition_lr=1e-4).optim_overrides()) == {"gamma", "theta"}
    model = seqzoo.build_model("gateloop-wt103", n_layers=1, vocab_size=16, d_model=12, mlp_hidden=8)
    over = model.optim_overrides()
    assert over["blocks.0.mixer.theta_proj.weight"] == {"lr": 1e-4, "weight_decay": 0.0}
    assert "blocks.0.mixer.q_proj.weight" not in over
    from seqzoo.train import TrainConfig, param_groups

    groups = param_groups(model, TrainConfig(lr=1.25e-4, weight_decay=0.25))
    by_name = {n: g for g in groups for n in g["names"]}
    assert by_name["blocks.0.mixer.gamma_proj.weight"]["lr"] == 1e-4
    assert by_name["blocks.0.mixer.gamma_proj.weight"]["weight_decay"] == 0.0
    assert by_name["blocks.0.mixer.q_proj.weight"]["lr"] == 1.25e-4


def test_presets():
    mh = seqzoo.build_model("gateloop-mh")
    cfg = mh.config
    assert (cfg.n_layers, cfg.d_model, cfg.mlp_hidden, cfg.mlp) == (4, 64, 128, "gelu")
    mixer = mh.blocks[0].mixer
    assert (mixer.n_heads, mixer.head_k, mixer.head_v, mixer.out_proj) == (64, 1, 1, None)
    wt = seqzoo.PRESETS["gateloop-wt103"].config()
    assert (wt.n_layers, wt.d_model, wt.mlp_hidden, wt.vocab_size) == (12, 624, 1872, 50257)
    assert seqzoo.build_model("gateloop-mh-fixed").blocks[0].mixer.transition == "fixed"


def test_lm_prefill_then_steps_equals_full():
    model = (
        seqzoo.build_model(
            "gateloop-tiny-heads",
            n_layers=2,
            d_model=16,
            mlp_hidden=32,
            mixer_kwargs={"gateloop": {"n_heads": 4, "chunk_size": 4}},
        )
        .double()
        .eval()
    )
    ids = torch.randint(0, 256, (2, 13), generator=torch.Generator().manual_seed(0))
    full = model(ids).logits
    out = model(ids[:, :6])
    logits, states = [out.logits], out.states
    for t in range(6, 13):
        out = model(ids[:, t : t + 1], states=states)
        logits.append(out.logits)
        states = out.states
    assert rel(torch.cat(logits, 1), full) <= 1e-10
    assert model.generate(ids[:, :3], max_new_tokens=4, do_sample=False).shape == (2, 7)


def test_bad_arguments_raise_clear_errors():
    for bad in ("identity", "exp", "softplus"):
        with pytest.raises(ValueError, match="can exceed 1"):
            build_mixer("gateloop", d_model=8, magnitude=bad)
    with pytest.raises(ValueError, match="magnitude must be one of"):
        build_mixer("gateloop", d_model=8, magnitude="nope")
    with pytest.raises(ValueError, match="phase"):
        build_mixer("gateloop", d_model=8, phase="tanh")
    with pytest.raises(ValueError, match="transition"):
        build_mixer("gateloop", d_model=8, transition="learned")
    with pytest.raises(ValueError, match="divisible by n_heads"):
        build_mixer("gateloop", d_model=8, n_heads=3)
    with pytest.raises(ValueError, match="out_proj"):
        build_mixer("gateloop", d_model=8, d_v=4, n_heads=2, out_proj=False)
    with pytest.raises(ValueError, match="fixed_init"):
        build_mixer("gateloop", d_model=8, transition="fixed", fixed_init="hippo")
    m = make(**CONFIGS["heads"])
    x = x_()
    with pytest.raises(ValueError, match="mode"):
        m(x, mode="fft")
    with pytest.raises(ValueError, match=r"state must be a complex tensor of shape \(B, H, K, V\) = \(2, 2, 3, 4\)"):
        m(x, state=torch.zeros(2, 2, 3, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\(2, 2, 3, 4\)"):
        m(x, state=torch.zeros(2, 2, 4, 3, dtype=torch.complex128))
    with pytest.raises(ValueError, match="d_model"):
        m(torch.randn(2, 5, 9, dtype=torch.float64))
