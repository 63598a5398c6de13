"""Depthwise causal 1-D convolution with a carried buffer (xLSTM's and Griffin's k=4 short conv).

    y_t[c] = bias[c] + sum_{i=0}^{k-1} weight[c, i] * x_{t-k+1+i}[c]       (weight[:, k-1] hits the current token)

The state is the last k-1 inputs ``(B, k-1, C)``; prepending it makes a split sequence equal the whole.
``causal_conv1d_naive`` is the loop every implementation is tested against.

Implementations (``mode=``): ``"native"`` (``native.py``: one C pass forward and one backward on CPU float32 /
float64, document masking included; the C file is built on first use, ``ops/native_build.py``),
``"torch"`` (``torch_conv.py``: k shifted multiply-adds with their own backward; with ``segment_pos`` k-1 masked multiply-adds),
``"naive"`` (the reference loop, ``naive.py``), ``"triton"`` (``triton.py: causal_conv1d_triton``: one fwd and one
bwd Triton kernel, document masking exact in-kernel, fp32 accumulation) and ``"auto"`` (the default, decided by
``choose_implementation``: Triton when the kernels switch allows it, ``seqzoo.kernels.kernel_verdict``: by default CUDA tensors of float32/float16/bfloat16
when triton is importable, never the interpreter; else native where the C library builds (not with
``SEQZOO_NATIVE=0``) and the tensors are CPU float32 / float64, outside torch.compile; torch otherwise). triton is imported only when the Triton path runs. ``activation="silu"`` applies SiLU to y
(fused into the kernel on the Triton path).

Document masking (Griffin, arXiv:2402.19427 §3.1): with ``segment_pos (B, T)`` (0 where a document starts),
the tap at lag s (input x_{t-s}) is dropped when a document starts in ``(t-s, t]``, so no information crosses
a document start. The returned buffer has entries from before a document start inside it zeroed, which
keeps the rule exact across calls without carrying positions (a later call cannot see past that start).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...errors import InputError, require
from ...kernels import Choice, float_unfit, kernel_verdict, note_kernel, require_triton
from .common import ACTIVATIONS
from .naive import causal_conv1d_naive
from .native import causal_conv1d_native, native_unfit
from .torch_conv import causal_conv1d_torch

MODES = ("auto", "native", "torch", "naive", "triton")


def choose_implementation(mode: str, x: torch.Tensor, *others: torch.Tensor | None) -> Choice:
    """Which implementation ``causal_conv1d`` runs on ``x`` and ``others`` (weight, bias, state), and why a faster one
    was passed over.

    ``mode="auto"``: the Triton kernel where the kernels switch allows it (``seqzoo.kernels.kernel_verdict``: the
    switch, the device, float32/float16/bfloat16 tensors on one device); else the C loops (``native``) for CPU float32
    / float64 tensors where the library builds, outside torch.compile (there the torch path fuses and a C call would
    break the graph); else ``torch``. The reason names the last implementation passed over. ``mode="triton"`` is
    refused with an ``InputError`` when the kernel cannot run here (triton missing, tensors off CUDA outside the
    interpreter, a dtype it does not take); ``mode="native"`` is refused by ``causal_conv1d_native``. Any other
    mode is run as asked.
    """
    require(mode in MODES, f"mode must be one of {MODES}, got {mode!r}")
    if mode == "triton":
        require_triton("causal_conv1d", x.device, float_unfit(x, *others))
        return Choice("triton")
    if mode != "auto":
        return Choice(mode)
    why = kernel_verdict("causal_conv1d", x.device, float_unfit(x, *others))
    if why is None:
        return Choice("triton")
    if torch.compiler.is_compiling():
        return Choice("torch", "under torch.compile the torch path fuses; a C call would break the graph")
    no_c = native_unfit(x, *others)
    return Choice("native", why) if no_c is None else Choice("torch", no_c)


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    segment_pos: torch.Tensor | None = None,
    mode: str = "auto",
    activation: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x (B, T, C)``, ``weight (C, k)`` -> ``y (B, T, C)``, new state ``(B, k-1, C)``.

    ``segment_pos (B, T)`` (optional) masks taps across document starts (see the module docstring).
    ``mode``: "auto" | "native" | "torch" | "naive" | "triton" (module docstring); ``activation``: None | "silu".
    """
    if mode not in MODES:
        raise InputError(f"mode must be one of {MODES}, got {mode!r}")
    if activation not in ACTIVATIONS:
        raise InputError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    mode = choose_implementation(mode, x, weight, bias, state).name
    note_kernel("causal_conv1d", mode, x.device)
    if mode == "triton":
        from .triton import causal_conv1d_triton

        return causal_conv1d_triton(x, weight, bias, state, segment_pos, activation=activation)
    if mode == "naive":
        return causal_conv1d_naive(x, weight, bias, state, segment_pos, activation=activation)
    if mode == "native":
        y, new_state = causal_conv1d_native(x, weight, bias, state, segment_pos)
    else:
        y, new_state = causal_conv1d_torch(x, weight, bias, state, segment_pos)
    return (F.silu(y) if activation == "silu" else y), new_state


__all__ = [
    "ACTIVATIONS",
    "MODES",
    "causal_conv1d",
    "causal_conv1d_naive",
    "causal_conv1d_native",
    "causal_conv1d_torch",
    "choose_implementation",
]
