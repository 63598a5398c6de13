"""Triton chunkwise mLSTM forward with stabilised exponential gating (xLSTM, arXiv:2405.04517; spec §3.3).

One program per (batch·head, block of BV value columns) walks the chunks of L tokens in order, keeping the
state ``C (K, BV)``, ``n (K)`` and the stabiliser ``m`` in fp32 registers (the "states kept on chip" row of
anchors.md §2.2: chunk states are never written to memory). Per chunk, with b_τ = Σ_{j<=τ} log f_j, g = b_L:

    D̃_τσ = b_τ − b_σ + i_σ (σ <= τ),  M_τ = max(b_τ + m, max_σ D̃_τσ)
    h_τ  = [Σ_σ (s q_τ·k_σ) e^{D̃_τσ−M_τ} v_σ + e^{b_τ+m−M_τ} (s q_τ)ᵀC] / (max(|den_τ|, e^{−M_τ}) + eps)
    m'   = max(g + m, max_σ (g − b_σ + i_σ)),  C' = e^{g+m−m'} C + Σ_σ e^{g−b_σ+i_σ−m'} k_σ v_σᵀ  (n' alike)

The last, partial chunk is masked (i = −inf, log f = 0 for the missing tokens), which equals the reference's
shorter tail chunk, so any T works. Matmuls take bf16/fp16 operands on the GPU with fp32 accumulation.

Backward: not a Triton kernel yet. ``MLSTMTriton.backward`` recomputes the forward with the PyTorch chunkwise
path (``ops.mlstm.mlstm_chunkwise``) under autograd and differentiates that (correct, not fast).
Reference in the tests: ``ops.mlstm.mlstm_naive_recurrent``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import check_float, configs, dot_dtype, interpreting, next_pow2

_CONFIGS = configs([triton.Config({"BV": bv}, num_warps=nw, num_stages=ns)
                    for bv in (32, 64, 128) for nw in (4, 8) for ns in (1, 2)],
                   triton.Config({"BV": 16}, num_warps=1, num_stages=1))


@triton.autotune(configs=_CONFIGS, key=["K", "V", "L"])
@triton.jit
def _mlstm_fwd_kernel(q_ptr, k_ptr, v_ptr, i_ptr, f_ptr, C0_ptr, n0_ptr, m0_ptr, h_ptr, C_ptr, n_ptr, m_ptr,
                      T, H, K, V, scale, eps,
                      L: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, HAS_STATE: tl.constexpr,
                      DOT: tl.constexpr, IEEE: tl.constexpr):
    pid_bh = tl.program_id(0).to(tl.int64)
    pid_v = tl.program_id(1)
    bi = pid_bh // H
    hi = pid_bh % H
    rk = tl.arange(0, BK)
    rv = pid_v * BV + tl.arange(0, BV)
    rl = tl.arange(0, L)
    mk = rk < K
    mv = rv < V
    causal = rl[:, None] >= rl[None, :]  # [τ, σ]

    st_base = pid_bh * K * V  # (B, H, K, V)
    if HAS_STATE:
        C = tl.load(C0_ptr + st_base + rk[:, None] * V + rv[None, :], mask=mk[:, None] & mv[None, :], other=0.0)
        n = tl.load(n0_ptr + pid_bh * K + rk, mask=mk, other=0.0)
        m = tl.load(m0_ptr + pid_bh)
    else:
        C = tl.zeros([BK, BV], dtype=tl.float32)
        n = tl.zeros([BK], dtype=tl.float32)
        m = tl.zeros([1], dtype=tl.float32).sum(0)

    for c0 in range(0, T, L):
        tok = c0 + rl
        mt = tok < T
        qk_off = (bi * T + tok[:, None]) * (H * K) + hi * K + rk[None, :]  # (L, BK) into (B, T, H, K)
        q = tl.load(q_ptr + qk_off, mask=mt[:, None] & mk[None, :], other=0.0).to(tl.float32) * scale
        k = tl.load(k_ptr + qk_off, mask=mt[:, None] & mk[None, :], other=0.0).to(tl.float32)
        v_off = (bi * T + tok[:, None]) * (H * V) + hi * V + rv[None, :]  # (L, BV) into (B, T, H, V)
        v = tl.load(v_ptr + v_off, mask=mt[:, None] & mv[None, :], other=0.0)
        g_off = (bi * T + tok) * H + hi  # (L,) into (B, T, H)
        ig = tl.load(i_ptr + g_off, mask=mt, other=float("-inf"))
        phi = tl.load(f_ptr + g_off, mask=mt, other=0.0)

        b = tl.cumsum(phi, 0)  # (L,) b_τ
        g = tl.sum(phi, 0)  # b_L
        Dt = tl.where(causal, b[:, None] - b[None, :] + ig[None, :], float("-inf"))  # (L, L)
        init = b + m  # (L,)
        M = tl.maximum(tl.max(Dt, 1), init)  # (L,)
        if IEEE:
            qk = tl.dot(q.to(DOT), tl.trans(k.to(DOT)), input_precision="ieee")
        else:
            qk = tl.dot(q.to(DOT), tl.trans(k.to(DOT)))
        S = qk * tl.exp(Dt - M[:, None])  # (L, L), 0 above the diagonal
        w0 = tl.exp(init - M)  # (L,)
        if IEEE:
            num = tl.dot(S.to(DOT), v.to(DOT), input_precision="ieee")
            num += w0[:, None] * tl.dot(q.to(DOT), C.to(DOT), input_precision="ieee")
        else:
            num = tl.dot(S.to(DOT), v.to(DOT))
            num += w0[:, None] * tl.dot(q.to(DOT), C.to(DOT))
        den = tl.sum(S, 1) + w0 * tl.sum(q * n[None, :], 1)
        hv = num / (tl.maximum(tl.abs(den), tl.exp(-M)) + eps)[:, None]
        tl.store(h_ptr + v_off, hv.to(h_ptr.dtype.element_ty), mask=mt[:, None] & mv[None, :])

        a = g - b + ig  # (L,): log weight of token σ in the chunk-end state (−inf for missing tokens)
        m_new = tl.maximum(g + m, tl.max(a, 0))
        fC = tl.exp(g + m - m_new)
        kw = k * tl.exp(a - m_new)[:, None]  # (L, BK)
        if IEEE:
            C = fC * C + tl.dot(tl.trans(kw.to(DOT)), v.to(DOT), input_precision="ieee")
        else:
            C = fC * C + tl.dot(tl.trans(kw.to(DOT)), v.to(DOT))
        n = fC * n + tl.sum(kw, 0)
        m = m_new

    tl.store(C_ptr + st_base + rk[:, None] * V + rv[None, :], C, mask=mk[:, None] & mv[None, :])
    if pid_v == 0:  # n and m do not depend on the value block: one program writes them
        tl.store(n_ptr + pid_bh * K + rk, n, mask=mk)
        tl.store(m_ptr + pid_bh, m)


def _forward(q, k, v, ig, phi, state, chunk, eps):
    B, T, H, K = q.shape
    V = v.shape[-1]
    dev = q.device
    h = torch.empty(B, T, H, V, device=dev, dtype=v.dtype)
    C = torch.empty(B, H, K, V, device=dev, dtype=torch.float32)
    n = torch.empty(B, H, K, device=dev, dtype=torch.float32)
    m = torch.empty(B, H, device=dev, dtype=torch.float32)
    C0, n0, m0 = (C, n, m) if state is None else state
    dt = dot_dtype(q.dtype)
    grid = lambda meta: (B * H, triton.cdiv(V, meta["BV"]))
    _mlstm_fwd_kernel[grid](q, k, v, ig, phi, C0, n0, m0, h, C, n, m, T, H, K, V, K ** -0.5, eps,
                            L=chunk, BK=next_pow2(K), HAS_STATE=state is not None, DOT=dt,
                            IEEE=dt == tl.float32)
    return h, C, n, m


class MLSTMTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, i, f, C0, n0, m0, chunk, eps, forget_gate):
        from ..ops.mlstm.common import log_forget

        state = None if C0 is None else (C0, n0, m0)
        ig = i.float().contiguous()
        phi = log_forget(f.float(), forget_gate).contiguous()
        h, C, n, m = _forward(q, k, v, ig, phi, state, chunk, eps)
        ctx.save_for_backward(q, k, v, i, f, C0, n0, m0)
        ctx.cfg = (chunk, eps, forget_gate)
        return h, C, n, m

    @staticmethod
    def backward(ctx, dh, dC, dn, dm):
        # recompute with the PyTorch chunkwise path and differentiate it (no Triton backward yet)
        from ..ops.mlstm.chunkwise import mlstm_chunkwise

        chunk, eps, forget_gate = ctx.cfg
        saved = ctx.saved_tensors
        with torch.enable_grad():
            ins = [None if t is None else t.detach().requires_grad_(ctx.needs_input_grad[j])
                   for j, t in enumerate(saved)]
            q, k, v, i, f, C0, n0, m0 = ins
            state = None if C0 is None else (C0, n0, m0)
            h, (C, n, m) = mlstm_chunkwise(q, k, v, i, f, state, chunk_size=chunk, eps=eps, forget_gate=forget_gate)
            wrt = [t for t in ins if t is not None and t.requires_grad]
            grads = torch.autograd.grad((h, C, n, m), wrt, (dh, dC, dn, dm), allow_unused=True)
        it = iter(grads)
        out = [next(it) if (t is not None and t.requires_grad) else None for t in ins]
        return (*out, None, None, None)


def mlstm_triton(q, k, v, i, f, state=None, chunk_size: int | None = None, eps: float = 1e-6,
                 forget_gate: str = "sigmoid"):
    """Same contract as ``ops.mlstm.mlstm``: ``q, k (B, T, H, K)``, ``v (B, T, H, V)``, ``i, f (B, T, H)``,
    ``state = (C, n, m)`` or None -> ``h (B, T, H, V)`` in v's dtype and the final state in fp32.

    ``chunk_size`` must be a power of two >= 16 (default 64 on the GPU, 16 under the interpreter).
    """
    from ..ops.mlstm.common import check_inputs

    check_inputs(q, k, v, i, f, state, forget_gate, eps)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float(name, t)
    chunk = chunk_size or (16 if interpreting() else 64)
    if chunk < 16 or chunk & (chunk - 1):
        raise ValueError(f"mlstm_triton: chunk_size must be a power of two >= 16, got {chunk}")
    q, k, v, i, f = (t.contiguous() for t in (q, k, v, i, f))
    C0, n0, m0 = (None, None, None) if state is None else (s.float().contiguous() for s in state)
    h, C, n, m = MLSTMTriton.apply(q, k, v, i, f, C0, n0, m0, chunk, eps, forget_gate)
    return h, (C, n, m)
