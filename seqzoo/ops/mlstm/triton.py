"""Triton chunkwise mLSTM with stabilised exponential gating, forward and backward (xLSTM, arXiv:2405.04517). Reference in the tests: ``ops.mlstm.mlstm_naive_recurrent``.

Forward. One program per (batch·head, block of BV value columns) walks the chunks of L tokens in order, keeping
the state ``C (K, BV)``, ``n (K)`` and the stabiliser ``m`` in fp32 registers (states kept on chip: the
forward never writes chunk states to memory). Per chunk, with q̃ = K^{-1/2} q,
b_τ = Σ_{j<=τ} log f_j, g = b_L and (C, n, m) the state entering the chunk:

    D̃_τσ = Σ_{σ<j<=τ} log f_j + i_σ (σ <= τ),  M_τ = max(b_τ + m, max_σ D̃_τσ),  P_τσ = e^{D̃_τσ−M_τ},  w0_τ = e^{b_τ+m−M_τ}
    num_τ = Σ_σ (q̃_τ·k_σ) P_τσ v_σ + w0_τ Cᵀq̃_τ,   den_τ = Σ_σ (q̃_τ·k_σ) P_τσ + w0_τ q̃_τ·n
    h_τ  = num_τ / N_τ,   N_τ = max(|den_τ|, e^{−M_τ}) + eps
    a_σ = g − b_σ + i_σ,  m' = max(g + m, max_σ a_σ),  C' = e^{g+m−m'} C + Σ_σ e^{a_σ−m'} k_σ v_σᵀ  (n' alike)

The segment sums in D̃ and a_σ = Σ_{j>σ} log f_j + i_σ are summed directly (a cumsum of the masked (L, L)
matrix of log f as the torch reference does, and a reverse cumsum of log f for a), not as b_τ − b_σ, which
loses |b|·2⁻²⁴ when the forget gates are strong.
The last, partial chunk is masked (i = −inf, log f = 0 for the missing tokens), which equals the reference's
shorter tail chunk, so any T works. Matmuls take bf16/fp16 operands on the GPU with fp32 accumulation.

Backward (``backward="triton"``, the default). The stabilisers M_τ, m_c are treated as constants first; the
output is invariant to them except through ``eps`` and through the final state, which is stored in stabilised
units (C_T = e^{−m_T} × the true state), and those two paths are added back at the end.

1. ``_mlstm_fwd_kernel`` with ``STATES_ONLY`` recomputes the states (C_c, n_c, m_c) entering every chunk
   (B·H·NC·K·V fp32 in memory, no h; the state gradients below take as much again). M_τ, w0_τ, den_τ are
   recomputed inside each backward kernel by the forward's own code (``_chunk_scores``): bit-identical.
2. ``_mlstm_bwd_dstate_kernel``: reverse sweep over chunks with dC (K, BV), dn (K) in fp32 registers, storing
   the gradient of the state leaving each chunk. With δ_τ = dh_τ·h_τ (torch, from the saved h),
   dnum_τ = dh_τ / N_τ and dden_τ = −sign(den_τ) [|den_τ| > e^{−M_τ}] δ_τ / N_τ:

       dC_c = e^{g+m_c−m_{c+1}} dC_{c+1} + Σ_τ w0_τ q̃_τ dnum_τᵀ,   dn_c = e^{g+m_c−m_{c+1}} dn_{c+1} + Σ_τ w0_τ dden_τ q̃_τ

   starting from the incoming dC_T, dn_T; dC_0, dn_0 are the initial-state gradients.
3. ``_mlstm_bwd_kernel``: every chunk in parallel, from the stored states and state gradients:

       dA_τσ = P_τσ (dnum_τ·v_σ + dden_τ)                                      (σ <= τ)
       dq̃_τ = Σ_σ dA_τσ k_σ + w0_τ (C_c dnum_τ + dden_τ n_c)
       dk_σ = Σ_τ dA_τσ q̃_τ + e^{a_σ−m_{c+1}} (dC_{c+1} v_σ + dn_{c+1})
       dv_σ = Σ_τ (q̃_τ·k_σ) P_τσ dnum_τ + e^{a_σ−m_{c+1}} dC_{c+1}ᵀ k_σ
       dM_τ = −δ_τ eps / N_τ                                                   (the eps path of the stabiliser)

4. Gates, in torch over (B, T, H) with global B_t = Σ_{j<=t} log f_j. At fixed stabilisers q, i and log f enter
   only through q̃_t e^{B_t}, k_s e^{i_s − B_s} and e^{B_T} (final state), so

       di_s = k_s·dk_s,   dB_t = q_t·dq_t − k_t·dk_t (+ ⟨C_T, dC_T⟩ + ⟨n_T, dn_T⟩ at t = T),
       dm_0 = ⟨C_0, dC_0⟩ + ⟨n_0, dn_0⟩.

   The stabiliser is M_t = B_t + R_t, R_t = max(m_0, max_{s<=t} (i_s − B_s)), and m_T = M_T. So dB_t += dM_t,
   and dR_t = dM_t + [t = T](dm_T − ⟨C_T, dC_T⟩ − ⟨n_T, dn_T⟩) goes to the arg-max of R_t (``torch.cummax`` in
   fp64): to m_0, or to i_s (+) and B_s (−). (At t = T the ⟨C_T, dC_T⟩ terms cancel in dB_T: net + dm_T.)
   Then dlog f_j = Σ_{t>=j} dB_t (reverse cumsum, fp64) and df = dlog f · σ(−f) (sigmoid gate) or dlog f (exp).
   This is the gradient autograd gives through the reference's max() stabilisers (ties excepted).

``backward="torch"`` instead recomputes the forward with ``ops.mlstm.mlstm_chunkwise`` under autograd and
differentiates that (kept for comparison).

Packed documents (``reset (B, T)``, ``HAS_RESET`` in every kernel): each chunk applies the rule of
``ops/mlstm/chunkwise.py`` (README.md §6), from ``_chunk_docs``: with ``seen_τ`` the starts in the chunk up to τ,
pairs of two documents are masked, b is the within-document prefix (a masked row sum, own terms only), the
entering state reaches only rows with ``seen_τ = 0`` (w0 = 0 after a start), the leaving state takes only the last
document's keys (a_σ, and the backward's e^{a_σ−m_{c+1}}, 0 before the last start), and a chunk holding a start
has C-decay 0 (also in the reverse dC/dn sweep) and restarts m from 0. Step 4 holds per document with B'_t, the
within-document cumsum of log f: R_t = max(base_t, max_{s<=t in t's document} (i_s − B'_s)) with base_t = m_0
before the first start and 0 (a new document's fresh m) after one, and dlog f_j sums dB'_t over t >= j in j's
document (``_stabiliser_routes``, ``_segment_cumsum``, ``_segment_argmax``: log-step scans that never add terms
of two documents).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ...errors import InputError, require
from ...kernels import chunk_halvings, chunk_unfit, compute_capability, note_kernel
from ...kernels._common import (
    apply,
    check_float,
    configs,
    dot_dtype,
    interpreting,
    launch,
    next_pow2,
    probe_launches,
)
from ...kernels.prune import autotune, launch_unfit
from .chunkwise import mlstm_chunkwise
from .common import check_inputs, log_forget

# Register pressure decides these lists (``seqzoo kernels check``, docs/benchmarks.md): at chunk 64 the (L, L) score
# tiles and the (L, K) q, k tiles fill 255 registers per thread with 4 warps, BV = 128 and two pipeline stages spill
# on the h-writing forward and the backward, so the lists spread the tiles over 8 and 16 warps and offer BV = 16
_CONFIGS = configs(
    [triton.Config({"BV": bv}, num_warps=nw, num_stages=1) for bv in (16, 32, 64) for nw in (4, 8, 16)]
    + [triton.Config({"BV": bv}, num_warps=8, num_stages=2) for bv in (32, 64)],
    triton.Config({"BV": 16}, num_warps=1, num_stages=1),
)
_BWD_CONFIGS = configs(
    [triton.Config({"BV": bv}, num_warps=nw, num_stages=1) for bv in (16, 32, 64) for nw in (8, 16)],
    triton.Config({"BV": 16}, num_warps=1, num_stages=1),
)


@triton.jit
def _dot(a, b, DOT: tl.constexpr, IEEE: tl.constexpr):
    """``a @ b`` with ``DOT`` operands and fp32 accumulation (``input_precision="ieee"`` for fp32 operands)."""
    if IEEE:
        r = tl.dot(a.to(DOT), b.to(DOT), input_precision="ieee")
    else:
        r = tl.dot(a.to(DOT), b.to(DOT))
    return r


@triton.jit
def _segsum(phi, L: tl.constexpr):
    """Stable segment sums of log f inside a chunk: F[τ, σ] = Σ_{σ<j<=τ} log f_j (a cumsum of the masked
    (L, L) matrix, not b_τ − b_σ, which loses |b|·2^-24 when the forget gates are strong)."""
    rl = tl.arange(0, L)
    low = tl.where(rl[:, None] > rl[None, :], phi[:, None], 0.0)  # [j, σ]: log f_j for j > σ
    return tl.cumsum(low, 0)


@triton.jit
def _suffix_sums(f_ptr, g_off, tok, T, H, L: tl.constexpr):
    """s_σ = Σ_{σ<j<=L} log f_j = g − b_σ inside the chunk, summed directly: a reverse cumsum of log f loaded
    again one token later (t + 1, 0 past the chunk or T). The column sums of ``_segsum``'s (L, L) matrix give the
    same sums, but building that tile once more after h spilled on sm_80."""
    rl = tl.arange(0, L)
    nxt = tl.load(f_ptr + g_off + H, mask=(tok + 1 < T) & (rl + 1 < L), other=0.0)
    return tl.cumsum(nxt, 0, reverse=True)


@triton.jit
def _chunk_docs(r_ptr, bi, T, tok, mt, phi, L: tl.constexpr, HAS_RESET: tl.constexpr):
    """Per chunk: ``seen (L,)`` the document starts in the chunk up to each token (r (B, T) int8), ``last`` its value
    at the chunk's end, ``b (L,)`` the log decay from the token's document start (or the chunk's start) to the
    token, and ``g`` that of the chunk's last document to the chunk's end. With resets b is a masked row sum of
    the own terms (no sum runs across a start); without, ``seen`` is a placeholder and b a plain cumsum."""
    rl = tl.arange(0, L)
    if HAS_RESET:
        seen = tl.cumsum(tl.load(r_ptr + bi * T + tok, mask=mt, other=0).to(tl.int32), 0)
        last = tl.max(seen, 0)  # missing tokens of a last partial chunk add no start
        same = (seen[:, None] == seen[None, :]) & (rl[:, None] >= rl[None, :])
        b = tl.sum(tl.where(same, phi[None, :], 0.0), 1)
        g = tl.sum(tl.where(seen == last, phi, 0.0), 0)
    else:
        seen = rl
        last = 0
        b = tl.cumsum(phi, 0)  # (L,) b_τ
        g = tl.sum(phi, 0)  # b_L
    return seen, last, b, g


@triton.jit
def _chunk_scores(
    q, k, scale, ig, phi, b, m, n, seen, L: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr, RESET: tl.constexpr
):
    """Intra-chunk quantities from q (unscaled), k, i, log f, b = cumsum(log f) and the entering (m, n):
    P (L, L), S = (q̃ kᵀ) ⊙ P with q̃ = scale·q, w0 (L), den (L), M (L). Shared by the forward and both backward
    kernels so that the backward sees bit-identical stabilisers.

    With ``RESET`` (packed documents), ``seen (L,)`` counts the document starts in the chunk up to each token and
    b is the within-document prefix: pairs of two documents are masked, and the entering state reaches only the
    rows before the first start (``seen == 0``); the other rows see a new document's fresh state (m = 0, weight 0),
    as ``ops/mlstm/chunkwise.py`` does.

    q enters the dot as loaded (exact in a 16-bit DOT) and the scale multiplies the fp32 result: q̃ rounded to
    16 bits (1/√128 is no power of two) put a relative 2^-9 error into every score, which cancelling scores in
    den amplified ~300× at the GPU test's shape (bf16 h off by 20 % of max |h|)."""
    rl = tl.arange(0, L)
    Fm = _segsum(phi, L)
    keep = rl[:, None] >= rl[None, :]
    if RESET:
        keep = keep & (seen[:, None] == seen[None, :])
        init = b + tl.where(seen == 0, m, 0.0)  # (L,)
    else:
        init = b + m  # (L,)
    Dt = tl.where(keep, Fm + ig[None, :], float("-inf"))  # (L, L) D̃
    M = tl.maximum(tl.max(Dt, 1), init)  # (L,)
    P = tl.exp(Dt - M[:, None])  # (L, L), 0 above the diagonal
    S = _dot(q, tl.trans(k), DOT, IEEE) * (P * scale)
    w0 = tl.exp(init - M)  # (L,)
    if RESET:
        w0 = tl.where(seen == 0, w0, 0.0)
    den = tl.sum(S, 1) + w0 * scale * tl.sum(q * n[None, :], 1)
    return P, S, w0, den, M


@autotune(configs=_CONFIGS, key=["K", "V", "L", "HAS_STATE", "STATES_ONLY", "HAS_RESET"])
@triton.jit
def _mlstm_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    i_ptr,
    f_ptr,
    r_ptr,
    C0_ptr,
    n0_ptr,
    m0_ptr,
    h_ptr,
    C_ptr,
    n_ptr,
    m_ptr,
    Cc_ptr,
    nc_ptr,
    mc_ptr,
    T,
    H,
    K,
    V,
    scale,
    eps,
    L: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    HAS_STATE: tl.constexpr,
    STATES_ONLY: tl.constexpr,
    HAS_RESET: tl.constexpr,
    DOT: tl.constexpr,
    IEEE: tl.constexpr,
):
    # STATES_ONLY (backward's recompute): skip h; store the state entering every chunk into Cc (B·H, NC, K, V),
    # nc (B·H, NC, K), mc (B·H, NC + 1) (mc[NC] = final m). HAS_RESET: r (B, T) int8, 1 where a document starts
    # (the rule of ops/mlstm/chunkwise.py: masked pairs, within-document sums, decay 0 across a start)
    pid_bh = tl.program_id(0).to(tl.int64)
    pid_v = tl.program_id(1)
    bi = pid_bh // H
    hi = pid_bh % H
    rk = tl.arange(0, BK)
    rv = pid_v * BV + tl.arange(0, BV)
    rl = tl.arange(0, L)
    mk = rk < K
    mv = rv < V
    NC = tl.cdiv(T, L)

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
        if STATES_ONLY:
            cc = pid_bh * NC + c0 // L
            tl.store(Cc_ptr + cc * K * V + rk[:, None] * V + rv[None, :], C, mask=mk[:, None] & mv[None, :])
            if pid_v == 0:
                tl.store(nc_ptr + cc * K + rk, n, mask=mk)
                tl.store(mc_ptr + pid_bh * (NC + 1) + c0 // L, m)
        qk_off = (bi * T + tok[:, None]) * (H * K) + hi * K + rk[None, :]  # (L, BK) into (B, T, H, K)
        k = tl.load(k_ptr + qk_off, mask=mt[:, None] & mk[None, :], other=0.0).to(tl.float32)
        v_off = (bi * T + tok[:, None]) * (H * V) + hi * V + rv[None, :]  # (L, BV) into (B, T, H, V)
        v = tl.load(v_ptr + v_off, mask=mt[:, None] & mv[None, :], other=0.0)
        g_off = (bi * T + tok) * H + hi  # (L,) into (B, T, H)
        ig = tl.load(i_ptr + g_off, mask=mt, other=float("-inf"))
        phi = tl.load(f_ptr + g_off, mask=mt, other=0.0)

        seen, last, b, g = _chunk_docs(r_ptr, bi, T, tok, mt, phi, L, HAS_RESET)
        if not STATES_ONLY:
            q = tl.load(q_ptr + qk_off, mask=mt[:, None] & mk[None, :], other=0.0).to(tl.float32)
            _, S, w0, den, M = _chunk_scores(q, k, scale, ig, phi, b, m, n, seen, L, DOT, IEEE, HAS_RESET)
            num = _dot(S, v, DOT, IEEE) + (w0 * scale)[:, None] * _dot(q, C, DOT, IEEE)
            hv = num / (tl.maximum(tl.abs(den), tl.exp(-M)) + eps)[:, None]
            tl.store(h_ptr + v_off, hv.to(h_ptr.dtype.element_ty), mask=mt[:, None] & mv[None, :])

        suf = _suffix_sums(f_ptr, g_off, tok, T, H, L)
        a = suf + ig  # (L,) g − b_σ + i_σ: log weight of token σ in the chunk-end state (−inf for missing tokens)
        if HAS_RESET:  # only the last document's keys; a chunk holding a start drops C and restarts m from 0
            a = tl.where(seen == last, a, float("-inf"))
            m = tl.where(last > 0, 0.0, m)
        m_new = tl.maximum(g + m, tl.max(a, 0))
        fC = tl.exp(g + m - m_new)
        if HAS_RESET:
            fC = tl.where(last > 0, 0.0, fC)
        kw = k * tl.exp(a - m_new)[:, None]  # (L, BK)
        C = fC * C + _dot(tl.trans(kw), v, DOT, IEEE)
        n = fC * n + tl.sum(kw, 0)
        m = m_new

    tl.store(C_ptr + st_base + rk[:, None] * V + rv[None, :], C, mask=mk[:, None] & mv[None, :])
    if pid_v == 0:  # n and m do not depend on the value block: one program writes them
        tl.store(n_ptr + pid_bh * K + rk, n, mask=mk)
        tl.store(m_ptr + pid_bh, m)
        if STATES_ONLY:
            tl.store(mc_ptr + pid_bh * (NC + 1) + NC, m)


@triton.jit
def _dnum_dden(den, M, delta, eps):
    """1 / N_τ and ∂loss/∂den_τ at fixed M (δ_τ = dh_τ·h_τ); dnum_τ = dh_τ / N_τ."""
    lb = tl.exp(-M)
    inv = 1.0 / (tl.maximum(tl.abs(den), lb) + eps)
    sgn = tl.where(den > 0, 1.0, tl.where(den < 0, -1.0, 0.0))
    dden = tl.where(tl.abs(den) > lb, -sgn * delta * inv, 0.0)
    return inv, dden


@autotune(configs=_BWD_CONFIGS, key=["K", "V", "L", "HAS_RESET"])
@triton.jit
def _mlstm_bwd_dstate_kernel(
    q_ptr,
    k_ptr,
    i_ptr,
    f_ptr,
    r_ptr,
    dh_ptr,
    delta_ptr,
    nc_ptr,
    mc_ptr,
    dCT_ptr,
    dnT_ptr,
    dCc_ptr,
    dnc_ptr,
    dC0_ptr,
    dn0_ptr,
    T,
    H,
    K,
    V,
    scale,
    eps,
    L: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    HAS_RESET: tl.constexpr,
    DOT: tl.constexpr,
    IEEE: tl.constexpr,
):
    """Reverse sweep: dCc[c], dnc[c] = ∂loss/∂(state leaving chunk c);
    dC_c = e^{g+m_c−m_{c+1}} dC_{c+1} + Σ_τ w0_τ q̃_τ dnum_τᵀ,  dn_c = e^{g+m_c−m_{c+1}} dn_{c+1} + Σ_τ w0_τ dden_τ q̃_τ.
    With resets a chunk holding a start passes nothing back (its decay is 0) and w0 is 0 after its first start."""
    pid_bh = tl.program_id(0).to(tl.int64)
    pid_v = tl.program_id(1)
    bi = pid_bh // H
    hi = pid_bh % H
    rk = tl.arange(0, BK)
    rv = pid_v * BV + tl.arange(0, BV)
    rl = tl.arange(0, L)
    mk = rk < K
    mv = rv < V
    sm = mk[:, None] & mv[None, :]
    st = rk[:, None] * V + rv[None, :]  # (BK, BV) within one (K, V) state
    dC = tl.load(dCT_ptr + pid_bh * K * V + st, mask=sm, other=0.0)
    dn = tl.load(dnT_ptr + pid_bh * K + rk, mask=mk, other=0.0)
    NC = tl.cdiv(T, L)
    for j in range(NC):
        c = NC - 1 - j
        cc = pid_bh * NC + c
        tl.store(dCc_ptr + cc * K * V + st, dC, mask=sm)
        if pid_v == 0:
            tl.store(dnc_ptr + cc * K + rk, dn, mask=mk)
        tok = c * L + rl
        mt = tok < T
        km = mt[:, None] & mk[None, :]
        qk_off = (bi * T + tok[:, None]) * (H * K) + hi * K + rk[None, :]
        q = tl.load(q_ptr + qk_off, mask=km, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + qk_off, mask=km, other=0.0).to(tl.float32)
        g_off = (bi * T + tok) * H + hi
        ig = tl.load(i_ptr + g_off, mask=mt, other=float("-inf"))
        phi = tl.load(f_ptr + g_off, mask=mt, other=0.0)
        delta = tl.load(delta_ptr + g_off, mask=mt, other=0.0)
        m = tl.load(mc_ptr + pid_bh * (NC + 1) + c)
        m_next = tl.load(mc_ptr + pid_bh * (NC + 1) + c + 1)
        n = tl.load(nc_ptr + cc * K + rk, mask=mk, other=0.0)
        seen, last, b, g = _chunk_docs(r_ptr, bi, T, tok, mt, phi, L, HAS_RESET)
        _, _, w0, den, M = _chunk_scores(q, k, scale, ig, phi, b, m, n, seen, L, DOT, IEEE, HAS_RESET)
        inv, dden = _dnum_dden(den, M, delta, eps)
        dh = tl.load(
            dh_ptr + (bi * T + tok[:, None]) * (H * V) + hi * V + rv[None, :], mask=mt[:, None] & mv[None, :], other=0.0
        ).to(tl.float32)
        qw = q * (w0 * scale)[:, None]  # (L, BK) w0 q̃
        if HAS_RESET:  # as the forward: the stabiliser restarts from 0 and the carried state is dropped
            fC = tl.where(last > 0, 0.0, tl.exp(g + tl.where(last > 0, 0.0, m) - m_next))
        else:
            fC = tl.exp(g + m - m_next)
        dC = fC * dC + _dot(tl.trans(qw), dh * inv[:, None], DOT, IEEE)
        dn = fC * dn + tl.sum(qw * dden[:, None], 0)
    tl.store(dC0_ptr + pid_bh * K * V + st, dC, mask=sm)
    if pid_v == 0:
        tl.store(dn0_ptr + pid_bh * K + rk, dn, mask=mk)


@autotune(configs=_BWD_CONFIGS, key=["K", "V", "L", "HAS_RESET"])
@triton.jit
def _mlstm_bwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    i_ptr,
    f_ptr,
    r_ptr,
    dh_ptr,
    delta_ptr,
    Cc_ptr,
    nc_ptr,
    mc_ptr,
    dCc_ptr,
    dnc_ptr,
    dq_ptr,
    dk_ptr,
    dv_ptr,
    dM_ptr,
    T,
    H,
    K,
    V,
    scale,
    eps,
    L: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    HAS_RESET: tl.constexpr,
    DOT: tl.constexpr,
    IEEE: tl.constexpr,
):
    """One program per (chunk, batch·head): dq, dk (fp32), dv and the eps-path stabiliser gradient dM of the chunk
    from the stored entering states (C_c, n_c, m_c) and the gradients of the leaving state (dC_{c+1}, dn_{c+1})."""
    c = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    bi = pid_bh // H
    hi = pid_bh % H
    NC = tl.cdiv(T, L)
    cc = pid_bh * NC + c
    rk = tl.arange(0, BK)
    rvb = tl.arange(0, BV)
    rl = tl.arange(0, L)
    mk = rk < K
    tok = c * L + rl
    mt = tok < T
    km = mt[:, None] & mk[None, :]
    qk_off = (bi * T + tok[:, None]) * (H * K) + hi * K + rk[None, :]  # (L, BK)
    vrow = (bi * T + tok[:, None]) * (H * V) + hi * V  # (L, 1)
    g_off = (bi * T + tok) * H + hi  # (L,)

    q = tl.load(q_ptr + qk_off, mask=km, other=0.0).to(tl.float32)  # unscaled (``_chunk_scores``)
    k = tl.load(k_ptr + qk_off, mask=km, other=0.0).to(tl.float32)
    ig = tl.load(i_ptr + g_off, mask=mt, other=float("-inf"))
    phi = tl.load(f_ptr + g_off, mask=mt, other=0.0)
    delta = tl.load(delta_ptr + g_off, mask=mt, other=0.0)
    m = tl.load(mc_ptr + pid_bh * (NC + 1) + c)
    m_next = tl.load(mc_ptr + pid_bh * (NC + 1) + c + 1)
    n = tl.load(nc_ptr + cc * K + rk, mask=mk, other=0.0)
    dn_next = tl.load(dnc_ptr + cc * K + rk, mask=mk, other=0.0)
    seen, last, b, _ = _chunk_docs(r_ptr, bi, T, tok, mt, phi, L, HAS_RESET)
    P, S, w0, den, M = _chunk_scores(q, k, scale, ig, phi, b, m, n, seen, L, DOT, IEEE, HAS_RESET)
    inv, dden = _dnum_dden(den, M, delta, eps)
    suf = _suffix_sums(f_ptr, g_off, tok, T, H, L)
    ka = tl.exp(suf + ig - m_next)  # (L,) weight of k_σ v_σᵀ in the leaving state (0 for missing tokens)
    if HAS_RESET:  # only the chunk's last document reaches the leaving state
        ka = tl.where(seen == last, ka, 0.0)

    dA = tl.zeros([L, L], dtype=tl.float32)  # Σ_v dnum_τv v_σv
    dqi = tl.zeros([L, BK], dtype=tl.float32)  # C_c dnum_τ
    dki = tl.zeros([L, BK], dtype=tl.float32)  # dC_{c+1} v_σ
    for v0 in range(0, V, BV):
        rv = v0 + rvb
        mv = rv < V
        vm = mt[:, None] & mv[None, :]
        soff = cc * K * V + rk[:, None] * V + rv[None, :]  # (BK, BV)
        sm = mk[:, None] & mv[None, :]
        vv = tl.load(v_ptr + vrow + rv[None, :], mask=vm, other=0.0).to(tl.float32)  # (L, BV)
        dnum = tl.load(dh_ptr + vrow + rv[None, :], mask=vm, other=0.0).to(tl.float32) * inv[:, None]
        Cp = tl.load(Cc_ptr + soff, mask=sm, other=0.0)  # state entering the chunk
        dCn = tl.load(dCc_ptr + soff, mask=sm, other=0.0)  # gradient of the state leaving it
        dA += _dot(dnum, tl.trans(vv), DOT, IEEE)
        dqi += _dot(dnum, tl.trans(Cp), DOT, IEEE)
        dki += _dot(vv, tl.trans(dCn), DOT, IEEE)
        dv = _dot(tl.trans(S), dnum, DOT, IEEE) + ka[:, None] * _dot(k, dCn, DOT, IEEE)
        tl.store(dv_ptr + vrow + rv[None, :], dv.to(dv_ptr.dtype.element_ty), mask=vm)

    dA = P * (dA + dden[:, None])  # (L, L), 0 above the diagonal
    dq = _dot(dA, k, DOT, IEEE) + w0[:, None] * (dqi + dden[:, None] * n[None, :])
    dk = _dot(tl.trans(dA), q, DOT, IEEE) * scale + ka[:, None] * (dki + dn_next[None, :])
    tl.store(dq_ptr + qk_off, dq * scale, mask=km)
    tl.store(dk_ptr + qk_off, dk, mask=km)
    tl.store(dM_ptr + g_off, -delta * eps * inv, mask=mt)


def _launch_fwd(q, k, v, ig, phi, state, chunk, eps, states_only, reset=None):
    B, T, H, K = q.shape
    V = v.shape[-1]
    dev = q.device
    NC = triton.cdiv(T, chunk)
    C = torch.empty(B, H, K, V, device=dev, dtype=torch.float32)
    n = torch.empty(B, H, K, device=dev, dtype=torch.float32)
    m = torch.empty(B, H, device=dev, dtype=torch.float32)
    if states_only:
        h = C  # not written
        Cc = torch.empty(B * H, NC, K, V, device=dev, dtype=torch.float32)
        nc = torch.empty(B * H, NC, K, device=dev, dtype=torch.float32)
        mc = torch.empty(B * H, NC + 1, device=dev, dtype=torch.float32)
    else:
        h = torch.empty(B, T, H, V, device=dev, dtype=v.dtype)
        Cc, nc, mc = C, n, m  # not written
    C0, n0, m0 = (C, n, m) if state is None else state
    dt = dot_dtype(q.dtype)
    grid = lambda meta: (B * H, triton.cdiv(V, meta["BV"]))
    launch(
        _mlstm_fwd_kernel,
        grid,
        q,
        k,
        v,
        ig,
        phi,
        ig if reset is None else reset,  # not read without resets
        C0,
        n0,
        m0,
        h,
        C,
        n,
        m,
        Cc,
        nc,
        mc,
        T,
        H,
        K,
        V,
        K**-0.5,
        eps,
        L=chunk,
        BK=next_pow2(K),
        HAS_STATE=state is not None,
        STATES_ONLY=states_only,
        HAS_RESET=reset is not None,
        DOT=dt,
        IEEE=dt == tl.float32,
    )
    return (C, n, m, Cc, nc, mc) if states_only else (h, C, n, m)


def _forward(q, k, v, ig, phi, state, chunk, eps, reset=None):
    return _launch_fwd(q, k, v, ig, phi, state, chunk, eps, states_only=False, reset=reset)


def _backward(q, k, v, ig, phi, f, state, h, dh, dCT, dnT, dmT, chunk, eps, forget_gate, reset=None):
    """Triton backward (module docstring, steps 1-4). ``ig, phi`` fp32 (B, T, H), ``reset`` (B, T) int8 or None;
    returns fp32 dq, dk, di, df, dC0, dn0, dm0 and dv in v's dtype (the state gradients are None without a state)."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    dev = q.device
    BK = next_pow2(K)
    dt = dot_dtype(q.dtype)
    ieee = dt == tl.float32
    scale = K**-0.5
    NC = triton.cdiv(T, chunk)
    CT, nT, mT, Cc, nc, mc = _launch_fwd(q, k, v, ig, phi, state, chunk, eps, states_only=True, reset=reset)
    r8 = ig if reset is None else reset  # not read without resets

    dh = dh.contiguous()
    delta = (dh.float() * h.float()).sum(-1).contiguous()  # (B, T, H) δ_τ = dh_τ·h_τ
    dCT = torch.zeros_like(CT) if dCT is None else dCT.float().contiguous()
    dnT = torch.zeros_like(nT) if dnT is None else dnT.float().contiguous()
    dCc = torch.empty_like(Cc)
    dnc = torch.empty_like(nc)
    dC0 = torch.empty_like(CT)
    dn0 = torch.empty_like(nT)
    grid = lambda meta: (B * H, triton.cdiv(V, meta["BV"]))
    launch(
        _mlstm_bwd_dstate_kernel,
        grid,
        q,
        k,
        ig,
        phi,
        r8,
        dh,
        delta,
        nc,
        mc,
        dCT,
        dnT,
        dCc,
        dnc,
        dC0,
        dn0,
        T,
        H,
        K,
        V,
        scale,
        eps,
        L=chunk,
        BK=BK,
        HAS_RESET=reset is not None,
        DOT=dt,
        IEEE=ieee,
    )
    dq = torch.empty(B, T, H, K, device=dev, dtype=torch.float32)
    dk = torch.empty_like(dq)
    dv = torch.empty_like(v)
    dM = torch.empty(B, T, H, device=dev, dtype=torch.float32)
    launch(
        _mlstm_bwd_kernel,
        (NC, B * H),
        q,
        k,
        v,
        ig,
        phi,
        r8,
        dh,
        delta,
        Cc,
        nc,
        mc,
        dCc,
        dnc,
        dq,
        dk,
        dv,
        dM,
        T,
        H,
        K,
        V,
        scale,
        eps,
        L=chunk,
        BK=BK,
        HAS_RESET=reset is not None,
        DOT=dt,
        IEEE=ieee,
    )

    # gates (docstring step 4): at fixed stabilisers, then the arg-max route of M_t = B_t + R_t
    di = (k.float() * dk).sum(-1)  # (B, T, H)
    dB = (q.float() * dq).sum(-1) - di + dM
    dR = dM.clone()
    dm_T = torch.zeros_like(mT) if dmT is None else dmT.float()
    dB[:, -1] += dm_T
    dR[:, -1] += dm_T - (CT * dCT).sum((-2, -1)) - (nT * dnT).sum(-1)
    m0 = torch.zeros(B, H, device=dev, dtype=torch.float64) if state is None else state[2].double()
    if reset is None:
        Bg = phi.double().cumsum(1)  # (B, T, H) global cumsum of log f
        cand = torch.cat([m0[:, None], ig.double() - Bg], 1)  # (B, T + 1, H): index 0 = m_0, s + 1 = token s
        src = torch.zeros(B, T + 1, H, device=dev, dtype=torch.float32)
        src.scatter_add_(1, cand.cummax(1).indices[:, 1:], dR)
        to_tokens, to_m0 = src[:, 1:], src[:, 0]
    else:
        doc = reset.long().cumsum(1)[..., None]  # (B, T, 1) document index
        to_tokens, to_m0 = _stabiliser_routes(ig, phi, m0, dR, doc)
    di += to_tokens
    dB -= to_tokens
    if reset is None:
        dphi = dB.double().flip(1).cumsum(1).flip(1).float()  # dlog f_j = Σ_{t>=j} dB_t
    else:  # dlog f_j = Σ over t >= j in j's document (B_t holds log f_j only there)
        dphi = _segment_cumsum(dB.double().flip(1), doc.flip(1)).flip(1).float()
    df = dphi * torch.sigmoid(-f.float()) if forget_gate == "sigmoid" else dphi
    if state is None:
        return dq, dk, dv, di, df, None, None, None
    C0, n0, _ = state
    dm0 = (C0 * dC0).sum((-2, -1)) + (n0 * dn0).sum(-1) + to_m0
    return dq, dk, dv, di, df, dC0, dn0, dm0


def _segment_cumsum(x: torch.Tensor, doc: torch.Tensor) -> torch.Tensor:
    """``x (B, T, H)``, ``doc (B, T, 1)`` labels constant on contiguous documents -> Σ_{l<=t, doc_l = doc_t} x_l.
    A log-step scan that only ever adds terms of one document (never a difference of sums across a start)."""
    out, shift = x, 1
    while shift < x.shape[1]:
        same = doc[:, shift:] == doc[:, :-shift]
        out = torch.cat([out[:, :shift], out[:, shift:] + torch.where(same, out[:, :-shift], 0.0)], 1)
        shift *= 2
    return out


def _segment_argmax(x: torch.Tensor, doc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The running maximum of ``x (B, T, H)`` inside each document (``doc`` as ``_segment_cumsum``) and where it is
    (the latest index on ties, as ``torch.cummax``), by the same log-step scan."""
    val, idx, shift = x, torch.arange(x.shape[1], device=x.device)[None, :, None].expand_as(x), 1
    while shift < x.shape[1]:
        take = (doc[:, shift:] == doc[:, :-shift]) & (val[:, :-shift] > val[:, shift:])
        val = torch.cat([val[:, :shift], torch.where(take, val[:, :-shift], val[:, shift:])], 1)
        idx = torch.cat([idx[:, :shift], torch.where(take, idx[:, :-shift], idx[:, shift:])], 1)
        shift *= 2
    return val, idx


def _stabiliser_routes(ig, phi, m0, dR, doc):
    """Step 4 with packed documents: R_t = max(base_t, max_{s<=t in t's document} (i_s - B'_s)), B' the
    within-document cumsum of log f, base_t = m_0 before the first start and 0 (a new document's fresh m) after
    one. Returns dR routed to the arg-max tokens (B, T, H) and to m_0 (B, H)."""
    best, at = _segment_argmax(ig.double() - _segment_cumsum(phi.double(), doc), doc)
    base = torch.where(doc == 0, m0[:, None], 0.0)
    token = best >= base  # ties go to the token, as cummax's latest index in the plain route
    to_tokens = torch.zeros_like(dR).scatter_add_(1, at, torch.where(token, dR, 0.0))
    to_m0 = torch.where(token | (doc != 0), 0.0, dR).sum(1)
    return to_tokens, to_m0


class MLSTMTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, i, f, C0, n0, m0, chunk, eps, forget_gate, backward_impl, reset=None):
        state = None if C0 is None else (C0, n0, m0)
        ig = i.float().contiguous()
        phi = log_forget(f.float(), forget_gate).contiguous()
        r8 = None if reset is None else reset.to(torch.int8).contiguous()
        h, C, n, m = _forward(q, k, v, ig, phi, state, chunk, eps, r8)
        ctx.reset, ctx.r8 = reset, r8  # the backward takes the same starts
        if backward_impl == "triton":
            ctx.save_for_backward(q, k, v, i, f, C0, n0, m0, ig, phi, h)
        else:
            ctx.save_for_backward(q, k, v, i, f, C0, n0, m0)
        ctx.cfg = (chunk, eps, forget_gate, backward_impl)
        return h, C, n, m

    @staticmethod
    def backward(ctx, dh, dC, dn, dm):
        chunk, eps, forget_gate, backward_impl = ctx.cfg
        if backward_impl == "triton":
            q, k, v, i, f, C0, n0, m0, ig, phi, h = ctx.saved_tensors
            state = None if C0 is None else (C0, n0, m0)
            grads = _backward(q, k, v, ig, phi, f, state, h, dh, dC, dn, dm, chunk, eps, forget_gate, ctx.r8)
            ins = (q, k, v, i, f, C0, n0, m0)
            out = [
                None if (gr is None or not ctx.needs_input_grad[j]) else gr.to(ins[j].dtype)
                for j, gr in enumerate(grads)
            ]
            return (*out, None, None, None, None, None)
        # "torch": recompute with the PyTorch chunkwise path and differentiate it

        saved = ctx.saved_tensors
        with torch.enable_grad():
            ins = [
                None if t is None else t.detach().requires_grad_(ctx.needs_input_grad[j]) for j, t in enumerate(saved)
            ]
            q, k, v, i, f, C0, n0, m0 = ins
            state = None if C0 is None else (C0, n0, m0)
            h, (C, n, m) = mlstm_chunkwise(
                q, k, v, i, f, state, chunk_size=chunk, eps=eps, forget_gate=forget_gate, reset=ctx.reset
            )
            wrt = [t for t in ins if t is not None and t.requires_grad]
            grads = torch.autograd.grad((h, C, n, m), wrt, (dh, dC, dn, dm), allow_unused=True)
        it = iter(grads)
        out = [next(it) if (t is not None and t.requires_grad) else None for t in ins]
        return (*out, None, None, None, None, None)


def mlstm_triton(
    q,
    k,
    v,
    i,
    f,
    state=None,
    chunk_size: int | None = None,
    eps: float = 1e-6,
    forget_gate: str = "sigmoid",
    backward: str = "triton",
    reset=None,
):
    """Same contract as ``ops.mlstm.mlstm``: ``q, k (B, T, H, K)``, ``v (B, T, H, V)``, ``i, f (B, T, H)``,
    ``state = (C, n, m)`` or None, ``reset (B, T)`` bool or None (packed document starts) -> ``h (B, T, H, V)`` in
    v's dtype and the final state in fp32.

    ``chunk_size`` must be a power of two >= 16 (default 64 on the GPU, 16 under the interpreter); on a GPU where
    the kernels spill at that chunk length they run shorter tiles (``kernel_tile``, logged once).
    ``backward``: ``"triton"`` (the kernels above, default) or ``"torch"`` (recompute with
    ``ops.mlstm.mlstm_chunkwise`` under autograd). Gradients flow to q, k, v, i, f and the initial state
    (C, n, m); the final m may also carry a gradient.
    """

    if backward not in ("triton", "torch"):
        raise InputError(f"mlstm_triton: backward must be 'triton' or 'torch', got {backward!r}")
    check_inputs(q, k, v, i, f, state, forget_gate, eps, reset)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_float(name, t)
    chunk = chunk_size or (16 if interpreting() else 64)
    unfit = chunk_unfit(chunk)
    require(unfit is None, f"mlstm_triton: {unfit}")
    tile, _ = kernel_tile(q, k, v, chunk, state, reset=reset)
    if compute_capability(q) is not None:  # on a GPU the autotuner would build every config before refusing
        wide = qk_head_unfit(q.shape[-1])
        require(wide is None, f"mlstm_triton: q: {wide}; use mode='chunkwise'")
    if tile is not None and tile < chunk:  # logged once: a kernel spills at the chunk length on this GPU
        note_kernel("mlstm", f"triton (tiles of {tile} tokens for chunk {chunk})", q.device)
    return _run(q, k, v, i, f, state, tile or chunk, eps, forget_gate, backward, reset)


def _run(q, k, v, i, f, state, tile, eps, forget_gate, backward, reset=None):
    """The kernels with token tiles of ``tile`` (``kernel_tile``'s choice; the shape probe calls this directly)."""
    q, k, v, i, f = (t.contiguous() for t in (q, k, v, i, f))
    C0, n0, m0 = (None, None, None) if state is None else (s.float().contiguous() for s in state)
    h, C, n, m = apply(MLSTMTriton, q, k, v, i, f, C0, n0, m0, tile, eps, forget_gate, backward, reset)
    return h, (C, n, m)


# The kernels hold a whole qk head in registers: q, k tiles of (L, BK) and the state (BK, BV), BK = next_pow2(K).
# At BK = 256 ptxas builds a config in 3-6 s; at BK = 512 (``seqzoo kernels check``, 228 builds before this limit:
# docs/benchmarks.md) the h-writing forward and both backward kernels spilled in every config built, and one
# build took ptxas 87 minutes on one core. The autotune hook builds every config on the user's GPU before choosing,
# so wider heads are refused from their size, before anything is compiled.
MAX_QK_TILE = 256


def qk_head_unfit(K: int) -> str | None:
    """Why the mLSTM kernels do not take a qk head dim ``K`` on any GPU (None when they may): its register tile
    ``next_pow2(K)`` is wider than ``MAX_QK_TILE``. Decided from the size alone, before anything is compiled."""
    if next_pow2(K) <= MAX_QK_TILE:
        return None
    return (
        f"qk head dim K={K} needs a {next_pow2(K)}-wide register tile; the mLSTM kernels take K <= {MAX_QK_TILE} "
        "(at a 512-wide tile the forward and backward spill in every config and one config can take ptxas over an "
        "hour)"
    )


def kernel_tile(
    q, k, v, chunk_size: int, state=None, cc: int | None = None, reset=None
) -> tuple[int | None, str | None]:
    """The token tile the kernels run for chunks of ``chunk_size``, and why not the chunk itself.

    The chunkwise mLSTM computes the same function at every chunk length (the stabiliser entering a chunk is the
    running maximum over all earlier tokens, so only rounding changes). On a GPU where some kernel the call
    launches (the forward, and the three backward kernels when q, k or v require grad) has no autotune config
    that fits without spilling at ``chunk_size`` (``kernels/prune.py: launch_unfit``; e.g. head dim 64, chunk 64
    on sm_80: the (L, L) score tiles spill), the kernels run the longest halving of it (>= 16) at which all of
    them fit: ``(tile, None)``. ``(None, why)`` when none does (e.g. head dim 256 in training). Off CUDA without ``cc``
    (compute capability; default q's device) the interpreter has no such limits: ``(chunk_size, None)``. A qk head
    wider than ``MAX_QK_TILE`` is ``(None, why)`` on any GPU without compiling (``qk_head_unfit``). With ``reset``
    the kernels' ``HAS_RESET`` variants are probed (their document masks take registers of their own)."""
    cc = compute_capability(q, cc)
    if cc is None:
        return chunk_size, None
    wide = qk_head_unfit(q.shape[-1])
    if wide is not None:
        return None, wide
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    first = None
    for tile in chunk_halvings(chunk_size):
        why = _shape_unfit(
            q.shape[-1], v.shape[-1], tile, q.dtype, state is not None, grad, cc, q.device, reset is not None
        )
        if why is None:
            return tile, None
        first = first or why
    return None, first


def shape_unfit(q, k, v, chunk_size: int, state=None, cc: int | None = None, reset=None) -> str | None:
    """Why ``mlstm_triton`` cannot serve inputs like these on the GPU at any tile (``kernel_tile``): None when it
    can, and off CUDA without ``cc``. Asked by the dispatch (``ops/mlstm/__init__.py:
    _triton_unfit``) before anything is launched."""
    return kernel_tile(q, k, v, chunk_size, state, cc, reset)[1]


@functools.cache
def _shape_unfit(K, V, chunk, dtype, has_state, grad, cc, device, has_reset=False) -> str | None:
    def run():  # the real entry point on one head of one chunk: same kernels, constexprs and autotune keys
        with torch.enable_grad() if grad else torch.no_grad():
            q, k = (torch.zeros(1, chunk, 1, K, dtype=dtype, device=device, requires_grad=grad) for _ in range(2))
            v = torch.zeros(1, chunk, 1, V, dtype=dtype, device=device, requires_grad=grad)
            i, f = (torch.zeros(1, chunk, 1, device=device) for _ in range(2))
            z = (torch.zeros(1, 1, K, V, device=device), torch.zeros(1, 1, K, device=device), torch.zeros(1, 1))
            st = tuple(t.to(device) for t in z) if has_state else None
            r = torch.zeros(1, chunk, dtype=torch.bool, device=device) if has_reset else None
            _run(q, k, v, i, f, st, chunk, 1e-6, "sigmoid", "triton", r)  # with grad, ``apply`` runs the backward too

    for kernel, args, kwargs in probe_launches(run):
        why = launch_unfit(kernel, args, kwargs, cc)
        if why is not None:
            return f"head dims K={K}, V={V}, chunk {chunk}, {str(dtype).removeprefix('torch.')}: {why}"
    return None
