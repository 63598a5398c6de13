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
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import native as native_loops
from .common import check_inputs, compute_dtype, zero_state


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


def _forward_loop(gx, Rm, state):
    """The forward loop in PyTorch: ``G`` (pre-activations) and ``Hs, Cs, Ns, Ms (T+1, H, B, d)``."""
    T, d = gx.shape[0], Rm.shape[1]
    h, c, n, m = state
    G = torch.empty_like(gx)
    Hs, Cs, Ns, Ms = ([t] for t in state)
    for t in range(T):
        g = torch.baddbmm(gx[t], h, Rm)
        G[t] = g
        h, c, n, m = _pointwise(g, c, n, m, d)
        Hs.append(h), Cs.append(c), Ns.append(n), Ms.append(m)
    return (G, *(torch.stack(x, 0) for x in (Hs, Cs, Ns, Ms)))  # (T+1, H, B, d)


class _SLSTMFunction(torch.autograd.Function):
    """Head-major sLSTM loop with hand-written BPTT. Inputs ``gx (T, H, B, 4d)``, ``Rm (H, d, 4d)``,
    ``h0, c0, n0, m0 (H, B, d)``, ``native`` (the loops in C); outputs ``hs (T, H, B, d)`` and the final
    ``h, c, n, m``."""

    @staticmethod
    def forward(ctx, gx, Rm, h0, c0, n0, m0, native):
        G, Hs, Cs, Ns, Ms = (native_loops.forward if native else _forward_loop)(gx, Rm, (h0, c0, n0, m0))
        ctx.save_for_backward(Rm, G, Hs, Cs, Ns, Ms)
        ctx.native = native
        return Hs[1:], Hs[-1], Cs[-1], Ns[-1], Ms[-1]

    @staticmethod
    def backward(ctx, dHs, dh, dc, dn, dm):
        Rm, G, Hs, Cs, Ns, Ms = ctx.saved_tensors
        d = Rm.shape[1]
        ig, fg, zg, og = G.split(d, dim=-1)  # (T, H, B, d) each
        c_prev, n_prev, m_prev = Cs[:-1], Ns[:-1], Ms[:-1]
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
            dG, dh_r, dc, dn, dm = native_loops.backward(Rm, D, dHs, dh_r, dc, dn, dm)
        else:
            dG, dh_r, dc, dn, dm = _backward_chain(
                Rm, G, dHs, dh_r, dc, dn, dm, P_c, P_n, C_f, N_f, Z_i, ip, sel, S_f, Z_d, P_o, fp
            )
        dRm = torch.einsum("thbj,thbk->hjk", Hs[:-1], dG)
        return dG, dRm, dh_r, dc, dn, dm, None


def _backward_chain(Rm, G, dHs, dh_r, dc, dn, dm, P_c, P_n, C_f, N_f, Z_i, ip, sel, S_f, Z_d, P_o, fp):
    """The BPTT chain in PyTorch (``native.c`` states it): ``dG`` and the gradients of the initial state."""
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
    return dG, dh_r, dc, dn, dm


def _loop(wx, R, state, step):
    """Autograd-recorded (or no-grad) loop; used for inference by ``slstm_fused`` and by ``slstm_compiled``."""
    B, T, H, d = check_inputs(wx, R, state)
    ct = compute_dtype(wx.dtype)
    st = zero_state(B, H * d, ct, wx.device) if state is None else tuple(s.to(ct) for s in state)
    h, c, n, m = (s.reshape(B, H, d).transpose(0, 1) for s in st)  # (H, B, d)
    gx = wx.to(ct).permute(1, 2, 0, 3, 4).reshape(T, H, B, 4 * d)  # (T, H, B, 4d)
    Rm = R.to(ct).reshape(H, d, 4 * d)  # (H, d_in, 4 d_out)
    out = []
    grad = torch.is_grad_enabled() and (wx.requires_grad or R.requires_grad or any(s.requires_grad for s in st))
    with torch.set_grad_enabled(grad):
        for t in range(T):
            g = torch.baddbmm(gx[t], h, Rm)  # (H, B, 4d) = W x + b + R h
            h, c, n, m = step(g, c, n, m, d)
            out.append(h)
    hs = torch.stack(out, 0)  # (T, H, B, d)
    hs = hs.permute(2, 0, 1, 3)  # (B, T, H, d)
    final = tuple(s.transpose(0, 1).reshape(B, H * d) for s in (h, c, n, m))
    return hs.to(wx.dtype), final


def slstm_fused(wx, R, state=None, native: bool = False):
    """``wx (B, T, H, 4, d)``, ``R (H, d, 4, d)`` -> ``h (B, T, H, d)``, final ``(h, c, n, m)`` each ``(B, H*d)``.
    ``native``: the loops in C (CPU tensors; ``native.library()`` must have built)."""
    B, T, H, d = check_inputs(wx, R, state)
    ct = compute_dtype(wx.dtype)
    st = zero_state(B, H * d, ct, wx.device) if state is None else tuple(s.to(ct) for s in state)
    grad = torch.is_grad_enabled() and (wx.requires_grad or R.requires_grad or any(s.requires_grad for s in st))
    if not grad and not native:
        with torch.no_grad():
            return _loop(wx, R, st, _pointwise)
    h0, c0, n0, m0 = (s.reshape(B, H, d).transpose(0, 1).contiguous() for s in st)  # (H, B, d)
    gx = wx.to(ct).permute(1, 2, 0, 3, 4).reshape(T, H, B, 4 * d)  # (T, H, B, 4d)
    Rm = R.to(ct).reshape(H, d, 4 * d)  # (H, d_in, 4 d_out)
    if not grad:  # inference in C: no autograd record, nothing saved
        with torch.no_grad():
            _, Hs, Cs, Ns, Ms = native_loops.forward(gx, Rm, (h0, c0, n0, m0))
        hs, h, c, n, m = Hs[1:], Hs[-1], Cs[-1], Ns[-1], Ms[-1]
    else:
        hs, h, c, n, m = _SLSTMFunction.apply(gx, Rm, h0, c0, n0, m0, native)
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


def slstm_compiled(wx, R, state=None):
    """As ``slstm_fused`` with the pointwise step compiled (first call pays the compilation)."""
    return _loop(wx, R, state, _compiled_step())
