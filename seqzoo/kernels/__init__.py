"""Shared infrastructure of the Triton kernels; the kernels themselves live beside their ops.

Each op folder holds every implementation of one equation, the Triton kernel as ``triton.py`` next to the naive
reference it is tested against:

| kernel | function | reference it is tested against |
|---|---|---|
| real diagonal scan ``h_t = a_t h_{t-1} + b_t`` (fwd + reverse-scan bwd) | ``ops/rglru/triton.py: linear_scan_triton`` | ``ops/rglru/naive.py: linear_scan_naive`` |
| fused RG-LRU (gates + scan in one pass, fwd + bwd) | ``ops/rglru/triton.py: rglru_fused_triton`` | ``ops/rglru/naive.py: rglru_naive`` |
| RG-LRU (gates in torch, scan in Triton) | ``ops/rglru/triton.py: rglru_triton`` | ``ops/rglru/naive.py: rglru_naive`` |
| mLSTM chunkwise, stabilised exp gating (fwd + bwd Triton; ``backward="torch"`` recomputes) | ``ops/mlstm/triton.py: mlstm_triton`` | ``ops/mlstm/naive.py: mlstm_naive_recurrent`` |
| gated linear attention, per-dim real decay (fwd + bwd Triton) | ``ops/gateloop/triton.py: gla_triton`` | ``ops/gateloop/naive.py: gateloop_naive`` |
| GateLoop, real or complex transitions (complex: phase-rotated q, k of width 2K) | ``ops/gateloop/triton.py: gateloop_triton`` | ``ops/gateloop/naive.py: gateloop_naive`` |
| depthwise causal conv1d with carried buffer, document masking, optional SiLU (fwd + bwd) | ``ops/causal_conv/triton.py: causal_conv1d_triton`` | ``ops/causal_conv/naive.py: causal_conv1d_naive`` |

This package keeps what the kernels share: device / availability checks (``device.py``), the one switch
``SEQZOO_KERNELS=torch|triton|auto`` with ``set_kernels`` / ``use_kernels`` and the log-once record of the
implementation each op runs (``switch.py``), the dtype and autotune helpers (``_common.py``, imports triton). Nothing here imports triton at module import time: ``import seqzoo`` and
``import seqzoo.kernels`` work without it; each ``ops/<op>/triton.py`` is imported only when its path runs.

Under ``TRITON_INTERPRET=1`` (CPU) the kernels run in Triton's interpreter: one autotune config, fp32 dots
(the interpreter has no bf16 ``tl.dot``; bf16/fp16 inputs are still loaded, accumulated in fp32 and stored
in their own dtype).
"""

from __future__ import annotations

from .device import compute_capability, interpreting, triton_available, triton_unusable, usable_on
from .switch import (
    CHOICES,
    ENV,
    Choice,
    chunk_halvings,
    chunk_unfit,
    float_unfit,
    kernel_verdict,
    kernels_setting,
    note_kernel,
    require_triton,
    set_kernels,
    use_kernels,
    want_triton,
)

__all__ = [
    "CHOICES",
    "ENV",
    "Choice",
    "chunk_halvings",
    "chunk_unfit",
    "compute_capability",
    "float_unfit",
    "interpreting",
    "kernel_verdict",
    "kernels_setting",
    "note_kernel",
    "require_triton",
    "set_kernels",
    "triton_available",
    "triton_unusable",
    "usable_on",
    "use_kernels",
    "want_triton",
]
