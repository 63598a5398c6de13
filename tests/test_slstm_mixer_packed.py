"""The sLSTM layer (mixer "slstm") on packed documents, float64: conv + cell restart at every ``segment_pos == 0``.

A row packing documents gives each document the output, the final state (cell and conv buffer) and the parameter
gradients it gets alone as a fresh stream; documents shorter than the conv width (k = 4) and one-token documents
included, batch 2 with different starts per row; prefill then steps across a start; split anywhere = whole.
"""

import pytest
import torch

from seqzoo import build_mixer

D, K = 8, 4
# rows of document lengths (each row sums to T = 12); 1- to 3-token documents are shorter than the conv width
ROWS = [[2, 1, 5, 1, 3], [7, 1, 1, 3]]


def positions(rows):
    return torch.stack([torch.cat([torch.arange(n) for n in row]) for row in rows])


def mixer(cell_mode="auto"):
    torch.manual_seed(0)
    m = build_mixer("slstm", d_model=D, n_heads=2, conv_size=K, cell_mode=cell_mode).double()
    with torch.no_grad():
        m.R.normal_(0, 0.3)  # R = 0 at init would hide a wrong recurrent gradient
        m.bias.normal_(0, 1.0)
    return m


def run_loss(m, x, w, **kw):
    y, s = m(x, **kw)
    return (y * w).sum() + sum(t.square().sum() for t in (s.h, s.c, s.n, s.conv)), y, s


@pytest.mark.parametrize("cell_mode", ["naive", "fused", "native"])
def test_packed_rows_equal_documents_alone(cell_mode):
    m = mixer(cell_mode)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 12, D, generator=g, dtype=torch.float64)
    w = torch.randn(2, 12, D, generator=g, dtype=torch.float64)
    pos = positions(ROWS)
    loss, y, s = run_loss(m, x, w, segment_pos=pos)
    grads = torch.autograd.grad(loss, list(m.parameters()))

    ref_loss, ref_y, ref_final = 0.0, [], []
    for b, row in enumerate(ROWS):
        lo, ys = 0, []
        for n in row:
            yy, ss = m(x[b : b + 1, lo : lo + n])
            ys.append(yy)
            ref_loss = ref_loss + (yy * w[b : b + 1, lo : lo + n]).sum()
            lo += n
        ref_loss = ref_loss + sum(t.square().sum() for t in (ss.h, ss.c, ss.n))
        ref_y.append(torch.cat(ys, 1))
        ref_final.append(ss)
    # the packed conv buffer keeps only the last document's inputs (entries before its start zeroed)
    conv = torch.zeros(2, K - 1, D, dtype=torch.float64)
    for b, row in enumerate(ROWS):
        n = min(row[-1], K - 1)
        conv[b, K - 1 - n :] = x[b, 12 - n :]
    ref_loss = ref_loss + conv.square().sum()
    ref_grads = torch.autograd.grad(ref_loss, list(m.parameters()))

    torch.testing.assert_close(y, torch.cat(ref_y), rtol=0, atol=1e-12)
    for name in "hcnm":
        want = torch.cat([getattr(f, name) for f in ref_final])
        torch.testing.assert_close(getattr(s, name), want, rtol=0, atol=1e-12)
    torch.testing.assert_close(s.conv, conv, rtol=0, atol=0)
    for (name, _), a, b in zip(m.named_parameters(), grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-11, msg=name)


@torch.no_grad()
def test_prefill_then_steps_and_split_across_starts():
    m = mixer()
    x = torch.randn(2, 12, D, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    pos = positions(ROWS)
    full, _ = m(x, segment_pos=pos)
    for cut in (1, 2, 3, 8):
        y1, s = m(x[:, :cut], segment_pos=pos[:, :cut])
        y2, _ = m(x[:, cut:], state=s, segment_pos=pos[:, cut:])
        torch.testing.assert_close(torch.cat([y1, y2], 1), full, rtol=0, atol=1e-12)
    y, s = m(x[:, :4], segment_pos=pos[:, :4])
    ys = [y]
    for t in range(4, 12):
        y, s = m(x[:, t : t + 1], state=s, segment_pos=pos[:, t : t + 1])
        ys.append(y)
    torch.testing.assert_close(torch.cat(ys, 1), full, rtol=0, atol=1e-12)
