"""mLSTM recurrent form (arXiv:2405.04517 §2.3): one step, and the step loop used as the ``"recurrent"`` mode.

    m_t = max(phi_t + m_{t-1}, i_t);  f' = exp(phi_t + m_{t-1} - m_t);  i' = exp(i_t - m_t)
    C_t = f' C_{t-1} + i' k_t v_t^T;   n_t = f' n_{t-1} + i' k_t
    h_t = (s q_t)^T C_t / (max(|(s q_t)^T n_t|, exp(-m_t)) + eps)

A document start (``reset``) replaces the state entering the step by the fresh one (C = n = 0, m = 0), so
the step is the first of a new stream: m_t = max(phi_t, i_t). Autograd flows through the stabiliser m too, so gradients of the returned (stabilised) state are exact; the
lower bound exp(-m) is guarded against overflow (``common.lower_bound``).
"""

from __future__ import annotations

import torch

from .common import check_inputs, compute_dtype, log_forget, lower_bound, zero_state


def mlstm_step(q, k, v, i, phi, state, eps: float = 1e-6, reset=None):
    """One step on prepared inputs: ``q`` already scaled ``(B, H, K)``, ``k (B, H, K)``, ``v (B, H, V)``,
    ``i, phi (B, H)`` in the compute dtype, ``state = (C, n, m)``, ``reset (B,)`` bool or None (True: a document
    starts at this step). Returns ``h (B, H, V)`` and the new state."""
    C, n, m = state
    if reset is not None:  # a where, not a multiply: no gradient reaches the dropped state, and no 0 * inf
        keep = ~reset[:, None]  # (B, 1)
        C = torch.where(keep[..., None, None], C, torch.zeros((), dtype=C.dtype, device=C.device))
        n = torch.where(keep[..., None], n, torch.zeros((), dtype=n.dtype, device=n.device))
        m = torch.where(keep, m, torch.zeros((), dtype=m.dtype, device=m.device))
    m_new = torch.maximum(phi + m, i)  # (B, H)
    fp = torch.exp(phi + m - m_new)
    ip = torch.exp(i - m_new)
    ik = ip[..., None] * k  # (B, H, K)
    # in place on the fresh f' C: two passes over the (K, V) state instead of three (outer product, then add);
    # autograd allows it, as mul does not save its output
    C = (fp[..., None, None] * C).addcmul_(ik[..., :, None], v[..., None, :])  # (B, H, K, V)
    n = torch.addcmul(ik, fp[..., None], n)  # (B, H, K)
    num = (q[..., None, :] @ C).squeeze(-2)  # (B, H, V)
    qn = (q * n).sum(-1)  # (B, H)
    # without autograd, plain exp(-m) has the same values (inf past the float range); lower_bound's guard only
    # keeps a backward free of 0 * inf, at a dozen extra small ops per decoded token and layer
    bound = lower_bound(m_new) if m_new.requires_grad else torch.exp(-m_new)
    den = torch.maximum(qn.abs(), bound) + eps
    return num / den[..., None], (C, n, m_new)


def mlstm_recurrent(q, k, v, i, f, state=None, eps: float = 1e-6, forget_gate: str = "sigmoid", reset=None):
    """Loop of ``mlstm_step`` over T. ``q, k (B, T, H, K)``, ``v (B, T, H, V)``, ``i, f (B, T, H)``, ``reset (B, T)``
    bool or None."""
    B, T, H, K, V = check_inputs(q, k, v, i, f, state, forget_gate, eps, reset)
    ct = compute_dtype(q.dtype)
    st = zero_state(B, H, K, V, ct, q.device) if state is None else tuple(s.to(ct) for s in state)
    qs = q.to(ct) * K**-0.5
    kc, vc, ic = k.to(ct), v.to(ct), i.to(ct)
    phi = log_forget(f.to(ct), forget_gate)  # (B, T, H)
    hs = []
    for t in range(T):
        h, st = mlstm_step(
            qs[:, t], kc[:, t], vc[:, t], ic[:, t], phi[:, t], st, eps, None if reset is None else reset[:, t]
        )
        hs.append(h)
    return torch.stack(hs, dim=1).to(v.dtype), st
