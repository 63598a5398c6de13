"""The obvious sLSTM loop (arXiv:2405.04517 §2.2), the reference every fast path is tested against.

g = wx_t + R h_{t-1}  (block-diagonal per head and gate);  (i, f, z, o) = g
m_t = max(i, logsigmoid(f) + m_{t-1})   (m_t = i where n_{t-1} == 0: the first step)
i' = exp(i - m_t), f' = exp(logsigmoid(f) + m_{t-1} - m_t)
c_t = f' c + i' tanh(z);  n_t = f' n + i';  h_t = sigmoid(o) c_t / n_t

Packed documents (``segment_pos == 0`` at t): (h, c, n, m)_{t-1} is replaced by zeros before step t, so the
step is a first step (n_{t-1} = 0) and nothing before t reaches t, forward or backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .common import check_inputs, compute_dtype, document_starts, zero_state


def slstm_naive(wx, R, state=None, segment_pos=None):
    """``wx (B, T, H, 4, d)``, ``R (H, d, 4, d)`` -> ``h (B, T, H, d)``, final ``(h, c, n, m)`` each ``(B, H*d)``.
    ``segment_pos (B, T)``: 0 where a document starts (the state is reset to zeros before that step)."""
    B, T, H, d = check_inputs(wx, R, state, segment_pos)
    starts = document_starts(segment_pos, wx.device)
    ct = compute_dtype(wx.dtype)
    h, c, n, m = zero_state(B, H * d, ct, wx.device) if state is None else (s.to(ct) for s in state)
    h, c, n, m = (s.reshape(B, H, d) for s in (h, c, n, m))  # (B, H, d)
    Rc = R.to(ct)
    out = []
    for t in range(T):
        if starts is not None:
            fresh = starts[:, t, None, None]  # (B, 1, 1)
            h, c, n, m = (torch.where(fresh, torch.zeros_like(s), s) for s in (h, c, n, m))
        g = wx[:, t].to(ct) + torch.einsum("bhj,hjgl->bhgl", h, Rc)  # (B, H, 4, d)
        ig, fg, zg, og = g.unbind(2)
        logf = F.logsigmoid(fg)
        first = n == 0
        m_new = torch.where(first, ig, torch.maximum(ig, logf + m))
        ip = torch.exp(ig - m_new)
        fp = torch.exp(torch.where(first, torch.full_like(m, float("-inf")), logf + m - m_new))
        c = fp * c + ip * torch.tanh(zg)
        n = fp * n + ip
        h = torch.sigmoid(og) * c / n
        m = m_new
        out.append(h)
    final = tuple(s.reshape(B, H * d) for s in (h, c, n, m))
    return torch.stack(out, 1).to(wx.dtype), final
