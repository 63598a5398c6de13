"""Shared checks of the sLSTM cell ops.

Layouts: gate pre-activations from the input ``wx (B, T, H, 4, d)`` (gate order i, f, z, o, bias included),
block-diagonal recurrent kernel ``R (H, d_in, 4, d_out)``, state ``(h, c, n, m)`` each ``(B, H*d)``, float32
(float64 for float64 inputs). Packed documents: ``segment_pos (B, T)`` integers, 0 where a document starts; the
loops reset ``(h, c, n, m)`` to the fresh-stream state (zeros) before such a step.
"""

from __future__ import annotations

import torch

from ...errors import InputError


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def check_inputs(wx, R, state, segment_pos=None):
    if not isinstance(wx, torch.Tensor) or not wx.is_floating_point():
        raise InputError(f"slstm: wx must be a floating-point tensor, got {getattr(wx, 'dtype', type(wx))}")
    if wx.dim() != 5 or wx.shape[3] != 4:
        raise InputError(f"slstm: wx must have shape (B, T, H, 4, d) (gates i, f, z, o), got {tuple(wx.shape)}")
    B, T, H, _, d = wx.shape
    if not isinstance(R, torch.Tensor) or R.shape != (H, d, 4, d):
        raise InputError(f"slstm: R must have shape (H={H}, d={d}, 4, d={d}), got {tuple(getattr(R, 'shape', ()))}")
    if state is not None:
        if not isinstance(state, (tuple, list)) or len(state) != 4:
            raise InputError("slstm: state must be a tuple (h, c, n, m) returned by a previous call")
        for name, s in zip("hcnm", state):
            if tuple(s.shape) != (B, H * d):
                raise InputError(f"slstm: state {name} must have shape ({B}, {H * d}), got {tuple(s.shape)}")
    if segment_pos is not None:
        if not isinstance(segment_pos, torch.Tensor) or segment_pos.dtype.is_floating_point or segment_pos.is_complex():
            raise InputError(
                f"slstm: segment_pos must be an integer tensor (B, T), got {getattr(segment_pos, 'dtype', segment_pos)}"
            )
        if tuple(segment_pos.shape) != (B, T):
            raise InputError(f"slstm: segment_pos must have shape ({B}, {T}), got {tuple(segment_pos.shape)}")
    return B, T, H, d


def document_starts(segment_pos, device) -> torch.Tensor | None:
    """``(B, T)`` bool, True where a document starts (the state entering that step is the fresh one); None
    when there are no packed documents or no start inside the call (a call without starts continues its state)."""
    if segment_pos is None:
        return None
    starts = segment_pos.to(device) == 0
    return starts if bool(starts.any()) else None


def zero_state(B: int, D: int, dtype, device):
    return tuple(torch.zeros(B, D, dtype=dtype, device=device) for _ in range(4))
