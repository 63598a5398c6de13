"""Triton chunked gated linear attention with per-dimension real decays (GateLoop's magnitude case).

    S_t = diag(a_t) S_{t-1} + k_t v_tᵀ,   y_t = q_tᵀ S_t,   a_t = exp(log_a_t),  log_a_t <= 0   (per key dim)

GateLoop (arXiv:2311.01927) with real transitions (phase = 0) is exactly this; GLA is the same with y scaled.
One program per (batch·head, block of BV value columns) walks the chunks of L tokens in order with the state
S (K, BV) in fp32 registers (chunk states never go to memory). Per chunk, with b_τ = Σ_{j<=τ} log_a_j per dim
and g = b_L:

    y_τ = (q_τ ⊙ e^{b_τ})ᵀ S + Σ_{σ<=τ} [Σ_d q_τd k_σd e^{b_τd − b_σd}] v_σ,   S' = e^{g} ⊙ S + (k ⊙ e^{g − b})ᵀ V

Every exponent is <= 0 (masked above the diagonal before the exp), so nothing overflows however strong the
decay: the intra-chunk scores are a (L, L, BKI) broadcast-and-reduce on CUDA cores in K sub-blocks of BKI
(no e^{+b} / e^{−b} factorisation into one matmul, which overflows for strong decays); the inter-chunk terms
and the state update are ``tl.dot`` with fp32 accumulation. Missing tokens of the last chunk are masked
(q = k = v = 0, log_a = 0), so any T works.

Packed documents (``starts``, True where a document starts; log_a is set to 0 there): with document ids
doc = cumsum(starts) inside each tile, the intra-chunk scores keep the pairs of one document, the incoming state
reaches the tokens before the tile's first start (doc = 0), the state update takes the keys after its last start
(doc = the tile's count) and the decay e^{g} is 0 for a tile that holds a start; the backward kernels use the same
masks, and dlog_a's identity below holds unchanged (the masks are constants, every term still a function of b).

Complex GateLoop transitions run the same kernel on phase-rotated q, k of width 2K (``gateloop_triton``).
Backward (``backward="triton"``, the default; ``_backward``): the chunk states are recomputed, a reverse sweep gives
the state gradients, then every chunk computes dq, dk, dv in parallel; ``backward="torch"`` recomputes with
``ops.gateloop.gateloop_chunkwise`` under autograd. Reference in the tests: ``ops.gateloop.gateloop_naive``.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from ...errors import InputError, require
from ...kernels import chunk_unfit, compute_capability
from ...kernels._common import apply, check_float, configs, dot_dtype, launch, next_pow2, probe_launches
from ...kernels.prune import autotune, launch_unfit
from .chunkwise import gateloop_chunkwise

# Intra-chunk tile of the kernels: the (L, L, BKI) broadcast holds L²·BKI fp32 values per program, which spills
# 11-13 KB of registers in every config at L = 64 (``seqzoo kernels check``). A larger ``chunk_size`` would only
# group the state updates (same FLOPs, same result up to rounding), so the kernels run tiles of min(chunk_size, 16).
TILE = 16

_CONFIGS = configs(
    [
        triton.Config({"BV": bv, "BKI": bki}, num_warps=nw, num_stages=1)
        for bv in (16, 32, 64)
        for bki in (16, 32)
        for nw in (4, 8)
    ],
    triton.Config({"BV": 16, "BKI": 16}, num_warps=1, num_stages=1),
)


@triton.jit
def _intra_scores(q_ptr, k_ptr, g_ptr, row, mt, causal, K, L: tl.constexpr, BK: tl.constexpr, BKI: tl.constexpr):
    """A[τ, σ] = Σ_d q_τd k_σd e^{b_τd − b_σd} for σ <= τ (0 above), K in sub-blocks of BKI; every exponent <= 0."""
    rki = tl.arange(0, BKI)
    A = tl.zeros([L, L], dtype=tl.float32)
    for d0 in range(0, BK, BKI):
        dm = mt[:, None] & ((d0 + rki)[None, :] < K)
        qs = tl.load(q_ptr + row + d0 + rki[None, :], mask=dm, other=0.0).to(tl.float32)  # (L, BKI)
        ks = tl.load(k_ptr + row + d0 + rki[None, :], mask=dm, other=0.0).to(tl.float32)
        bs = tl.cumsum(tl.load(g_ptr + row + d0 + rki[None, :], mask=dm, other=0.0).to(tl.float32), 0)
        diff = tl.where(causal[:, :, None], bs[:, None, :] - bs[None, :, :], float("-inf"))  # (L, L, BKI)
        A += tl.sum(qs[:, None, :] * ks[None, :, :] * tl.exp(diff), 2)
    return A


@triton.jit
def _document_masks(st_ptr, bi, T, tok, mt, causal):
    """Packed documents in one tile: ``keep`` [τ, σ] (causal, one document), ``rd`` (the token reads the incoming
    state: no start up to it), ``wr`` (the key reaches the outgoing state: no start after it), ``carry`` (no start
    in the tile: the incoming state decays into the outgoing one)."""
    s = tl.load(st_ptr + bi * T + tok, mask=mt, other=0)  # (L,) int32, 1 at a start
    doc = tl.cumsum(s, 0)
    last = tl.sum(s, 0)
    keep = causal & (doc[:, None] == doc[None, :])
    return keep, doc == 0, doc == last, last == 0


@autotune(configs=_CONFIGS, key=["K", "V", "L", "HAS_STATE", "STATES_ONLY", "HAS_STARTS"])
@triton.jit
def _gla_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    S0_ptr,
    y_ptr,
    S_ptr,
    Sc_ptr,
    st_ptr,
    T,
    H,
    K,
    V,
    L: tl.constexpr,
    BK: tl.constexpr,
    BKI: tl.constexpr,
    BV: tl.constexpr,
    HAS_STATE: tl.constexpr,
    STATES_ONLY: tl.constexpr,
    HAS_STARTS: tl.constexpr,
    DOT: tl.constexpr,
    IEEE: tl.constexpr,
):
    # STATES_ONLY (backward's recompute): skip y, store the state entering every chunk into Sc (B·H, NC, K, V)
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

    st_off = pid_bh * K * V + rk[:, None] * V + rv[None, :]  # (BK, BV) into (B, H, K, V)
    if HAS_STATE:
        S = tl.load(S0_ptr + st_off, mask=mk[:, None] & mv[None, :], other=0.0)
    else:
        S = tl.zeros([BK, BV], dtype=tl.float32)

    NC = tl.cdiv(T, L)
    for c0 in range(0, T, L):
        tok = c0 + rl
        mt = tok < T
        row = (bi * T + tok[:, None]) * (H * K) + hi * K  # (L, 1) into (B, T, H, K)
        if STATES_ONLY:
            tl.store(
                Sc_ptr + (pid_bh * NC + c0 // L) * K * V + rk[:, None] * V + rv[None, :],
                S,
                mask=mk[:, None] & mv[None, :],
            )
        km = mt[:, None] & mk[None, :]
        q = tl.load(q_ptr + row + rk[None, :], mask=km, other=0.0).to(tl.float32)  # (L, BK)
        k = tl.load(k_ptr + row + rk[None, :], mask=km, other=0.0).to(tl.float32)
        b = tl.cumsum(tl.load(g_ptr + row + rk[None, :], mask=km, other=0.0).to(tl.float32), 0)  # (L, BK)
        gl = tl.sum(tl.load(g_ptr + row + rk[None, :], mask=km, other=0.0).to(tl.float32), 0)  # (BK,) = b_L
        v_off = (bi * T + tok[:, None]) * (H * V) + hi * V + rv[None, :]  # (L, BV) into (B, T, H, V)
        v = tl.load(v_ptr + v_off, mask=mt[:, None] & mv[None, :], other=0.0)
        qd = q * tl.exp(b)  # (L, BK)
        kd = k * tl.exp(gl[None, :] - b)  # (L, BK)
        decay = tl.exp(gl)  # (BK,)
        keep = causal
        if HAS_STARTS:  # packed documents: the masks of the module docstring
            keep, rd, wr, carry = _document_masks(st_ptr, bi, T, tok, mt, causal)
            qd = tl.where(rd[:, None], qd, 0.0)
            kd = tl.where(wr[:, None], kd, 0.0)
            decay = tl.where(carry, decay, 0.0)
        if not STATES_ONLY:
            A = _intra_scores(q_ptr, k_ptr, g_ptr, row, mt, keep, K, L, BK, BKI)
            if IEEE:
                y = tl.dot(A.to(DOT), v.to(DOT), input_precision="ieee")
                y += tl.dot(qd.to(DOT), S.to(DOT), input_precision="ieee")
            else:
                y = tl.dot(A.to(DOT), v.to(DOT))
                y += tl.dot(qd.to(DOT), S.to(DOT))
            tl.store(y_ptr + v_off, y.to(y_ptr.dtype.element_ty), mask=mt[:, None] & mv[None, :])
        if IEEE:
            S = decay[:, None] * S + tl.dot(tl.trans(kd.to(DOT)), v.to(DOT), input_precision="ieee")
        else:
            S = decay[:, None] * S + tl.dot(tl.trans(kd.to(DOT)), v.to(DOT))

    tl.store(S_ptr + st_off, S, mask=mk[:, None] & mv[None, :])


_BWD_CONFIGS = _CONFIGS
_DS_CONFIGS = configs(
    [triton.Config({"BV": bv}, num_warps=nw, num_stages=ns) for bv in (16, 32, 64) for nw in (4, 8) for ns in (1, 2)],
    triton.Config({"BV": 16}, num_warps=1, num_stages=1),
)


@autotune(configs=_DS_CONFIGS, key=["K", "V", "L", "HAS_STARTS"])
@triton.jit
def _gla_bwd_dstate_kernel(
    q_ptr,
    g_ptr,
    dy_ptr,
    dST_ptr,
    dSc_ptr,
    dS0_ptr,
    st_ptr,
    T,
    H,
    K,
    V,
    L: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    DOT: tl.constexpr,
    IEEE: tl.constexpr,
    HAS_STARTS: tl.constexpr,
):
    """Reverse sweep: dSc[c] = ∂loss/∂(state after chunk c); dS_{c-1} = e^{g} ⊙ dS_c + (q ⊙ e^{b})ᵀ dy_c."""
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
    dS = tl.load(dST_ptr + pid_bh * K * V + st, mask=sm, other=0.0)
    NC = tl.cdiv(T, L)
    for i in range(NC):
        c = NC - 1 - i
        tok = c * L + rl
        mt = tok < T
        tl.store(dSc_ptr + (pid_bh * NC + c) * K * V + st, dS, mask=sm)
        row = (bi * T + tok[:, None]) * (H * K) + hi * K
        km = mt[:, None] & mk[None, :]
        q = tl.load(q_ptr + row + rk[None, :], mask=km, other=0.0).to(tl.float32)
        la = tl.load(g_ptr + row + rk[None, :], mask=km, other=0.0).to(tl.float32)
        b = tl.cumsum(la, 0)
        gl = tl.sum(la, 0)
        dy = tl.load(
            dy_ptr + (bi * T + tok[:, None]) * (H * V) + hi * V + rv[None, :], mask=mt[:, None] & mv[None, :], other=0.0
        ).to(tl.float32)
        qd = q * tl.exp(b)
        decay = tl.exp(gl)
        if HAS_STARTS:
            _, rd, _, carry = _document_masks(st_ptr, bi, T, tok, mt, rl[:, None] >= rl[None, :])
            qd = tl.where(rd[:, None], qd, 0.0)
            decay = tl.where(carry, decay, 0.0)
        if IEEE:
            dS = decay[:, None] * dS + tl.dot(tl.trans(qd.to(DOT)), dy.to(DOT), input_precision="ieee")
        else:
            dS = decay[:, None] * dS + tl.dot(tl.trans(qd.to(DOT)), dy.to(DOT))
    tl.store(dS0_ptr + pid_bh * K * V + st, dS, mask=sm)


@autotune(configs=_BWD_CONFIGS, key=["K", "V", "L", "HAS_STARTS"])
@triton.jit
def _gla_bwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    dy_ptr,
    Sc_ptr,
    dSc_ptr,
    dq_ptr,
    dk_ptr,
    dv_ptr,
    st_ptr,
    T,
    H,
    K,
    V,
    L: tl.constexpr,
    BK: tl.constexpr,
    BKI: tl.constexpr,
    BV: tl.constexpr,
    DOT: tl.constexpr,
    IEEE: tl.constexpr,
    HAS_STARTS: tl.constexpr,
):
    """One program per (chunk, batch·head): dq, dk (fp32) and dv of the chunk from the stored chunk states."""
    c = tl.program_id(0)
    pid_bh = tl.program_id(1).to(tl.int64)
    bi = pid_bh // H
    hi = pid_bh % H
    NC = tl.cdiv(T, L)
    rk = tl.arange(0, BK)
    rki = tl.arange(0, BKI)
    rvb = tl.arange(0, BV)
    rl = tl.arange(0, L)
    mk = rk < K
    tok = c * L + rl
    mt = tok < T
    causal = rl[:, None] >= rl[None, :]  # [τ, σ]
    row = (bi * T + tok[:, None]) * (H * K) + hi * K  # (L, 1)
    vrow = (bi * T + tok[:, None]) * (H * V) + hi * V  # (L, 1)
    st_base = (pid_bh * NC + c) * K * V
    keep = causal
    rd = mt
    wr = mt
    if HAS_STARTS:  # packed documents: the forward's masks
        keep, rd, wr, _ = _document_masks(st_ptr, bi, T, tok, mt, causal)

    # dA[τ, σ] = dy_τ · v_σ over all of V, causal
    dA = tl.zeros([L, L], dtype=tl.float32)
    for v0 in range(0, V, BV):
        vm = mt[:, None] & ((v0 + rvb)[None, :] < V)
        dy = tl.load(dy_ptr + vrow + v0 + rvb[None, :], mask=vm, other=0.0).to(tl.float32)
        vv = tl.load(v_ptr + vrow + v0 + rvb[None, :], mask=vm, other=0.0).to(tl.float32)
        if IEEE:
            dA += tl.dot(dy.to(DOT), tl.trans(vv.to(DOT)), input_precision="ieee")
        else:
            dA += tl.dot(dy.to(DOT), tl.trans(vv.to(DOT)))
    dA = tl.where(keep, dA, 0.0)

    # dq, dk in K sub-blocks: intra (L, L, BKI) broadcast + inter matmuls with the stored states
    for d0 in range(0, BK, BKI):
        dmk = (d0 + rki) < K
        dm = mt[:, None] & dmk[None, :]
        qs = tl.load(q_ptr + row + d0 + rki[None, :], mask=dm, other=0.0).to(tl.float32)  # (L, BKI)
        ks = tl.load(k_ptr + row + d0 + rki[None, :], mask=dm, other=0.0).to(tl.float32)
        la = tl.load(g_ptr + row + d0 + rki[None, :], mask=dm, other=0.0).to(tl.float32)
        bs = tl.cumsum(la, 0)
        gs = tl.sum(la, 0)
        E = tl.exp(tl.where(keep[:, :, None], bs[:, None, :] - bs[None, :, :], float("-inf")))  # (L, L, BKI)
        dqs = tl.sum(dA[:, :, None] * ks[None, :, :] * E, 1)
        dks = tl.sum(dA[:, :, None] * qs[:, None, :] * E, 0)
        rdec = tl.where(rd[:, None], tl.exp(bs), 0.0)  # the incoming state's factor (0 from the first start on)
        wdec = tl.where(wr[:, None], tl.exp(gs[None, :] - bs), 0.0)  # the outgoing state's (0 before the last)
        for v0 in range(0, V, BV):
            rv = v0 + rvb
            vm = mt[:, None] & (rv[None, :] < V)
            sm = dmk[:, None] & (rv[None, :] < V)
            dy = tl.load(dy_ptr + vrow + rv[None, :], mask=vm, other=0.0).to(tl.float32)  # (L, BV)
            vv = tl.load(v_ptr + vrow + rv[None, :], mask=vm, other=0.0).to(tl.float32)
            soff = st_base + (d0 + rki)[:, None] * V + rv[None, :]  # (BKI, BV)
            Sp = tl.load(Sc_ptr + soff, mask=sm, other=0.0)  # state entering the chunk
            dSn = tl.load(dSc_ptr + soff, mask=sm, other=0.0)  # gradient of the state leaving it
            if IEEE:
                dqs += tl.dot(dy.to(DOT), tl.trans(Sp.to(DOT)), input_precision="ieee") * rdec
                dks += tl.dot(vv.to(DOT), tl.trans(dSn.to(DOT)), input_precision="ieee") * wdec
            else:
                dqs += tl.dot(dy.to(DOT), tl.trans(Sp.to(DOT))) * rdec
                dks += tl.dot(vv.to(DOT), tl.trans(dSn.to(DOT))) * wdec
        tl.store(dq_ptr + row + d0 + rki[None, :], dqs, mask=dm)
        tl.store(dk_ptr + row + d0 + rki[None, :], dks, mask=dm)

    # dv_σ = Σ_τ A_τσ dy_τ + (k_σ ⊙ e^{g − b_σ}) dS_next
    A = _intra_scores(q_ptr, k_ptr, g_ptr, row, mt, keep, K, L, BK, BKI)
    km = mt[:, None] & mk[None, :]
    k = tl.load(k_ptr + row + rk[None, :], mask=km, other=0.0).to(tl.float32)
    la = tl.load(g_ptr + row + rk[None, :], mask=km, other=0.0).to(tl.float32)
    kd = tl.where(wr[:, None], k * tl.exp(tl.sum(la, 0)[None, :] - tl.cumsum(la, 0)), 0.0)  # (L, BK)
    for v0 in range(0, V, BV):
        rv = v0 + rvb
        vm = mt[:, None] & (rv[None, :] < V)
        dy = tl.load(dy_ptr + vrow + rv[None, :], mask=vm, other=0.0).to(tl.float32)
        dSn = tl.load(
            dSc_ptr + st_base + rk[:, None] * V + rv[None, :], mask=mk[:, None] & (rv[None, :] < V), other=0.0
        )
        if IEEE:
            dv = tl.dot(tl.trans(A.to(DOT)), dy.to(DOT), input_precision="ieee")
            dv += tl.dot(kd.to(DOT), dSn.to(DOT), input_precision="ieee")
        else:
            dv = tl.dot(tl.trans(A.to(DOT)), dy.to(DOT))
            dv += tl.dot(kd.to(DOT), dSn.to(DOT))
        tl.store(dv_ptr + vrow + rv[None, :], dv.to(dv_ptr.dtype.element_ty), mask=vm)


def _backward(q, k, v, log_a, S0, dy, dST, chunk, starts=None):
    """Triton backward: recompute the chunk states (forward sweep), reverse sweep for the state gradients, then
    every chunk in parallel for dq, dk, dv; dlog_a from the identity below (torch, O(B·T·H·K))."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    NC = triton.cdiv(T, chunk)
    dev = q.device
    BK = next_pow2(K)
    dt = dot_dtype(q.dtype)
    ieee = dt == tl.float32
    Sc = torch.empty(B * H, NC, K, V, device=dev, dtype=torch.float32)
    ST = torch.empty(B, H, K, V, device=dev, dtype=torch.float32)
    grid = lambda meta: (B * H, triton.cdiv(V, meta["BV"]))
    launch(
        _gla_fwd_kernel,
        grid,
        q,
        k,
        v,
        log_a,
        S0 if S0 is not None else ST,
        ST,
        ST,
        Sc,
        starts if starts is not None else ST,
        T,
        H,
        K,
        V,
        L=chunk,
        BK=BK,
        HAS_STATE=S0 is not None,
        STATES_ONLY=True,
        DOT=dt,
        IEEE=ieee,
        HAS_STARTS=starts is not None,
    )
    dy = dy.contiguous()
    dST = dST.float().contiguous()
    dSc = torch.empty_like(Sc)
    dS0 = torch.empty(B, H, K, V, device=dev, dtype=torch.float32)
    st = starts if starts is not None else dS0  # a pointer the kernels never read without HAS_STARTS
    launch(_gla_bwd_dstate_kernel, grid, q, log_a, dy, dST, dSc, dS0, st, T, H, K, V, L=chunk, BK=BK, DOT=dt,
           IEEE=ieee, HAS_STARTS=starts is not None)  # fmt: skip
    dq = torch.empty(B, T, H, K, device=dev, dtype=torch.float32)
    dk = torch.empty_like(dq)
    dv = torch.empty_like(v)
    launch(
        _gla_bwd_kernel,
        (NC, B * H),
        q,
        k,
        v,
        log_a,
        dy,
        Sc,
        dSc,
        dq,
        dk,
        dv,
        st,
        T,
        H,
        K,
        V,
        L=chunk,
        BK=BK,
        DOT=dt,
        IEEE=ieee,
        HAS_STARTS=starts is not None,
    )
    # ∂loss/∂b_t = q_t·dq_t − k_t·dk_t (+ Σ_v S_T dS_T at t = T), b = cumsum(log_a): dlog_a = reverse cumsum
    db = q.float() * dq - k.float() * dk  # (B, T, H, K)
    dlog_a = db.flip(1).cumsum(1).flip(1) + (ST * dST).sum(-1)[:, None]  # (B, T, H, K)
    return dq, dk, dv, dlog_a, dS0


def _forward(q, k, v, log_a, S0, chunk, out_dtype, starts=None):
    B, T, H, K = q.shape
    V = v.shape[-1]
    y = torch.empty(B, T, H, V, device=q.device, dtype=out_dtype)
    S = torch.empty(B, H, K, V, device=q.device, dtype=torch.float32)
    dt = dot_dtype(q.dtype)
    grid = lambda meta: (B * H, triton.cdiv(V, meta["BV"]))
    launch(
        _gla_fwd_kernel,
        grid,
        q,
        k,
        v,
        log_a,
        S0 if S0 is not None else S,
        y,
        S,
        S,
        starts if starts is not None else S,
        T,
        H,
        K,
        V,
        L=chunk,
        BK=next_pow2(K),
        HAS_STATE=S0 is not None,
        STATES_ONLY=False,
        DOT=dt,
        IEEE=dt == tl.float32,
        HAS_STARTS=starts is not None,
    )
    return y, S


class GLATriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_a, S0, chunk, out_dtype, backward_impl, starts):
        y, S = _forward(q, k, v, log_a, S0, chunk, out_dtype, starts)
        ctx.save_for_backward(q, k, v, log_a, S0, starts)
        ctx.chunk = chunk
        ctx.backward_impl = backward_impl
        return y, S

    @staticmethod
    def backward(ctx, dy, dS):
        q, k, v, log_a, S0, starts = ctx.saved_tensors
        if ctx.backward_impl == "triton":
            dq, dk, dv, dlog_a, dS0 = _backward(q, k, v, log_a, S0, dy, dS, ctx.chunk, starts)
            return (
                dq.to(q.dtype),
                dk.to(k.dtype),
                dv,
                dlog_a.to(log_a.dtype),
                dS0 if S0 is not None else None,
                None,
                None,
                None,
                None,
            )
        # "torch": recompute with the PyTorch chunkwise GateLoop path (real transitions) and differentiate it

        with torch.enable_grad():
            ins = [
                None if t is None else t.detach().requires_grad_(ctx.needs_input_grad[j])
                for j, t in enumerate((q, k, v, log_a, S0))
            ]
            qq, kk, vv, la, s0 = ins
            st = None if s0 is None else torch.complex(s0, torch.zeros_like(s0))
            seg = None if starts is None else (starts == 0).long()  # segment_pos: 0 where a document starts
            y, S = gateloop_chunkwise(qq, kk, vv, la, None, st, chunk_size=max(ctx.chunk, 16), segment_pos=seg)
            wrt = [t for t in ins if t is not None and t.requires_grad]
            grads = torch.autograd.grad((y, S.real), wrt, (dy, dS), allow_unused=True)
        it = iter(grads)
        out = [next(it) if (t is not None and t.requires_grad) else None for t in ins]
        return (*out, None, None, None, None)


def gla_triton(
    q,
    k,
    v,
    log_a,
    state=None,
    chunk_size: int | None = None,
    out_dtype: torch.dtype | None = None,
    backward: str = "triton",
    starts: torch.Tensor | None = None,
):
    """``q, k, log_a (B, T, H, K)``, ``v (B, T, H, V)``, real ``state (B, H, K, V)`` or None ->
    ``y (B, T, H, V)`` (``out_dtype``, default v's dtype) and the final state ``(B, H, K, V)`` fp32.
    ``starts (B, T)`` bool or None: document starts (packed documents, module docstring; log_a is taken as 0 there).

    ``log_a <= 0`` (checked). ``chunk_size``: power of two >= 16; the kernels run tiles of min(chunk_size, 16)
    tokens (``TILE``: the intra-chunk (L, L, BKI) broadcast grows as L² and spills registers beyond it; a larger
    chunk would only group the state updates).
    ``backward``: ``"triton"`` (the kernels above) or ``"torch"`` (recompute with ``ops.gateloop.gateloop_chunkwise``).
    """
    if backward not in ("triton", "torch"):
        raise InputError(f"gla_triton: backward must be 'triton' or 'torch', got {backward!r}")
    for name, t in (("q", q), ("k", k), ("v", v), ("log_a", log_a)):
        if not isinstance(t, torch.Tensor):
            raise InputError(f"gla_triton: {name} must be a torch.Tensor")
        check_float(name, t)
    if q.dim() != 4 or k.shape != q.shape or log_a.shape != q.shape:
        raise InputError(
            f"gla_triton: q, k, log_a must share shape (B, T, H, K), got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(log_a.shape)}"
        )
    B, T, H, K = q.shape
    if T == 0:
        raise InputError("gla_triton: need at least one time step")
    if v.dim() != 4 or v.shape[:3] != (B, T, H):
        raise InputError(f"gla_triton: v must have shape ({B}, {T}, {H}, V), got {tuple(v.shape)}")
    V = v.shape[-1]
    if state is not None and (state.shape != (B, H, K, V) or state.is_complex()):
        raise InputError(
            f"gla_triton: state must be a real tensor of shape {(B, H, K, V)}, got {state.dtype} {tuple(state.shape)}"
        )
    mx = float(log_a.detach().max())
    if not mx <= 1e-6:
        raise InputError(f"gla_triton: log_a must be <= 0 (|a| <= 1), got max {mx:.3g}")
    unfit = chunk_unfit(chunk_size or TILE)
    require(unfit is None, f"gla_triton: {unfit}")
    chunk = min(chunk_size or TILE, TILE)  # the kernels' tile (TILE above): larger chunks only group state updates
    if starts is not None:
        require(
            isinstance(starts, torch.Tensor) and starts.dtype == torch.bool and tuple(starts.shape) == (B, T),
            f"gla_triton: starts must be a bool tensor of shape {(B, T)}, got {getattr(starts, 'shape', starts)}",
        )
        log_a = log_a.masked_fill(starts[:, :, None, None].to(log_a.device), 0.0)  # its gradient there: 0
        starts = starts.to(device=q.device, dtype=torch.int32).contiguous()
    q, k, v, log_a = (t.contiguous() for t in (q, k, v, log_a))
    S0 = None if state is None else state.float().contiguous()
    return apply(GLATriton, q, k, v, log_a, S0, chunk, out_dtype or v.dtype, backward, starts)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x (B, T, H, K)`` -> ``[x cos Θ, x sin Θ] (B, T, H, 2K)``."""
    return torch.cat([x * cos, x * sin], dim=-1)


def gateloop_triton(q, k, v, log_mag, phase=None, state=None, chunk_size: int | None = None, segment_pos=None):
    """``ops.gateloop.gateloop`` contract: y fp32 ``(B, T, H, V)``, final state complex64 ``(B, H, K, V)``;
    ``segment_pos (B, T)`` or None: packed documents (θ is taken as 0 at starts, the kernels mask the rest).

    Real transitions (``phase`` None) run ``gla_triton`` directly. Complex transitions a = e^{log|a| + iθ} run it
    on rotated keys and queries of width 2K (cumulative phase Θ_t = Σ_{j<=t} θ_j, accumulated in fp64 and
    wrapped into [-π, π) so cos/sin stay exact at any T):

        Re(q_τᵀ S_τ) = Σ_σ e^{Σ log|a|} [(q cos Θ_τ)·(k cos Θ_σ) + (q sin Θ_τ)·(k sin Θ_σ)] v_σ
        S_T = e^{iΘ_T} (S̃_cos − i S̃_sin),   with S̃_cos0 = Re S_0, S̃_sin0 = −Im S_0

    The rotation, the duplicated decays and the state conversion are torch ops (differentiable); the kernel
    sees a real GLA with 2K key dims.
    """
    if state is not None and not state.is_complex():
        raise InputError("gateloop_triton: state must be complex (B, H, K, V) as returned by gateloop")
    starts = None if segment_pos is None else (segment_pos == 0).to(q.device)
    if phase is None:
        S0 = None if state is None else state.real
        if state is not None and bool((state.imag != 0).any()):
            phase = torch.zeros_like(log_mag)  # a complex incoming state needs the rotated form
        else:
            y, S = gla_triton(q, k, v, log_mag, S0, chunk_size, out_dtype=torch.float32, starts=starts)
            return y, torch.complex(S, torch.zeros_like(S))
    if starts is not None:  # θ at a start enters no kept term: 0 there (an exact zero gradient)
        phase = phase.masked_fill(starts[:, :, None, None], 0.0)
    if phase.shape != q.shape:
        raise InputError(f"gateloop_triton: phase must have shape {tuple(q.shape)}, got {tuple(phase.shape)}")
    theta = torch.remainder(phase.double().cumsum(1) + torch.pi, 2 * torch.pi) - torch.pi  # (B, T, H, K) Θ_t
    theta = theta.float()
    cos, sin = torch.cos(theta), torch.sin(theta)
    K = q.shape[-1]
    qr = _rotate(q.float(), cos, sin).to(q.dtype)  # (B, T, H, 2K)
    kr = _rotate(k.float(), cos, sin).to(k.dtype)
    lr = torch.cat([log_mag, log_mag], dim=-1)  # (B, T, H, 2K)
    S0 = None if state is None else torch.cat([state.real, -state.imag], dim=-2).float()  # (B, H, 2K, V)
    y, S = gla_triton(qr, kr, v, lr, S0, chunk_size, out_dtype=torch.float32, starts=starts)
    rot = torch.exp(torch.complex(torch.zeros_like(theta[:, -1]), theta[:, -1]))  # (B, H, K) e^{iΘ_T}
    S = rot[..., None] * torch.complex(S[..., :K, :], -S[..., K:, :])  # (B, H, K, V)
    return y, S


def shape_unfit(q, v, phase=None, state=None, chunk_size: int | None = None, cc: int | None = None) -> str | None:
    """Why ``gateloop_triton`` cannot serve inputs like these on the GPU: a kernel it would launch (forward, and the
    backward kernels when q or v require grad) has no autotune config that fits the GPU's shared memory without
    spilling (``kernels/prune.py: launch_unfit``, compute capability ``cc``, default q's device). None when every
    kernel has one, and off CUDA without ``cc``. Asked by ``ops/gateloop/__init__.py: _triton_unfit``."""
    cc = compute_capability(q, cc)
    if cc is None:
        return None
    grad = torch.is_grad_enabled() and (q.requires_grad or v.requires_grad)
    args = (
        q.shape[-1],
        v.shape[-1],
        min(chunk_size or TILE, TILE),
        q.dtype,
        phase is not None,
        state is not None,
        grad,
        cc,
    )
    return _shape_unfit(*args, q.device)


@functools.cache
def _shape_unfit(K, V, chunk, dtype, cplx, has_state, grad, cc, device) -> str | None:
    def run():  # the real entry point on one head of one chunk: same kernels, constexprs and autotune keys
        with torch.enable_grad() if grad else torch.no_grad():
            q, k, log_mag = (torch.zeros(1, chunk, 1, K, dtype=dtype, device=device, requires_grad=grad) for _ in "qkl")
            v = torch.zeros(1, chunk, 1, V, dtype=dtype, device=device, requires_grad=grad)
            phase = torch.zeros_like(q) if cplx else None
            st = torch.zeros(1, 1, K, V, dtype=torch.complex64, device=device) if has_state else None
            gateloop_triton(q, k, v, log_mag, phase, st, chunk)  # with grad, ``apply`` runs the backward too

    for kernel, args, kwargs in probe_launches(run):
        why = launch_unfit(kernel, args, kwargs, cc)
        if why is not None:
            return f"K={K}{' (complex: 2K)' if cplx else ''}, V={V}, {str(dtype).removeprefix('torch.')}: {why}"
    return None
