"""Where a ``gateloop_softmax`` training step goes against the attention layer of its size (CPU; docs/gateloop.md).

    python tools/gateloop_softmax_parts.py [--T 1024] [--batch 8] [--d-model 64] [--n-heads 4] [--threads 1]
        [--repeats 5]

Prints the minimum over ``--repeats`` of forward + backward (freed memory kept in the process, as the ``seqzoo``
command line keeps it; ``SEQZOO_MALLOC=system`` leaves malloc alone) of:

* the two whole mixers (``attention``, ``gateloop_softmax``; loss = mean of the squared output);
* the attention layer's own fused kernel call (causal SDPA over (B·H, T, d_head)), forward and backward;
* the parts of the softmax step, each forward + backward on the mixer's own inputs: the projections and gates
  (``head_inputs``), the float64 cumulative sums kept for the cache (forward only), the rotation
  (``rotating_frame``), the diagonal blocks (``decayed_scores``, the C loop on CPU) and the levels with their
  merges (``_SoftmaxParts``, which holds the level kernels below);
* the fused kernel calls of ``gateloop_softmax``'s levels (``ops/gateloop/softmax.py``), captured from one real
  forward pass of the mixer and replayed: as run (rotated q̂, k̂ of width 2K, values zero-padded to 2K), and the same
  calls cut to width K (the first K columns of q̂, k̂ and v): the cost of these levels if the scores were K wide
  and the values were not padded, a bound no rearrangement of the same kernel goes below.

Score pairs are equal in both layers (T²/2 per head); the rest of the softmax step is its diagonal blocks
(``decayed_scores``), the rotation, the decays and the merges.
"""

from __future__ import annotations

import argparse
import time

import torch

import seqzoo.ops.gateloop.softmax as gsm
from seqzoo.host_memory import apply_malloc_setting
from seqzoo.mixers import build_mixer
from seqzoo.ops.gateloop.common import rotating_frame
from seqzoo.ops.gateloop.scores import decayed_scores


def interleaved_ms(pieces: dict, repeats: int) -> dict:
    """Minimum ms of each callable over ``repeats`` rounds; every round runs every piece once, in turn (the machine's
    drift falls on all pieces alike)."""
    for fn in pieces.values():
        fn()
    best = {name: float("inf") for name in pieces}
    for _ in range(repeats):
        for name, fn in pieces.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], (time.perf_counter() - t0) * 1e3)
    return best


def mixer_step(mixer, x):
    def run():
        y = mixer(x)[0]
        y.square().mean().backward()

    return run


def kernel_calls(calls, width: int | None = None):
    """Forward and backward callables over the captured fused-kernel calls (all levels), optionally cut to
    ``width`` columns."""
    cut = [tuple(t[..., :width].contiguous() if width else t for t in qkv) for qkv in calls]
    outs = [gsm._flash(q, k, v, scale=1.0) for q, k, v in cut]

    def forward():
        for q, k, v in cut:
            gsm._flash(q, k, v, scale=1.0)

    def backward():
        for (q, k, v), (o, lse) in zip(cut, outs):
            gsm._flash_backward(o, q, k, v, o, lse, 0.0, False, scale=1.0)

    return forward, backward


def captured_level_calls(x, d_model: int, n_heads: int):
    """The (q, k, v) of every fused-kernel call of one ``gateloop_softmax`` forward pass over ``x``."""
    calls = []
    real = gsm._flash

    def capture(q, k, v, **kw):
        calls.append((q, k, v))
        return real(q, k, v, **kw)

    mixer = build_mixer("gateloop_softmax", d_model=d_model, n_heads=n_heads)
    gsm._flash = capture
    try:
        with torch.no_grad():
            mixer(x)
    finally:
        gsm._flash = real
    return calls


def softmax_parts(mixer, x) -> dict:
    """Forward + backward callables of the parts of ``softmax_relative_attention`` (ops/gateloop/softmax.py) on the
    mixer's inputs for ``x``; upstream gradients are fixed random tensors."""
    q, k, v, log_mag, phase = (t.detach() for t in mixer.head_inputs(x))
    B, T, H, K = q.shape
    P, b = T, min(gsm.BASE, T)  # T a power of two here
    heads = [t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v, log_mag, phase)]
    qq, kk, vv, lam, ph = heads
    qh, kh, _ = rotating_frame(qq, kk, ph)
    qh, kh = qh.detach().contiguous().requires_grad_(), kh.detach().contiguous().requires_grad_()
    R = qh.shape[-2]
    blocks = (B, H, P // b, b)

    def diagonal():
        return decayed_scores(qh.view(*blocks, R, K), kh.view(*blocks, R, K), lam.view(*blocks, K), upper=float("-inf"))

    A0 = diagonal().detach().requires_grad_()
    g_rot, g_A0, g_y = torch.randn_like(qh), torch.randn_like(A0), torch.randn_like(vv)

    def projections():
        outs = [t for t in mixer.head_inputs(x) if t is not None]
        torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])

    def rotation():
        qh_, kh_, _ = rotating_frame(qq, kk, ph)
        torch.autograd.backward([qh_, kh_], [g_rot, g_rot])

    return {
        "gateloop_softmax part: projections and gates, fwd+bwd": projections,
        "gateloop_softmax part: float64 cumulative sums for the cache, fwd": lambda: (
            log_mag.double().cumsum(1),
            phase.double().cumsum(1),
        ),
        "gateloop_softmax part: rotation, fwd+bwd": rotation,
        f"gateloop_softmax part: diagonal blocks of {b} (C loop), fwd+bwd": lambda: diagonal().backward(g_A0),
        "gateloop_softmax part: levels and merges (level kernels included), fwd+bwd": lambda: gsm._SoftmaxParts.apply(
            vv, A0, qh, kh, lam, None
        ).backward(g_y),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    apply_malloc_setting()  # freed memory kept for the next step, as the seqzoo command line does (SEQZOO_MALLOC)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x = torch.randn(a.batch, a.T, a.d_model, requires_grad=True)
    d_head = a.d_model // a.n_heads
    calls = captured_level_calls(x, a.d_model, a.n_heads)
    if not calls:
        raise SystemExit(f"T = {a.T} does not take the blocked form (it starts above 128 tokens without a cache)")
    W = calls[0][0].shape[-1]

    q = torch.randn(a.batch * a.n_heads, 1, a.T, d_head) / d_head**0.25
    k, v = torch.randn_like(q) / d_head**0.25, torch.randn_like(q)
    o, lse = gsm._flash(q, k, v, is_causal=True)
    pieces = {
        "attention: whole mixer, fwd+bwd": mixer_step(
            build_mixer("attention", d_model=a.d_model, n_heads=a.n_heads), x
        ),
        "gateloop_softmax: whole mixer, fwd+bwd": mixer_step(
            build_mixer("gateloop_softmax", d_model=a.d_model, n_heads=a.n_heads), x
        ),
        f"attention: causal fused kernel (head {d_head}), fwd": lambda: gsm._flash(q, k, v, is_causal=True),
        f"attention: causal fused kernel (head {d_head}), bwd": lambda: gsm._flash_backward(
            o, q, k, v, o, lse, 0.0, True
        ),
    }
    pieces.update(softmax_parts(build_mixer("gateloop_softmax", d_model=a.d_model, n_heads=a.n_heads), x))
    levels = ", ".join(str(c[0].shape[-2]) for c in calls)
    for label, width in ((f"as run (width {W})", None), (f"cut to width {d_head}", d_head)):
        fwd, bwd = kernel_calls(calls, width)
        pieces[f"gateloop_softmax: level kernels {label}, fwd"] = fwd
        pieces[f"gateloop_softmax: level kernels {label}, bwd"] = bwd
    ms = interleaved_ms(pieces, a.repeats)
    print(
        f"T {a.T}, batch {a.batch}, d_model {a.d_model}, {a.n_heads} heads, {a.threads} thread(s); level half-blocks "
        f"{levels}; ms, min of {a.repeats} interleaved rounds"
    )
    for label, value in ms.items():
        print(f"  {label}: {value:.1f}")
    names = list(ms)
    print(f"  gateloop_softmax / attention (whole mixers): {ms[names[1]] / ms[names[0]]:.2f}")


if __name__ == "__main__":
    main()
