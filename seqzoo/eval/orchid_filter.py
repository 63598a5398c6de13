"""How much of a trained Orchid's convolution filter depends on its input.

Orchid's filter in each layer is ``H(x) = H_0 + H_theta(x)`` (arXiv:2402.18508, eq. 1): a static implicit
filter plus the conditioning network's spectrum. If training drives ``H_theta`` to the same spectrum for every
input, the layer is a static long convolution again, whatever its parameter count. Over a batch of inputs
``x_1..x_B`` (spectra over the layer's channels and frequency bins), per Orchid layer:

    input_share     = mean_b |H_theta(x_b) - mean_b' H_theta(x_b')|^2 / mean_b |H(x_b)|^2
    adaptive_static = mean_b |H_theta(x_b)|^2 / |H_0|^2

``input_share`` is the part of the whole filter's energy that changes from one input to the next (0: a static
filter); ``adaptive_static`` compares the conditioning network's output with the static filter. Used in
docs/orchid.md to ask why Orchid stays on the recall plateau at vocabulary 30; ``tools/orchid_filter_probe.py``
prints both for saved runs.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import InputError


def orchid_filter_variation(model: nn.Module, inputs: torch.Tensor) -> list[dict[str, float]]:
    """Per Orchid layer (in forward order), ``input_share`` and ``adaptive_static`` over the batch ``inputs``
    (what ``model`` takes, batch first, B >= 2: token ids ``(B, T)`` for a recall model). Runs one forward pass
    without gradients; the model is left as it was."""
    from ..mixers.orchid import Orchid

    if not isinstance(inputs, torch.Tensor) or inputs.dim() < 2 or inputs.shape[0] < 2:
        got = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else type(inputs).__name__
        raise InputError(f"inputs must be a batch (B, T, ...) with B >= 2 (a spread needs two inputs), got {got}")
    layers = [m for m in model.modules() if isinstance(m, Orchid)]
    if not any(m.cond is not None for m in layers):
        raise InputError("model has no Orchid layer with a conditioning network (conditioning='none' or no Orchid)")
    seen: list[tuple[nn.Module, torch.Tensor, torch.Tensor | None]] = []

    def keep_input(module, args, kwargs):
        x = args[0] if args else kwargs["x"]
        seen.append((module, x, kwargs.get("context")))

    hooks = [m.register_forward_pre_hook(keep_input, with_kwargs=True) for m in layers if m.cond is not None]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(inputs)
            rows = [_variation(layer, u, context) for layer, u, context in seen]
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return rows


def _variation(layer, u: torch.Tensor, context: torch.Tensor | None) -> dict[str, float]:
    T = u.shape[1]
    H_theta = layer.adaptive_spectrum(u, context=context)  # (B, D, F), in the mixer's compute precision
    H_0 = layer._static_spectrum(layer.filter, T, layer.fft_size(T), "fft", H_theta.real.dtype)  # (D, F), as in forward
    energy = lambda z: z.abs().square().mean()  # noqa: E731
    spread = energy(H_theta - H_theta.mean(0, keepdim=True))
    return {
        "input_share": float(spread / energy(H_0 + H_theta)),
        "adaptive_static": float(energy(H_theta) / energy(H_0)),
    }
