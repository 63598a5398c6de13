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

This package keeps what the kernels share: device / availability checks (here), the dtype and autotune helpers
(``_common.py``, imports triton). Nothing here imports triton at module import time: ``import seqzoo`` and
``import seqzoo.kernels`` work without it; each ``ops/<op>/triton.py`` is imported only when its path runs.

Under ``TRITON_INTERPRET=1`` (CPU) the kernels run in Triton's interpreter: one autotune config, fp32 dots
(the interpreter has no bf16 ``tl.dot``; bf16/fp16 inputs are still loaded, accumulated in fp32 and stored
in their own dtype).
"""

from __future__ import annotations

import importlib.util
import os


def triton_available() -> bool:
    """True when triton is importable (it is never imported by this check)."""
    return importlib.util.find_spec("triton") is not None


def interpreting() -> bool:
    """True under Triton's CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def usable_on(device) -> bool:
    """Can the Triton kernels run for tensors on ``device``: CUDA with triton, or any device under the interpreter
    (CPU tensors)."""
    import torch

    dev = torch.device(device)
    if not triton_available():
        return False
    if interpreting():
        return dev.type == "cpu"
    return dev.type == "cuda"


__all__ = ["interpreting", "triton_available", "usable_on"]
