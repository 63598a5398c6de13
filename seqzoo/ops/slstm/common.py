"""Shared checks of the sLSTM cell ops.

Layouts: gate pre-activations from the input ``wx (B, T, H, 4, d)`` (gate order i, f, z, o, bias included),
block-diagonal recurrent kernel ``R (H, d_in, 4, d_out)``, state ``(h, c, n, m)`` each ``(B, H*d)``, float32
(float64 for float64 inputs).
"""

from __future__ import annotations

import torch

from ...errors import InputError


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def check_inputs(wx, R, state):
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
    return B, T, H, d


def zero_state(B: int, D: int, dtype, device):
    return tuple(torch.zeros(B, D, dtype=dtype, device=device) for _ in range(4))
