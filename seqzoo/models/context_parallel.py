"""Which models can run a sequence split along time across ranks (context parallelism), and why the others cannot.

A model splits when every layer's mixer does (``Mixer.supports_context_parallel``: its output on a rank's block
needs only a fixed-size summary, a halo or the keys and values of the ranks before it). The layers that cannot:

* the sLSTM: h_{t-1} enters the gates through the recurrent matrices R and a non-linearity, so a block's effect on
  the state is not a map that a fixed-size summary describes; no prefix over ranks recovers the state entering a
  block, and the layer would have to run its blocks one rank after the other (a pipeline with N-1 idle ranks);
* Orchid and the long convolution: the filter is as long as the sequence, so each output reads the whole earlier
  input, not a summary of it (a split would all-gather the whole input of every layer);
* RMT: its memory tokens pass from one segment to the next through the whole model, so segments are sequential;
  only the attention inside one segment could split, which the segment length (a few hundred tokens) does not
  call for.
"""

from __future__ import annotations

import inspect

from ..mixers.base import Mixer

WHY_NOT = {
    "slstm": "the sLSTM's recurrence is non-linear in h (h_{t-1} passes through R and the gates), so no fixed-size "
    "summary of a block gives the state entering the next one",
    "orchid": "Orchid's long FFT convolution reads the whole earlier input (a filter as long as the sequence), not a "
    "fixed-size summary of it",
    "long_conv": "the long convolution reads the whole earlier input (a filter as long as the sequence), not a "
    "fixed-size summary of it",
}
RMT_WHY_NOT = (
    "RMT's memory passes from segment to segment through the whole model, so its segments run in sequence "
    "(docs/context-parallel.md)"
)


def context_parallel_refusal(model) -> str | None:
    """Why ``model`` cannot take a sequence split along time, or None; names the first layer that refuses."""
    inner = getattr(model, "module", model)  # DDP / FSDP wrappers
    if type(inner).__name__.startswith("RMT"):
        return RMT_WHY_NOT
    if "context_parallel" not in inspect.signature(inner.forward).parameters:
        return f"{type(inner).__name__}.forward takes no context_parallel (a bidirectional model reads later tokens)"
    for i, block in enumerate(getattr(inner, "blocks", [])):
        mixer = getattr(block, "mixer", None)
        if isinstance(mixer, Mixer) and not mixer.supports_context_parallel:
            why = WHY_NOT.get(mixer.name, "it does not split along time yet")
            return f"layer {i} ({mixer.name}) does not support context parallelism: {why}"
    return None
