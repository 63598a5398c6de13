"""Griffin's local MQA (and global MQA): exact key set, document resets, RoPE on half the dims, bounded cache
(Griffin, arXiv:2402.19427, §2.3). Every mode is compared with a brute-force loop over the key rule."""

import math

import pytest
import torch

from seqzoo.mixers import build_mixer
from seqzoo.mixers.attention import KVCache, visible_mask
from seqzoo.ops.rope import apply_rope

f64 = torch.float64


def make(window=5, seed=0, name="local_attention", **kw):
    torch.manual_seed(seed)
    kw = {"n_heads": 4, "n_kv_heads": 1, "rope_fraction": 0.5, "out_bias": True, **kw}
    if name == "local_attention":
        kw["window"] = window
    return build_mixer(name, d_model=32, **kw).double().eval()


def packed_segment_pos(B, T, starts):
    sp = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        last = 0
        for t in range(T):
            if t in starts[b]:
                last = t
            sp[b, t] = t - last
    return sp


def brute_force(m, x, segment_pos, window):
    """Loop over (batch, query): softmax over the visible keys (causal, window, same document)."""
    B, T, _ = x.shape
    H, hd = m.n_heads, m.head_dim
    q = m.q_proj(x).view(B, T, H, hd)
    k = m.k_proj(x).view(B, T, 1, hd)
    v = m.v_proj(x).view(B, T, 1, hd)
    q = apply_rope(q, segment_pos, 0.5)
    k = apply_rope(k, segment_pos, 0.5)
    out = torch.zeros(B, T, H, hd, dtype=x.dtype)
    for b in range(B):
        for p in range(T):
            keys = []
            for pk in range(p + 1):
                if window is not None and p - pk > window:
                    continue
                if any(segment_pos[b, j] == 0 for j in range(pk + 1, p + 1)):
                    continue
                keys.append(pk)
            logits = torch.einsum("hd,kd->hk", q[b, p], k[b, keys, 0]) / math.sqrt(hd)
            out[b, p] = logits.softmax(-1) @ v[b, keys, 0]
    return m.o_proj(out.reshape(B, T, H * hd)), len(keys)


def maxerr(a, b):
    return float((a.detach() - b.detach()).abs().max())


def test_visible_key_count_w3():
    pos = torch.arange(10)
    counts = visible_mask(pos, pos, 3).sum(-1).tolist()
    assert counts == [1, 2, 3, 4, 4, 4, 4, 4, 4, 4]


@pytest.mark.parametrize("window", [1, 3, 8])
def test_all_modes_equal_brute_force_with_documents(window):
    m = make(window)
    T = 23
    x = torch.randn(2, T, 32, dtype=f64)
    sp = packed_segment_pos(2, T, [{0, 4, 5, 14}, {0, 20}])
    ref, _ = brute_force(m, x, sp, window)
    for mode in m.modes:
        y, _ = m(x, segment_pos=sp, mode=mode)
        assert maxerr(y, ref) <= 1e-12, mode


def test_global_mqa_equals_brute_force_and_wide_window():
    g = make(name="attention")
    x = torch.randn(2, 17, 32, dtype=f64)
    sp = packed_segment_pos(2, 17, [{0, 9}, {0}])
    ref, _ = brute_force(g, x, sp, None)
    for mode in g.modes:
        y, _ = g(x, segment_pos=sp, mode=mode)
        assert maxerr(y, ref) <= 1e-12
    loc = make(window=17)
    loc.load_state_dict(g.state_dict())
    for mode in loc.modes:  # W >= T: local equals global
        y, _ = loc(x, segment_pos=sp, mode=mode)
        assert maxerr(y, ref) <= 1e-12


@pytest.mark.parametrize("chunk", [1, 4, 5, 6, 11])  # 1, W-1, W, W+1, > 2W for W = 5
def test_chunked_stream_with_segment_pos_equals_whole(chunk):
    m = make(5)
    T = 29
    x = torch.randn(2, T, 32, dtype=f64)
    sp = packed_segment_pos(2, T, [{0, 3, 4, 17, 18, 19}, {0, 12, 25}])
    for mode in m.modes:
        whole, _ = m(x, segment_pos=sp, mode=mode)
        outs, s = [], None
        for a in range(0, T, chunk):
            y, s = m(x[:, a : a + chunk], state=s, segment_pos=sp[:, a : a + chunk], mode=mode)
            outs.append(y)
            assert s.k.shape[1] <= 5  # bounded window cache
        assert maxerr(torch.cat(outs, 1), whole) <= 1e-12, (mode, chunk)


def test_split_at_every_t_with_documents():
    m = make(4)
    T = 15
    x = torch.randn(2, T, 32, dtype=f64)
    sp = packed_segment_pos(2, T, [{0, 6}, {0, 1, 9}])
    whole, _ = m(x, segment_pos=sp)
    for t in range(1, T):
        y1, s = m(x[:, :t], segment_pos=sp[:, :t])
        y2, _ = m(x[:, t:], state=s, segment_pos=sp[:, t:])
        assert maxerr(torch.cat([y1, y2], 1), whole) <= 1e-12, t


def test_continuation_without_segment_pos_continues_documents():
    m = make(6)
    x = torch.randn(2, 20, 32, dtype=f64)
    sp = packed_segment_pos(2, 20, [{0, 5}, {0, 9}])
    whole, _ = m(x, segment_pos=sp)
    y1, s = m(x[:, :12], segment_pos=sp[:, :12])
    outs = [y1]
    for t in range(12, 20):  # generation: no segment_pos, the cache continues the documents
        y, s = m(x[:, t : t + 1], state=s)
        outs.append(y)
    assert maxerr(torch.cat(outs, 1), whole) <= 1e-12


def test_no_segment_pos_keeps_stream_behaviour():
    m = make(5)
    x = torch.randn(2, 13, 32, dtype=f64)
    y0, s0 = m(x)
    y1, s1 = m(x, segment_pos=torch.arange(13).expand(2, 13))
    assert maxerr(y0, y1) <= 1e-12 and maxerr(s0.k, s1.k) <= 1e-12
    assert s0.seg is None and isinstance(s0, KVCache)


def test_rope_on_first_half_only():
    m = make(5)
    x = torch.randn(1, 6, 32, dtype=f64)
    hd = m.head_dim
    k = m.k_proj(x).view(1, 6, 1, hd)
    kr = apply_rope(k, torch.arange(6), m.rope_fraction)
    assert torch.equal(kr[..., hd // 2 :], k[..., hd // 2 :])
    assert maxerr(kr[..., : hd // 2], k[..., : hd // 2]) > 1e-3
    _, s = m(x)
    assert maxerr(s.k[:, :, 0], kr[0, -5:, 0][None]) <= 1e-12  # cached keys are rotated, last W kept


def test_bad_configurations_raise():
    with pytest.raises(ValueError, match="window"):
        build_mixer("local_attention", d_model=32, n_heads=4, window=0)
    with pytest.raises(ValueError, match="window"):
        build_mixer("local_attention", d_model=32, n_heads=4, window=-3)
    with pytest.raises(ValueError, match="divisible"):
        build_mixer("local_attention", d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="n_kv_heads"):
        build_mixer("local_attention", d_model=32, n_heads=4, n_kv_heads=3)
    m = make(5)
    with pytest.raises(ValueError, match="mode"):
        m(torch.randn(1, 3, 32, dtype=f64), mode="flash")
    with pytest.raises(TypeError, match="segment_pos"):
        m(torch.randn(1, 3, 32, dtype=f64), segment_pos=torch.zeros(1, 3))
