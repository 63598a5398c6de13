"""RMT wrapper: exact BPTT against a hand-written unroll, truncation, checkpoint modes (docs/rmt.md "Tests").

Tiny float64 backbones: d 32, 2 layers, m 3, L 5; T in {1, 17, 20} (17 ends in a short segment)."""

import pytest
import torch
from rmt_helpers import D, L, data, make

from seqzoo.models.rmt import RMT, segment_bounds


def unroll(r: RMT, ids, labels, k=-1):
    """The recurrence written by hand (arXiv:2207.06881 §3) on the raw seqzoo model, with truncation at hand-overs tau < N - k."""
    c, bb = r.config, r.backbone.model
    m = c.num_mem_tokens
    bounds = segment_bounds(ids.shape[1], c.segment_size, c.segment_alignment)
    N = len(bounds)
    mem = r.memory.expand(ids.shape[0], m, D)
    total, count = 0.0, (labels != -100).sum() if c.task == "lm" else None
    for tau, (a, b) in enumerate(bounds):
        if tau >= 1 and k >= 0 and tau < N - k:
            mem = mem.detach()
        x = bb.embed_tokens(ids[:, a:b])
        n = b - a
        if c.placement == "read_write":
            h, _ = bb.trunk(inputs_embeds=torch.cat([mem, x, mem], 1))
            tok, new_mem = h[:, m : m + n], h[:, m + n :]
        else:
            p = 0 if r.cls_token is None else 1  # learned [CLS] row in front with pool="cls"
            prefix = [] if p == 0 else [r.cls_token.expand(ids.shape[0], 1, D)]
            h, _ = bb.trunk(inputs_embeds=torch.cat(prefix + [mem, x], 1))
            tok, new_mem = h[:, p + m :], h[:, p : p + m]
        if c.task == "lm":
            logits = bb.lm_head(tok)
            total = (
                total
                + torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1), labels[:, a:b].flatten(), ignore_index=-100, reduction="sum"
                )
                / count
            )
        else:
            if c.pool == "cls":
                pooled = h[:, 0]
            else:
                pooled = new_mem.mean(1) if c.pool == "mean_mem" else tok.mean(1)
            ce = torch.nn.functional.cross_entropy(r.head(pooled), labels)
            if c.loss_segments == "all":
                total = total + ce / N
            elif tau == N - 1:
                total = total + ce
        mem = new_mem
    return total


def grads(r: RMT):
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in r.named_parameters()}


def run_wrapper(r, ids, labels):
    r.zero_grad()
    if r.config.checkpoint == "memory_replay":
        loss = r.backward_mrbp(ids, labels)
    else:
        loss = r(ids, labels=labels).loss
        loss.backward()
    return loss.detach(), grads(r)


def run_unroll(r, ids, labels, k=-1):
    r.zero_grad()
    loss = unroll(r, ids, labels, k)
    loss.backward()
    return loss.detach(), grads(r)


def assert_grads_close(g1, g2, tol=1e-10):
    assert g1.keys() == g2.keys()
    for n in g1:
        scale = max(float(g2[n].abs().max()), 1e-30)
        assert float((g1[n] - g2[n]).abs().max()) <= tol * scale, n


CASES = [
    ("lm", {}),
    ("lm", {"segment_alignment": "right"}),
    ("lm", {"segment_alignment": "center"}),
    ("enc", {}),
    ("enc", {"loss_segments": "all", "segment_alignment": "left"}),
    ("enc", {"pool": "mean_mem", "segment_alignment": "center"}),
    ("lm", {"task": "classification", "num_labels": 6, "pool": "mean_mem"}),
    ("lm", {"task": "classification", "num_labels": 6, "pool": "mean_tokens", "loss_segments": "all"}),
]


GRAD_RUNS = (
    [(k, o, "none", 17) for k, o in CASES]
    + [(*CASES[i], "memory_replay", 17) for i in (0, 2, 4, 7)]
    + [(*CASES[i], "segment", 20) for i in (1, 3)]
    + [(*CASES[i], "memory_replay", 1) for i in (0, 4)]
)


@pytest.mark.parametrize("kind,opts,ckpt,T", GRAD_RUNS)
def test_gradient_equals_explicit_unroll(kind, opts, ckpt, T):
    r = make(kind, checkpoint=ckpt, **opts)
    ids, lm_labels, cls_labels = data(T)
    labels = lm_labels if r.config.task == "lm" else cls_labels
    lw, gw = run_wrapper(r, ids, labels)
    lu, gu = run_unroll(r, ids, labels)
    assert abs(float(lw) - float(lu)) <= 1e-12
    assert_grads_close(gw, gu)
    assert float(gw["memory"].abs().sum()) > 0


@pytest.mark.parametrize("kind,ckpt", [("lm", "none"), ("enc", "none"), ("enc", "memory_replay")])
def test_truncation_matches_detached_unroll(kind, ckpt):
    ids, lm_labels, cls_labels = data(20)  # N = 4
    N = 4
    for k in (-1, 0, 1, 2, N - 1):
        r = make(kind, bptt_depth=k, checkpoint=ckpt)
        labels = lm_labels if kind == "lm" else cls_labels
        lw, gw = run_wrapper(r, ids, labels)
        lu, gu = run_unroll(r, ids, labels, k)
        assert abs(float(lw) - float(lu)) <= 1e-12
        assert_grads_close(gw, gu)


@pytest.mark.parametrize("shortcut", [True, False])
def test_truncation_cuts_gradient_exactly(shortcut):
    """Last-segment loss: dloss/dE(x_j) is exactly zero iff j < N-1-k; dloss/dP != 0 iff k >= N-1."""
    ids, _, cls_labels = data(20)
    N = 4
    for k in (-1, 0, 1, 2, N - 1):
        r = make("enc", bptt_depth=k)
        r.no_grad_shortcut = shortcut
        emb = r.backbone.model.embed
        captured = []

        def keep(mod, inp, out, captured=captured):
            if out.requires_grad:  # segments run under no_grad by the shortcut produce no graph
                out.retain_grad()
            captured.append(out)

        hook = emb.register_forward_hook(keep)
        r(ids, labels=cls_labels).loss.backward()
        hook.remove()
        seg_embeds = [e for e in captured if e.shape[1] == L]  # the first call probes the dtype on one token
        assert len(seg_embeds) == N
        for j, e in enumerate(seg_embeds):
            reaches = k < 0 or j >= N - 1 - k
            g = e.grad
            if reaches:
                assert g is not None and float(g.abs().sum()) > 0, (k, j)
            else:
                assert g is None or float(g.abs().sum()) == 0.0, (k, j)
        p_reached = k < 0 or k >= N - 1
        assert (r.memory.grad is not None and float(r.memory.grad.abs().sum()) > 0) == p_reached, k


def test_no_grad_shortcut_keeps_gradients():
    ids, _, cls_labels = data(20)
    out = []
    for shortcut in (True, False):
        r = make("enc", bptt_depth=1)
        r.no_grad_shortcut = shortcut
        r.zero_grad()
        r(ids, labels=cls_labels).loss.backward()
        out.append(grads(r))
    assert_grads_close(out[0], out[1], tol=0.0)


def test_checkpoint_modes_agree():
    ids, lm_labels, _ = data(17)
    res = []
    for ckpt in ("none", "segment", "memory_replay"):
        r = make("lm", checkpoint=ckpt)
        res.append(run_wrapper(r, ids, lm_labels))
    for loss, g in res[1:]:
        assert abs(float(loss) - float(res[0][0])) <= 1e-12
        assert_grads_close(g, res[0][1], tol=1e-12)
