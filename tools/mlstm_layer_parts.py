"""Time the parts of one NeurIPS mLSTM layer, forward + backward, on CPU (docs/benchmarks.md, "Where the xLSTM CPU step goes").

    python tools/mlstm_layer_parts.py [--T 1024] [--tokens 8192] [--threads 1] [--repeats 5]

Prints the minimum over ``--repeats`` of: the whole mixer, the cell op (chunkwise), the headwise q, k, v maps with
the gates from them (``qkv_gates``), the up-projection, the causal conv + SiLU, the output path (head norm, skip,
SiLU(z) gate) and the down-projection, at the 10M model's width (d_model 256, 4 heads, E = 512), batch = tokens // T. Set
``SEQZOO_NATIVE=0`` for the PyTorch paths of the conv and the output path, ``SEQZOO_MALLOC=system`` for glibc's
default malloc (this script applies the command line's setting).
"""

from __future__ import annotations

import argparse
import time

import torch

from seqzoo.host_memory import apply_malloc_setting
from seqzoo.mixers.mlstm import MLSTM
from seqzoo.ops.causal_conv import causal_conv1d
from seqzoo.ops.mlstm import mlstm
from seqzoo.ops.mlstm.headwise import qkv_gates
from seqzoo.ops.mlstm.output import mlstm_output


def best_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    apply_malloc_setting()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    B, T, D, H = max(1, a.tokens // a.T), a.T, 256, 4
    mix = MLSTM(D, n_heads=H)
    E, K = mix.inner, mix.qk_dim

    def leaf(*shape):
        return torch.randn(*shape, requires_grad=True)

    x, xe, z, h = leaf(B, T, D), leaf(B, T, E), leaf(B, T, E), leaf(B, H, T, K)
    q, k, v = leaf(B, T, H, K), leaf(B, T, H, K), leaf(B, T, H, K)
    ig, fg = leaf(B, T, H), (torch.randn(B, T, H) + 3).requires_grad_()
    g_x, g_e, g_h = torch.randn(B, T, D), torch.randn(B, T, E), torch.randn(B, T, H, K)
    g_up, g_gg = torch.randn(B, T, 2 * E), torch.randn(B, T, 2 * H)

    parts = {
        "layer": lambda: mix(x)[0].backward(g_x),
        "cell (chunkwise)": lambda: mlstm(q, k, v, ig, fg, mode="chunkwise")[0].backward(g_h),
        "q, k, v and gates": lambda: torch.autograd.backward(
            list(qkv_gates(xe, xe, mix.q_proj, mix.k_proj, mix.v_proj, *mix._gate_weights())), [g_e] * 3 + [g_gg]
        ),
        "up-projection": lambda: mix.proj_up(x).backward(g_up),
        "conv + SiLU": lambda: causal_conv1d(xe, mix.conv_weight, mix.conv_bias, activation="silu")[0].backward(g_e),
        "output path": lambda: mlstm_output(h.transpose(1, 2), xe, z, mix.outnorm_weight, mix.skip, 1e-5).backward(g_e),
        "down-projection": lambda: mix.proj_down(xe).backward(g_x),
    }
    print(
        f"mLSTM layer d_model {D}, E {E}, {H} heads, batch {B}, T {T}, {a.threads} thread(s): fwd+bwd ms (min of {a.repeats})"
    )
    for name, fn in parts.items():
        print(f"  {name:18s} {best_ms(fn, a.repeats):8.1f}")


if __name__ == "__main__":
    main()
