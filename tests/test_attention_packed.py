"""Causal attention over packed documents in query blocks (``mixers/attention.py: Attention._by_documents``): equal
to the masked reference over all keys in float64 (outputs, carried cache, every gradient) across several blocks,
with documents crossing block edges, different starts per row, grouped heads and a carried cache; and each block
reads only the keys from its earliest document start on."""

import torch
import torch.nn.functional as F
from helpers import spy
from packed_helpers import segment_pos_from_starts

import seqzoo.mixers.attention as attention_mod
from seqzoo.mixers import build_mixer
from seqzoo.mixers.attention import DOCUMENT_BLOCK

T = 2 * DOCUMENT_BLOCK + 44  # three query blocks, the last one short


def _run(m, x, sp, mode, state=None):
    leaf = x.detach().clone().requires_grad_(True)
    y, st = m(leaf, state=state, mode=mode, segment_pos=sp)
    w = torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)
    (y * w).sum().backward()
    grads = [leaf.grad] + [p.grad.clone() for p in m.parameters()]
    m.zero_grad(set_to_none=True)
    return y.detach(), st, grads


def test_blocks_equal_the_masked_reference_over_all_keys():
    torch.manual_seed(0)
    m = build_mixer("attention", d_model=32, n_heads=4, n_kv_heads=2).double()
    x = torch.randn(2, T, 32, dtype=torch.float64)
    # row 0: documents crossing both block edges; row 1: a start at a block edge, a one-token document, a long tail
    sp = segment_pos_from_starts([{0, 100, 200, 201}, {0, DOCUMENT_BLOCK, 130, 131}], T)
    ref = _run(m, x, sp, "naive")
    got = _run(m, x, sp, "sdpa")
    torch.testing.assert_close(got[0], ref[0], rtol=1e-12, atol=1e-12)
    for a, b in zip(got[2], ref[2]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    # a carried cache (S > 0), the new call continuing row 0's last document and starting one in row 1
    prefix = torch.randn(2, 20, 32, dtype=torch.float64)
    with torch.no_grad():
        _, cache = m(prefix, mode="naive")
    sp2 = segment_pos_from_starts([{150}, {5, 140}], T)
    sp2[0, :150] += 20  # the carried document continues: positions go on from the prefix
    ref = _run(m, x, sp2, "naive", cache)
    got = _run(m, x, sp2, "sdpa", cache)
    torch.testing.assert_close(got[0], ref[0], rtol=1e-12, atol=1e-12)
    for a, b in zip(got[2], ref[2]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_each_block_reads_keys_from_its_earliest_document_start(monkeypatch):
    m = build_mixer("attention", d_model=16, n_heads=2)
    x = torch.randn(2, T, 16)
    sp = segment_pos_from_starts([{0, 100, 200}, {0, 110, 210}], T)
    calls = spy(monkeypatch, F, "scaled_dot_product_attention")
    m(x, segment_pos=sp)
    key_ranges = [call[0][1].shape[2] for call in calls]
    # block 0 (queries 0-127): keys 0..127; block 1 (128-255): from 100 (row 0's document) to 255; block 2: from 200
    assert key_ranges == [DOCUMENT_BLOCK, 2 * DOCUMENT_BLOCK - 100, T - 200]
    assert attention_mod.DOCUMENT_BLOCK == DOCUMENT_BLOCK
