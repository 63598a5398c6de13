"""Griffin / Hawk / MQA models: presets and parameter counts (Griffin, arXiv:2402.19427, Table 2), embedding scale, soft-cap, split and
decode equivalence of the whole model, bounded decoding state (docs/griffin.md "Tests")."""

import contextlib

import pytest
import torch

import seqzoo
from seqzoo.mixers.attention import KVCache
from seqzoo.mixers.rglru import RGLRUState
from seqzoo.models.presets.griffin import bf16_sqrt, griffin_config


@contextlib.contextmanager
def no_init():
    """Skip weight initialisation (only shapes matter for counting; initialising on meta is slow)."""
    names = ("normal_", "zeros_", "ones_", "uniform_", "kaiming_uniform_")
    saved = {n: getattr(torch.nn.init, n) for n in names}
    saved_uniform = torch.Tensor.uniform_
    try:
        for n in names:
            setattr(torch.nn.init, n, lambda t, *a, **k: t)
        torch.Tensor.uniform_ = lambda t, *a, **k: t
        yield
    finally:
        for n, fn in saved.items():
            setattr(torch.nn.init, n, fn)
        torch.Tensor.uniform_ = saved_uniform


def count(name):
    with no_init(), torch.device("meta"):
        m = seqzoo.build_model(name)
    return m.num_parameters(), m.num_parameters(exclude_embeddings=True)


# non-embedding parameter counts of Griffin Table 2 sizes, in billions (arXiv:2402.19427, Table 2)
PAPER = {
    "100m": (0.094, 0.089),
    "200m": (0.174, 0.163),
    "400m": (0.375, 0.355),
    "1.3b": (1.304, 1.243),
    "3b": (2.996, 2.835),
    "7b": (7.176, 6.790),
    "14b": (14.811, 13.764),
}


@pytest.mark.parametrize("size", sorted(PAPER))
def test_paper_size_parameter_counts(size):
    hawk, griffin = PAPER[size]
    assert round(count(f"hawk-{size}")[1] / 1e9, 3) == hawk
    assert round(count(f"griffin-{size}")[1] / 1e9, 3) == griffin
    assert count(f"mqa-{size}")[1] < count(f"hawk-{size}")[1]


@pytest.mark.parametrize(
    "name,total,non_emb",
    [
        ("recurrentgemma-2b", 2.683, 2.028),
        ("recurrentgemma-9b", 8.580, 7.531),
        ("griffin-paper-7b", 7.795, 6.747),
        ("hawk-paper-7b", 8.162, 7.113),
    ],
)
def test_reference_preset_parameter_counts(name, total, non_emb):
    t, n = count(name)
    assert round(t / 1e9, 3) == total and round(n / 1e9, 3) == non_emb


def test_recurrentgemma_2b_layout():
    cfg = seqzoo.PRESETS["recurrentgemma-2b"].config()
    mixers = cfg.layer_mixers()
    assert (
        mixers.count("rglru") == 18
        and mixers.count("local_attention") == 8
        and mixers[:3] == ["rglru", "rglru", "local_attention"]
    )
    assert cfg.embed_scale == 50.5 and cfg.logit_softcap == 30.0 and cfg.tie_embeddings
    assert cfg.mixer_kwargs["local_attention"]["window"] == 2048
    assert bf16_sqrt(4096) == 64.0 and bf16_sqrt(64) == 8.0 and bf16_sqrt(48) == 6.9375


def tiny(name, **kw):
    torch.manual_seed(0)
    kw = {"d_model": 32, "n_layers": 3, "vocab_size": 64, **kw}
    cfg = seqzoo.PRESETS[name].config()
    mk = {k: dict(v) for k, v in cfg.mixer_kwargs.items()}
    if "rglru" in mk:
        mk["rglru"].update(d_rnn=48, n_blocks=4)
    for k in ("local_attention", "attention"):
        if k in mk:
            mk[k].update(n_heads=2, head_dim=16)
            if k == "local_attention":
                mk[k]["window"] = 4
    return seqzoo.LanguageModel(cfg.replace(mixer_kwargs=mk, mlp_hidden=96, **kw)).double().eval()


@pytest.mark.parametrize("name", ["hawk-tiny", "griffin-tiny", "mqa-tiny"])
@torch.no_grad()
def test_model_split_and_decode_equal_full(name):
    m = tiny(name)
    ids = torch.randint(0, 64, (2, 21), generator=torch.Generator().manual_seed(1))
    sp = torch.cat([torch.arange(9), torch.arange(12)]).expand(2, 21).clone()
    extra = {"segment_pos": sp}
    full = m(ids, **extra).logits
    for t in (1, 3, 4, 5, 13):  # 1, W-1, W, W+1, > 2W
        a = m(ids[:, :t], segment_pos=sp[:, :t])
        b = m(ids[:, t:], states=a.states, segment_pos=sp[:, t:])
        assert float((torch.cat([a.logits, b.logits], 1) - full).abs().max().detach()) <= 1e-12
    out = m(ids[:, :6], segment_pos=sp[:, :6])
    logits = [out.logits]
    for t in range(6, 21):
        out = m(ids[:, t : t + 1], states=out.states, segment_pos=sp[:, t : t + 1])
        logits.append(out.logits)
    assert float((torch.cat(logits, 1) - full).abs().max().detach()) <= 1e-12


@torch.no_grad()
def test_prefill_then_steps_fp32_bar():
    m = tiny("griffin-tiny").float()
    ids = torch.randint(0, 64, (2, 30), generator=torch.Generator().manual_seed(2))
    full = m(ids).logits
    out = m(ids[:, :11])
    logits = [out.logits]
    for t in range(11, 30):
        out = m(ids[:, t : t + 1], states=out.states)
        logits.append(out.logits)
    torch.testing.assert_close(torch.cat(logits, 1), full, rtol=1.3e-6, atol=1e-5)


@torch.no_grad()
def test_decode_state_is_bounded():
    m = tiny("griffin-tiny")
    ids = torch.randint(0, 64, (1, 3))
    out = m(ids)
    sizes = []
    for _ in range(12):
        out = m(ids[:, :1], states=out.states)
        sizes.append(sum(t.numel() for s in out.states for t in vars(s).values() if torch.is_tensor(t)))
        for s in out.states:
            assert isinstance(s, (RGLRUState, KVCache))
            if isinstance(s, KVCache):
                assert s.k.shape[1] <= 4
    assert len(set(sizes[3:])) == 1  # constant once the window is full
    g = m.generate(ids, max_new_tokens=5, temperature=0)
    assert g.shape == (1, 8)


@torch.no_grad()
def test_softcap_and_embedding_scale():
    m = tiny("griffin-tiny", logit_softcap=2.0, embed_scale=3.0)
    uncapped = tiny("griffin-tiny", logit_softcap=None, embed_scale=3.0)
    m.embed.weight.data.mul_(40.0)  # raw logits well past the cap, so the bound below says something
    uncapped.load_state_dict(m.state_dict())
    ids = torch.randint(0, 64, (1, 7))
    out, raw = m(ids).logits, uncapped(ids).logits
    assert float(raw.abs().max()) > 4.0  # the uncapped model breaks the bound ...
    assert float(out.abs().max()) <= 2.0  # ... the capped one keeps it,
    torch.testing.assert_close(out, 2.0 * torch.tanh(raw / 2.0))  # by exactly cap * tanh(logits / cap)
    x = m.embed_tokens(ids)
    assert torch.equal(x, m.embed(ids) * 3.0)
    assert m.lm_head.weight is m.embed.weight


@torch.no_grad()
def test_griffin_init():
    torch.manual_seed(0)
    cfg = griffin_config("griffin", 64, 256, 192, 4, 4, n_blocks=4, window=8)
    m = seqzoo.LanguageModel(cfg)
    assert cfg.mlp_hidden == 768 and m.blocks[2].mixer.o_proj.in_features == 256
    kappa = 2 / 4
    rec, att = m.blocks[0], m.blocks[2]
    assert abs(float(rec.mixer.linear_x.weight.std()) - 256**-0.5) < 0.005
    assert abs(float(rec.mixer.linear_out.weight.std()) - (kappa / 192) ** 0.5) < 0.005
    assert abs(float(att.mixer.o_proj.weight.std()) - (kappa / 256) ** 0.5) < 0.005
    assert abs(float(rec.mlp.down.weight.std()) - (kappa / 768) ** 0.5) < 0.003
    assert abs(float(m.embed.weight.std()) - 256**-0.5) < 0.005
    assert float(att.mixer.o_proj.bias.abs().max()) == 0.0 and torch.equal(rec.norm1.weight, torch.ones(256))


@torch.no_grad()
def test_save_load_roundtrip(tmp_path):
    m = tiny("griffin-tiny").float()
    m.save_pretrained(tmp_path)
    m2 = seqzoo.LanguageModel.from_pretrained(tmp_path)
    ids = torch.randint(0, 64, (1, 9))
    assert torch.equal(m(ids).logits, m2(ids).logits)


@torch.no_grad()
@pytest.mark.parametrize("name", ["hawk-tiny", "griffin-tiny", "mqa-tiny"])
def test_decode_bench_states_match_a_real_prefill(name):
    from seqzoo.bench.decode import state_bytes, states_at

    m = seqzoo.build_model(name, n_layers=3).eval()
    ids = torch.randint(0, 256, (1, 40))
    real = m(ids).states
    built = states_at(m, 40)
    assert state_bytes(real) == state_bytes(built)
    for r, b in zip(real, built):
        for key, t in vars(r).items():
            if torch.is_tensor(t) and key != "seg":
                assert getattr(b, key).shape == t.shape, key
    if name != "mqa-tiny":  # constant state: the same bytes at any context length
        assert state_bytes(states_at(m, 5000)) == state_bytes(built)
    # the values: at the length of the prompt states_at prefills (the window + 1, at least 8 tokens), its states are
    # those of a real prefill of that prompt (its ids: seed 0), every tensor and the stream position
    windows = [b.mixer.window for b in m.blocks if getattr(b.mixer, "window", None)]
    L = max([w + 1 for w in windows] + [8])
    prompt = torch.randint(0, m.config.vocab_size, (1, L), generator=torch.Generator().manual_seed(0))
    real, built = m(prompt).states, states_at(m, L)
    for layer, (r, b) in enumerate(zip(real, built)):
        for key, t in vars(r).items():
            if torch.is_tensor(t) and key != "seg":
                assert torch.equal(getattr(b, key), t), (layer, key)
    # past the prompt a global cache grows to L keys: the newest are the prompt's own
    far = states_at(m, 3 * L)
    for r, b in zip(real, far):
        if isinstance(r, KVCache):
            S = r.k.shape[1]
            assert torch.equal(b.k[:, -S:], r.k) and torch.equal(b.v[:, -S:], r.v)
            assert (b.pos == 3 * L).all()


def test_equal_size_experiment_configs():
    from seqzoo.experiments.griffin import equal_size_configs

    cfgs = equal_size_configs(256, d_model=64, n_layers=3)
    sizes = {k: seqzoo.LanguageModel(c).num_parameters(exclude_embeddings=True) for k, c in cfgs.items()}
    assert max(sizes.values()) / min(sizes.values()) < 1.01
    assert cfgs["griffin"].layer_mixers() == ["rglru", "rglru", "local_attention"]
