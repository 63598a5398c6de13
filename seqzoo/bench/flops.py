"""Model FLOPs per token of a training step, computed from a ``ModelConfig``, and the GEMM rate they are compared to.

Convention (as in PaLM's model FLOPs utilisation, arXiv:2204.02311 App. B): 2 FLOPs per multiply-add and only
**matrix products** count: linear layers, the LM head, depthwise convolutions, attention scores and values, and
the matmuls inside the recurrences' chunkwise / step forms. Elementwise work (norms, activations, gates, the
RG-LRU and GateLoop scans, the softmax) is left out: it is what a matmul bound cannot see. A training step is the
forward ×3 (the backward of every product computes the gradients of both operands: 2× its forward).

Per token, with D = d_model, vocabulary V, T the context length (``layer_flops`` below):

* LM head: ``2 D V`` (tied or not; the embedding lookup is free).
* MLP of hidden width h: ``2 D h · 2`` (GELU: up, down) or ``2 D h · 3`` (gated: up, gate, down).
* Attention, H query heads, G key/value heads of dim e (arXiv:1706.03762; MQA G = 1):
  projections ``2 D e (2 H + 2 G)``; scores q·kᵀ and values p·v ``4 H e n̄`` with n̄ the mean number of keys a
  query sees: ``(T + 1)/2`` for causal attention, ``mean_t (min(t, W) + 1)`` for a sliding window W
  (arXiv:2402.19427 §2.3). ``causal=False`` counts ``n̄ = T`` instead: what a kernel computing the full T×T
  product executes (and what ``torch.utils.flop_counter`` reports for it).
* GateLoop (arXiv:2311.01927), H heads of K = d_qk/H, V = d_v/H: projections q, k, γ, θ and v
  ``2 D (4 d_qk + d_v)`` (the real transition drops θ, fixed transitions drop γ and θ) and the out-projection
  ``2 d_v D`` when there is one. With max heads (K = V = 1, the paper's setting and the benchmark's) the
  recurrence (the scan of S and the readout Re(qᵀ S)) is elementwise: no matmuls. The chunkwise form of wider
  heads is not modelled here (``InputError``).
* mLSTM (arXiv:2405.04517 §2.4, NeurIPS layer), inner width E, H heads of K = V = E/H, qkv block size b,
  conv width k: up-projection ``2 D 2E``, headwise q, k, v ``3 · 2 E b``, gates from [q; k; v] ``2 · 2 (3E) H``,
  down-projection ``2 E D``, conv ``2 k E``; the chunkwise cell (arXiv:2503.14376) per head
  ``4 K V + 4 K + 2 ℓ̄ (K + V)``: chunk summaries Σ w k vᵀ and Σ w k, the inter-chunk readouts q C and q·n, and
  the intra-chunk q kᵀ and S v with ℓ̄ = (ℓ + 1)/2 keys per query in a chunk of ℓ (ℓ under ``causal=False``).
  The 7B layer: q, k, v, o-gate ``2 D (2 d_qk + 2 d_v)``, gates ``2 · 2 D H``, out ``2 d_v D`` and the same cell.
* sLSTM (arXiv:2405.04517 §2.2), H heads of d = D/H, conv width k: input weights W (4 gates, block-diagonal)
  ``8 D d``, the recurrent R·h_{t-1} of every step ``8 D d``, conv ``2 k D``.
* RG-LRU block (arXiv:2402.19427 §2.4), recurrence width R, nb gate blocks, conv width k: the two input
  branches and the output ``3 · 2 D R``, the block-diagonal input and a gates ``2 · 2 R R/nb``, conv ``2 k R``;
  the scan itself is elementwise.

``gemm_gflops`` measures the machine's own matmul rate at the model's width (the number the model's FLOP/s is
divided by in ``bench/models.py``: ``matmul_fraction``). tests/test_bench_flops.py compares ``model_flops`` with
``torch.utils.flop_counter.FlopCounterMode`` on a tiny model of every family.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import InputError


def mean_visible_keys(T: int, window: int | None = None, causal: bool = True) -> float:
    """Mean over the T queries of the keys each sees: query t (0-based) sees ``min(t, window) + 1`` keys."""
    if not causal:
        return float(T)
    if window is None or T <= window + 1:
        return (T + 1) / 2
    W = window
    return ((W + 1) * (W + 2) / 2 + (T - W - 1) * (W + 1)) / T


def _chunk_mean(T: int, chunk: int, causal: bool) -> float:
    """Mean keys a query sees inside its chunk: whole chunks of ℓ = min(chunk, T), then one shorter tail chunk."""
    L = min(chunk, T)
    main, tail = (T // L) * L, T % L

    def per(n):
        return (n + 1) / 2 if causal else float(n)

    return (main * per(L) + tail * per(tail)) / T


def _mlp(mlp) -> dict[str, float]:
    if mlp is None:
        return {}
    d, h = mlp.up.in_features, mlp.up.out_features
    return {"mlp": 2.0 * d * h * (3 if mlp.gate is not None else 2)}


def layer_flops(mixer, T: int, causal: bool = True) -> dict[str, float]:
    """Forward matmul FLOPs per token of one mixer at context length T, by part (formulas: module docstring)."""
    from ..mixers.attention import Attention
    from ..mixers.gateloop import GateLoop
    from ..mixers.mlstm import MLSTM
    from ..mixers.rglru import RGLRUBlock
    from ..mixers.slstm import SLSTM

    D = mixer.d_model
    if isinstance(mixer, Attention):
        H, G, e = mixer.n_heads, mixer.n_kv_heads, mixer.head_dim
        n = mean_visible_keys(T, mixer.window, causal)
        return {"projections": 2.0 * D * e * (2 * H + 2 * G), "attention": 4.0 * H * e * n}
    if isinstance(mixer, GateLoop):
        H, K, V = mixer.n_heads, mixer.head_k, mixer.head_v
        if K != 1 or V != 1:
            raise InputError(
                f"model_flops: GateLoop with heads of K={K}, V={V} runs the chunkwise form, which is not modelled; "
                "only max heads (K = V = 1, n_heads=None) is"
            )
        n_in = {"data": 4, "real": 3}.get(mixer.transition, 2) * mixer.d_qk + mixer.d_v
        out = {"projections": 2.0 * D * n_in}  # the scan and the readout Re(q S) are elementwise for K = V = 1
        if mixer.out_proj is not None:
            out["projections"] += 2.0 * mixer.d_v * D
        return out
    if isinstance(mixer, MLSTM):
        H, K, V = mixer.n_heads, mixer.qk_dim, mixer.v_dim
        ell = _chunk_mean(T, mixer.chunk_size, causal)
        cell = H * (4.0 * K * V + 4.0 * K + 2.0 * ell * (K + V))
        if mixer.variant == "neurips":
            E, b = mixer.inner, mixer.q_proj.shape[-1]
            proj = 2.0 * D * 2 * E + 3 * 2.0 * E * b + 2 * 2.0 * 3 * E * H + 2.0 * E * D
            return {"projections": proj, "conv": 2.0 * mixer.conv_weight.shape[-1] * E, "recurrence": cell}
        dqk, dv = H * K, H * V
        proj = 2.0 * D * (2 * dqk + 2 * dv) + 2 * 2.0 * D * H + 2.0 * dv * D
        return {"projections": proj, "recurrence": cell}
    if isinstance(mixer, SLSTM):
        d = mixer.head_dim
        return {"projections": 8.0 * D * d, "recurrence": 8.0 * D * d, "conv": 2.0 * mixer.conv_weight.shape[-1] * D}
    if isinstance(mixer, RGLRUBlock):
        R, nb = mixer.d_rnn, mixer.n_blocks
        return {
            "projections": 3 * 2.0 * D * R + 2 * 2.0 * R * (R // nb),
            "conv": 2.0 * mixer.conv.weight.shape[0] * R,  # weight (k, R)
        }
    raise InputError(
        f"model_flops: no FLOP formula for mixer {type(mixer).__name__}; modelled: attention, local_attention, "
        "gateloop (max heads), mlstm, slstm, rglru"
    )


def model_flops(config, T: int, causal: bool = True) -> dict[str, Any]:
    """Matmul FLOPs per token of ``LanguageModel(config)`` at context length ``T``.

    Returns ``forward_per_token``, ``train_per_token`` (= 3 × forward: the model FLOPs of a training step per
    token) and ``by_part`` (forward per token, summed over layers: lm_head, mlp, projections, attention,
    recurrence, conv). The model is built on the meta device (no memory) to read every layer's dimensions.
    """
    import torch

    from ..models.lm import LanguageModel

    if not isinstance(T, int) or isinstance(T, bool) or T <= 0:
        raise InputError(f"model_flops: T must be a positive int, got {T!r}")
    with torch.device("meta"):
        model = LanguageModel(config)
    parts: dict[str, float] = {"lm_head": 2.0 * config.d_model * config.vocab_size}
    for block in model.blocks:
        for part, f in {**layer_flops(block.mixer, T, causal), **_mlp(getattr(block, "mlp", None))}.items():
            parts[part] = parts.get(part, 0.0) + f
    fwd = sum(parts.values())
    return {"forward_per_token": fwd, "train_per_token": 3.0 * fwd, "by_part": parts}


def gemm_gflops(d: int, device: str = "cpu", rows: int = 4096, repeats: int = 5) -> float:
    """Best-of-``repeats`` GFLOP/s of ``(rows × d) · (d × 4d)`` matmuls in this process, at the torch threads set.

    The shape of a transformer's MLP up-projection at width d over ``rows`` tokens: fp32 on CPU, bf16 on CUDA
    (the dtypes the model benchmark trains in). One untimed call first (allocation, lazy init).
    """
    import torch

    if not isinstance(d, int) or d <= 0 or not isinstance(rows, int) or rows <= 0 or repeats < 1:
        raise InputError(f"gemm_gflops: need positive ints d, rows and repeats >= 1, got {d!r}, {rows!r}, {repeats!r}")
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    g = torch.Generator().manual_seed(0)
    a = torch.randn(rows, d, generator=g).to(dev, dtype)
    b = torch.randn(d, 4 * d, generator=g).to(dev, dtype)
    sync = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        torch.matmul(a, b)
        sync()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * rows * d * 4 * d / max(best, 1e-9) / 1e9
