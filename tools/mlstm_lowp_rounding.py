"""Why the mLSTM Triton forward missed its bf16 / fp16 tolerance on an H200, reproduced on a CPU.

The Triton interpreter multiplies in float32 (``kernels._common.dot_dtype``), so it cannot show what 16-bit
``tl.dot`` operands do. This script models them in float64 instead: on the inputs of
``tests/ops/test_mlstm.py::test_mlstm_forward_matches_naive[...-real]`` (B = 4, T = 2048, H = 16, K = 128,
V = 256, no initial state) it evaluates the parallel form of the stabilised mLSTM,

    S = (q̃ kᵀ) ⊙ exp(D − m),   h = round16(S) v / max(|Σ_σ S|, e^{−m}),

with q̃ = q / √K either rounded to the input's 16-bit type before the dot (the kernel until this change) or
exact, the scale applied to the dot's float32 result (the kernel now); ``round16(S)`` is the kernel's 16-bit
operand of the second dot. It prints the largest |h − h_exact| over all heads, next to what the H200 measured
(docs/benchmarks.md, "What has run on a GPU") and the test's bound. It does not run the kernel: the GPU test does.

    python tools/mlstm_lowp_rounding.py            # about a minute on one core
"""

from __future__ import annotations

import torch


def inputs(dtype: torch.dtype):
    """The GPU test's inputs (``triton_inputs`` of tests/ops/test_mlstm.py, seed 0, no state), rounded to dtype."""
    B, T, H, K, V = 4, 2048, 16, 128, 256
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(B, T, H, K, generator=g).to(dtype) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=g).to(dtype)
    i = (torch.randn(B, T, H, generator=g) * 2).to(dtype)
    f = (torch.randn(B, T, H, generator=g) + 2).to(dtype)
    return q, k, v, i, f


def _h(S, S_num, v, m):
    """h from the den's scores S and the second dot's operand S_num."""
    return (S_num @ v) / torch.maximum(S.sum(1).abs(), (-m).exp())[:, None]


def worst_errors(dtype: torch.dtype) -> tuple[float, float, float]:
    """(largest |h − h_exact| with q̃ rounded, the same with the scale after the dot, largest |h_exact|)."""
    q, k, v, i, f = (t.double() for t in inputs(dtype))
    T, K = q.shape[1], q.shape[3]
    tri = torch.ones(T, T, dtype=torch.bool).tril()
    old = new = h_max = 0.0

    def r16(t):
        return t.to(dtype).double()

    for b in range(q.shape[0]):
        for hh in range(q.shape[2]):
            qh, kh, vh = q[b, :, hh], k[b, :, hh], v[b, :, hh]
            cs = torch.nn.functional.logsigmoid(f[b, :, hh]).cumsum(0)
            D = (cs[:, None] - cs[None, :] + i[b, :, hh][None, :]).masked_fill(~tri, float("-inf"))
            m = D.max(1).values
            P = (D - m[:, None]).exp()

            S = (qh @ kh.T) * K**-0.5 * P
            exact = _h(S, S, vh, m)
            S_old = (r16((qh.float() * K**-0.5).double()) @ kh.T) * P  # q̃ rounded, as the kernel did
            old = max(old, (_h(S_old, r16(S_old), vh, m) - exact).abs().max().item())
            new = max(new, (_h(S, r16(S), vh, m) - exact).abs().max().item())
            h_max = max(h_max, exact.abs().max().item())
    return old, new, h_max


def main() -> None:
    measured = {torch.bfloat16: 110, torch.float16: 14.4}  # H200, triton 3.6.0, the kernel before the change
    tol = {torch.bfloat16: 3e-2, torch.float16: 1e-2}  # tests/helpers.py: TOL, times max |h|
    for dtype in (torch.bfloat16, torch.float16):
        old, new, h_max = worst_errors(dtype)
        name = str(dtype).removeprefix("torch.")
        print(
            f"{name}: max |h| {h_max:.1f}; model of max |error|: q̃ rounded {old:.3g} (H200 measured "
            f"{measured[dtype]}), scale after the dot {new:.3g}; test bound {tol[dtype] * h_max:.3g}"
        )


if __name__ == "__main__":
    main()
