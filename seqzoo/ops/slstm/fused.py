"""Fast sLSTM loops on CPU (arXiv:2405.04517 §2.2): the same recurrence as naive.py, arranged for PyTorch's per-op cost.

* ``slstm_fused``: head-major layout ``(H, B, 4d)`` so that the recurrent term and the input term are one
  ``baddbmm`` per step and a short pointwise update, run without autograd recording. When a gradient is needed
  it is a custom ``autograd.Function`` whose backward is hand-written BPTT (README.md): every per-step local
  derivative is computed for all T at once from the saved states, so the sequential backward loop is only
  the chain through (h, c, n, m) plus one ``bmm`` with R^T per step; dR is one batched product after the loop.
* ``native=True`` (``mode="native"``, and ``"auto"`` on CPU where it builds): the two sequential loops, the forward
  and the BPTT chain, run in C (``native.c`` through ``native.py``), each step one pass over the heads instead of
  some 20 ATen calls; everything else (the local derivatives for all T, dR) is the same PyTorch code.
* ``slstm_compiled``: the same loop with the pointwise update compiled by ``torch.compile`` (Inductor
  C++ on CPU); built lazily on first use, falls back to ``slstm_fused`` if compilation is unavailable.

Packed documents (``segment_pos``): ``fresh (T, 1, B, 1)`` marks the steps that start a document. The forward
loops read the zero state there instead of the carried one; the saved ``Hs, Cs, Ns, Ms`` stay the states the
steps returned, and the backward takes the states each step really read (``_read_states``) and stops the chain
through (h, c, n, m) at every start, so no gradient crosses a document start.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import native as native_loops
from .common import check_inputs, compute_dtype, document_starts, zero_state


def _pointwise(g, c, n, m, d: int):
    """``g (H, B, 4d)`` pre-activations; ``c, n, m (H, B, d)`` -> new ``h, c, n, m``."""
    ig, fg, zg, og = g.split(d, dim=-1)
    logf = F.logsigmoid(fg)
    first = n == 0
    m_new = torch.where(first, ig, torch.maximum(ig, logf + m))
    # f' = 0 on the first step from a zero state (it multiplies zeros there); never exp(+large)
    fexp_arg = torch.where(first, float("-inf"), m - m_new)
    ip = torch.exp(ig - m_new)
    fp = torch.exp(logf + fexp_arg)
    c = fp * c + ip * torch.tanh(zg)
    n = fp * n + ip
    h = torch.sigmoid(og) * c / n
    return h, c, n, m_new


def _fresh_where(fresh_t, states):
    """The states a step reads: zeros where ``fresh_t (1, B, 1)`` (a document starts), else the carried ones."""
    if fresh_t is None:
        return states
    return tuple(torch.where(fresh_t, torch.zeros_like(s), s) for s in states)


def _head_major_starts(segment_pos, T, B, device):
    """``fresh (T, 1, B, 1)`` bool from ``segment_pos (B, T)``, or None without a start in the call."""
    starts = document_starts(segment_pos, device)
    return None if starts is None else starts.t().reshape(T, 1, B, 1)


def _read_states(seq, fresh):
    """``seq (T+1, H, B, d)`` -> the state each step t read: ``seq[t]``, or zeros where a document starts at t."""
    prev = seq[:-1]
    return prev if fresh is None else torch.where(fresh, torch.zeros_like(prev), prev)


def _forward_loop(gx, Rm, state, fresh=None):
    """The forward loop in PyTorch: ``G`` (pre-activations) and ``Hs, Cs, Ns, Ms (T+1, H, B, d)``."""
    T, d = gx.shape[0], Rm.shape[1]
    h, c, n, m = state
    G = torch.empty_like(gx)
    Hs, Cs, Ns, Ms = ([t] for t in state)
    for t in range(T):
        h, c, n, m = _fresh_where(None if fresh is None else fresh[t], (h, c, n, m))
        g = torch.baddbmm(gx[t], h, Rm)
        G[t] = g
        h, c, n, m = _pointwise(g, c, n, m, d)
        Hs.append(h), Cs.append(c), Ns.append(n), Ms.append(m)
    return (G, *(torch.stack(x, 0) for x in (Hs, Cs, Ns, Ms)))  # (T+1, H, B, d)


class _SLSTMFunction(torch.autograd.Function):
    """Head-major sLSTM loop with hand-written BPTT. Inputs ``gx (T, H, B, 4d)``, ``Rm (H, d, 4d)``,
    ``h0, c0, n0, m0 (H, B, d)``, ``native`` (the loops in C), ``fresh (T, 1, B, 1)`` bool or None (document
    starts); outputs ``hs (T, H, B, d)`` and the final ``h, c, n, m``."""

    @staticmethod
    def forward(ctx, gx, Rm, h0, c0, n0, m0, native, fresh):
        loop = native_loops.forward if native else _forward_loop
        G, Hs, Cs, Ns, Ms = loop(gx, Rm, (h0, c0, n0, m0), fresh)
        ctx.save_for_backward(Rm, G, Hs, Cs, Ns, Ms)
        ctx.native, ctx.fresh = native, fresh
        return Hs[1:], Hs[-1], Cs[-1], Ns[-1], Ms[-1]

    @staticmethod
    def backward(ctx, dHs, dh, dc, dn, dm):
        Rm, G, Hs, Cs, Ns, Ms = ctx.saved_tensors
        fresh = ctx.fresh
        d = Rm.shape[1]
        ig, fg, zg, og = G.split(d, dim=-1)  # (T, H, B, d) each
        h_prev, c_prev, n_prev, m_prev = (_read_states(x, fresh) for x in (Hs, Cs, Ns, Ms))
        c_t, n_t, m_t = Cs[1:], Ns[1:], Ms[1:]
        first = n_prev == 0
        logf = F.logsigmoid(fg)
        sel_i = first | (ig >= logf + m_prev)  # m_t was taken from i~ (else from logf + m_{t-1})
        ip = torch.exp(ig - m_t)
        fp = torch.exp(logf + torch.where(first, float("-inf"), m_prev - m_t))
        zt, so = torch.tanh(zg), torch.sigmoid(og)
        q = c_t / n_t
        # local derivatives, all steps at once
        P_o = q * so * (1 - so)  # dh -> d o~
        P_c = so / n_t  # dh -> dc_t
        P_n = so * q / n_t  # dh -> -dn_t
        C_f, N_f = c_prev * fp, n_prev * fp  # d(fp)*fp pieces
        Z_i, Z_d = zt * ip, ip * (1 - zt * zt)
        S_f = torch.sigmoid(-fg)  # d logsigmoid
        sel = sel_i.to(G.dtype)
        dHs = torch.zeros_like(Hs[1:]) if dHs is None else dHs
        dh_r = torch.zeros_like(Hs[0]) if dh is None else dh
        dc = torch.zeros_like(Hs[0]) if dc is None else dc
        dn = torch.zeros_like(Hs[0]) if dn is None else dn
        dm = torch.zeros_like(Hs[0]) if dm is None else dm
        if ctx.native:
            D = torch.stack([P_c, P_n, C_f, N_f, Z_i, ip, sel, S_f, Z_d, P_o, fp])  # native.c's 11 planes
            dG, dh_r, dc, dn, dm = native_loops.backward(Rm, D, dHs, dh_r, dc, dn, dm, fresh)
        else:
            dG, dh_r, dc, dn, dm = _backward_chain(
                Rm, G, dHs, dh_r, dc, dn, dm, P_c, P_n, C_f, N_f, Z_i, ip, sel, S_f, Z_d, P_o, fp, fresh
            )
        dRm = torch.einsum("thbj,thbk->hjk", h_prev, dG)
        return dG, dRm, dh_r, dc, dn, dm, None, None


def _backward_chain(Rm, G, dHs, dh_r, dc, dn, dm, P_c, P_n, C_f, N_f, Z_i, ip, sel, S_f, Z_d, P_o, fp, fresh=None):
    """The BPTT chain in PyTorch (``native.c`` states it): ``dG`` and the gradients of the initial state.
    At a document start (``fresh[t]``) step t read zeros, so nothing flows on to the state before it."""
    T = G.shape[0]
    RmT = Rm.transpose(1, 2)  # (H, 4d, d)
    dG = torch.empty_like(G)
    for t in range(T - 1, -1, -1):
        dht = dHs[t] + dh_r
        dct = dc + dht * P_c[t]
        dnt = dn - dht * P_n[t]
        Bf = dct * C_f[t] + dnt * N_f[t]
        A = dct * Z_i[t] + dnt * ip[t]
        dmt = dm - A - Bf
        s_t = sel[t]
        dlf = Bf + (1 - s_t) * dmt
        dG[t] = torch.cat([A + s_t * dmt, dlf * S_f[t], dct * Z_d[t], dht * P_o[t]], dim=-1)
        dh_r = torch.bmm(dG[t], RmT)
        dc, dn, dm = dct * fp[t], dnt * fp[t], dlf
        dh_r, dc, dn, dm = _fresh_where(None if fresh is None else fresh[t], (dh_r, dc, dn, dm))
    return dG, dh_r, dc, dn, dm


def _loop(wx, R, state, step, segment_pos=None):
    """Autograd-recorded (or no-grad) loop; used for inference by ``slstm_fused`` and by ``slstm_compiled``."""
    B, T, H, d = check_inputs(wx, R, state, segment_pos)
    fresh = _head_major_starts(segment_pos, T, B, wx.device)
    ct = compute_dtype(wx.dtype)
    st = zero_state(B, H * d, ct, wx.device) if state is None else tuple(s.to(ct) for s in state)
    h, c, n, m = (s.reshape(B, H, d).transpose(0, 1) for s in st)  # (H, B, d)
    gx = wx.to(ct).permute(1, 2, 0, 3, 4).reshape(T, H, B, 4 * d)  # (T, H, B, 4d)
    Rm = R.to(ct).reshape(H, d, 4 * d)  # (H, d_in, 4 d_out)
    out = []
    grad = torch.is_grad_enabled() and (wx.requires_grad or R.requires_grad or any(s.requires_grad for s in st))
    with torch.set_grad_enabled(grad):
        for t in range(T):
            h, c, n, m = _fresh_where(None if fresh is None else fresh[t], (h, c, n, m))
            g = torch.baddbmm(gx[t], h, Rm)  # (H, B, 4d) = W x + b + R h
            h, c, n, m = step(g, c, n, m, d)
            out.append(h)
    hs = torch.stack(out, 0)  # (T, H, B, d)
    hs = hs.permute(2, 0, 1, 3)  # (B, T, H, d)
    final = tuple(s.transpose(0, 1).reshape(B, H * d) for s in (h, c, n, m))
    return hs.to(wx.dtype), final


def slstm_fused(wx, R, state=None, native: bool = False, segment_pos=None):
    """``wx (B, T, H, 4, d)``, ``R (H, d, 4, d)`` -> ``h (B, T, H, d)``, final ``(h, c, n, m)`` each ``(B, H*d)``.
    ``native``: the loops in C (CPU tensors; ``native.library()`` must have built). ``segment_pos (B, T)``: 0 where
    a document starts (the state is reset to zeros before that step)."""
    B, T, H, d = check_inputs(wx, R, state, segment_pos)
    ct = compute_dtype(wx.dtype)
    st = zero_state(B, H * d, ct, wx.device) if state is None else tuple(s.to(ct) for s in state)
    grad = torch.is_grad_enabled() and (wx.requires_grad or R.requires_grad or any(s.requires_grad for s in st))
    if not grad and not native:
        with torch.no_grad():
            return _loop(wx, R, st, _pointwise, segment_pos)
    fresh = _head_major_starts(segment_pos, T, B, wx.device)
    h0, c0, n0, m0 = (s.reshape(B, H, d).transpose(0, 1).contiguous() for s in st)  # (H, B, d)
    gx = wx.to(ct).permute(1, 2, 0, 3, 4).reshape(T, H, B, 4 * d)  # (T, H, B, 4d)
    Rm = R.to(ct).reshape(H, d, 4 * d)  # (H, d_in, 4 d_out)
    if not grad:  # inference in C: no autograd record, nothing saved
        with torch.no_grad():
            _, Hs, Cs, Ns, Ms = native_loops.forward(gx, Rm, (h0, c0, n0, m0), fresh)
        hs, h, c, n, m = Hs[1:], Hs[-1], Cs[-1], Ns[-1], Ms[-1]
    else:
        hs, h, c, n, m = _SLSTMFunction.apply(gx, Rm, h0, c0, n0, m0, native, fresh)
    final = tuple(s.transpose(0, 1).reshape(B, H * d) for s in (h, c, n, m))
    return hs.permute(2, 0, 1, 3).to(wx.dtype), final  # (B, T, H, d)


_COMPILED = None


def _compiled_step():
    global _COMPILED
    if _COMPILED is None:
        try:
            _COMPILED = torch.compile(_pointwise, dynamic=True)
        except Exception:  # pragma: no cover - no compiler backend
            _COMPILED = _pointwise
    return _COMPILED


def slstm_compiled(wx, R, state=None, segment_pos=None):
    """As ``slstm_fused`` with the pointwise step compiled (first call pays the compilation)."""
    return _loop(wx, R, state, _compiled_step(), segment_pos)
