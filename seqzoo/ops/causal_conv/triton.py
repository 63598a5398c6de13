"""Triton depthwise causal 1-D convolution with a carried buffer (xLSTM's and Griffin's short conv), fwd + bwd.

    y_t[c] = act( bias[c] + sum_{s=0}^{k-1} keep(t, s) * weight[c, k-1-s] * x_{t-s}[c] )        act: identity or SiLU

x_{-1}, ..., x_{-(k-1)} are the carried state ``(B, k-1, C)`` (zeros when None); ``keep(t, s)`` is 1 unless a
``segment_pos`` is given and a document starts in ``(t-s, t]`` (Griffin, arXiv:2402.19427 §3.1; see ``ops/causal_conv/__init__.py``).
The document rule is exact in the kernel: the tap mask is built lag by lag, ``alive_s = alive_{s-1} & (no start
at t-s+1)``, so a dropped lag drops every longer one, as in ``causal_conv1d_naive``.

Forward: one program per (batch row, BT steps, BLOCK_C channels); the k taps are k shifted (BT, BLOCK_C) loads of
the same tile (the shifted rows are L1/L2 hits), fp32 accumulation, y stored in x's dtype. HBM traffic ≈ read x
once + write y once.
Backward: one program per (batch row, TP steps, BLOCK_C channels) walks its TP steps in tiles of BT:

    g_t = dy_t (· SiLU'(pre_t), pre recomputed)       dx_q = sum_s w[k-1-s] keep(q+s, s) g_{q+s}
    dw[:, k-1-s] = sum_{b,t} g_t keep(t, s) x_{t-s}    dbias = sum_{b,t} g_t         dstate = dx at q = -(k-1)..-1

dw / dbias are reduced over the program's steps in fp32 registers and written as per-program partials
``(B·ceil(T/TP), k, C)`` that torch sums (deterministic, no atomics). The returned state (the last k-1 inputs,
entries before a document start zeroed) is built by torch from the last k-1 steps only, exactly as
``ops.causal_conv.causal_conv1d`` builds it, and its gradient flows by autograd.

Any T ≥ 1, any C, 1 ≤ k ≤ 16; float32 / float16 / bfloat16 x (weight, bias, state of any of these; fp32 math).
Reference: ``ops.causal_conv.causal_conv1d_naive`` (tests/ops/test_causal_conv.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...errors import InputError
from ...kernels import interpreting
from ...kernels._common import check_float, configs
from ...kernels.prune import autotune
from .common import check, new_state, starts_cumsum

MAX_K = 16
_CONFIGS = configs(
    [
        triton.Config({"BLOCK_C": bc, "BT": bt}, num_warps=nw)
        for bc in (64, 128, 256)
        for bt in (16, 32, 64)
        for nw in (4, 8)
    ],
    triton.Config({"BLOCK_C": 16, "BT": 16}, num_warps=1),
)
_TP_UNIT = 16 if interpreting() else 64  # the backward's steps per program: a multiple of every BT above
_TP_MAX = 4 * _TP_UNIT  # at most this many steps per backward program (more programs, more dw / dbias partials)


@triton.jit
def _pre(
    x_ptr,
    st_ptr,
    ns_ptr,
    w_ptr,
    b_ptr,
    xb,
    sb,
    nb,
    rt,
    offs_c,
    mc,
    T,
    C,
    K: tl.constexpr,
    HAS_STATE: tl.constexpr,
    HAS_SEG: tl.constexpr,
    HAS_BIAS: tl.constexpr,
):
    """(BT, BLOCK_C) fp32 pre-activation at output rows ``rt`` (rows outside [0, T) are garbage: mask them)."""
    acc = tl.zeros([rt.shape[0], offs_c.shape[0]], dtype=tl.float32)
    alive = rt >= -K  # all True
    for s in tl.static_range(K):
        if HAS_SEG:
            if s > 0:  # lag s is kept only if no document starts at t-s+1 (and none at shorter lags)
                p = rt - s + 1
                ns = tl.load(ns_ptr + nb + p, mask=(p >= 0) & (p < T), other=1)  # history: no starts
                alive = alive & (ns != 0)
        q = rt - s
        m2 = ((q >= 0) & (q < T))[:, None] & mc[None, :]
        xv = tl.load(x_ptr + xb + q[:, None] * C + offs_c[None, :], mask=m2, other=0.0).to(tl.float32)
        if HAS_STATE:
            ms = ((q < 0) & (q >= 1 - K))[:, None] & mc[None, :]
            xv += tl.load(st_ptr + sb + (q + K - 1)[:, None] * C + offs_c[None, :], mask=ms, other=0.0).to(tl.float32)
        wv = tl.load(w_ptr + offs_c * K + (K - 1 - s), mask=mc, other=0.0).to(tl.float32)
        term = xv * wv[None, :]
        if HAS_SEG:
            term = tl.where(alive[:, None], term, 0.0)
        acc += term
    if HAS_BIAS:
        acc += tl.load(b_ptr + offs_c, mask=mc, other=0.0).to(tl.float32)[None, :]
    return acc


@triton.jit
def _gout(
    dy_ptr,
    x_ptr,
    st_ptr,
    ns_ptr,
    w_ptr,
    b_ptr,
    xb,
    sb,
    nb,
    rt,
    offs_c,
    mc,
    T,
    C,
    K: tl.constexpr,
    HAS_STATE: tl.constexpr,
    HAS_SEG: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
):
    """Gradient wrt the pre-activation at rows ``rt`` (0 outside [0, T)); SiLU' from the recomputed pre."""
    m2 = ((rt >= 0) & (rt < T))[:, None] & mc[None, :]
    g = tl.load(dy_ptr + xb + rt[:, None] * C + offs_c[None, :], mask=m2, other=0.0).to(tl.float32)
    if ACT:
        z = _pre(x_ptr, st_ptr, ns_ptr, w_ptr, b_ptr, xb, sb, nb, rt, offs_c, mc, T, C, K, HAS_STATE, HAS_SEG, HAS_BIAS)
        sg = tl.sigmoid(z)
        g = g * sg * (1.0 + z * (1.0 - sg))
    return g


@triton.jit
def _dx_rows(
    dy_ptr,
    x_ptr,
    st_ptr,
    ns_ptr,
    w_ptr,
    b_ptr,
    xb,
    sb,
    nb,
    rt,
    offs_c,
    mc,
    T,
    C,
    K: tl.constexpr,
    HAS_STATE: tl.constexpr,
    HAS_SEG: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
):
    """dx at input positions ``rt`` (negative: the state): sum_s w[k-1-s] keep(q+s, s) g_{q+s}."""
    acc = tl.zeros([rt.shape[0], offs_c.shape[0]], dtype=tl.float32)
    alive = rt >= -2 * K - 1  # all True (rt >= 1-K)
    for s in tl.static_range(K):
        if HAS_SEG:
            if s > 0:  # output q+s keeps lag s iff no start in (q, q+s]: add position q+s
                p = rt + s
                ns = tl.load(ns_ptr + nb + p, mask=(p >= 0) & (p < T), other=1)
                alive = alive & (ns != 0)
        g = _gout(
            dy_ptr,
            x_ptr,
            st_ptr,
            ns_ptr,
            w_ptr,
            b_ptr,
            xb,
            sb,
            nb,
            rt + s,
            offs_c,
            mc,
            T,
            C,
            K,
            HAS_STATE,
            HAS_SEG,
            HAS_BIAS,
            ACT,
        )
        wv = tl.load(w_ptr + offs_c * K + (K - 1 - s), mask=mc, other=0.0).to(tl.float32)
        term = g * wv[None, :]
        if HAS_SEG:
            term = tl.where(alive[:, None], term, 0.0)
        acc += term
    return acc


@autotune(configs=_CONFIGS, key=["C", "K", "HAS_STATE", "HAS_SEG", "HAS_BIAS", "ACT"])
@triton.jit
def _conv_fwd_kernel(
    x_ptr,
    st_ptr,
    ns_ptr,
    w_ptr,
    b_ptr,
    y_ptr,
    T,
    C,
    K: tl.constexpr,
    HAS_STATE: tl.constexpr,
    HAS_SEG: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BT: tl.constexpr,
):
    pid_b = tl.program_id(0).to(tl.int64)
    rt = tl.program_id(1).to(tl.int64) * BT + tl.arange(0, BT)  # 64-bit: rt * C passes 2**31 at long T
    offs_c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    mc = offs_c < C
    xb = pid_b * T * C
    z = _pre(
        x_ptr,
        st_ptr,
        ns_ptr,
        w_ptr,
        b_ptr,
        xb,
        pid_b * (K - 1) * C,
        pid_b * T,
        rt,
        offs_c,
        mc,
        T,
        C,
        K,
        HAS_STATE,
        HAS_SEG,
        HAS_BIAS,
    )
    if ACT:
        z = z * tl.sigmoid(z)
    m2 = (rt < T)[:, None] & mc[None, :]
    tl.store(y_ptr + xb + rt[:, None] * C + offs_c[None, :], z.to(y_ptr.dtype.element_ty), mask=m2)


@autotune(configs=_CONFIGS, key=["C", "K", "HAS_STATE", "HAS_SEG", "HAS_BIAS", "ACT"])
@triton.jit
def _conv_bwd_kernel(
    dy_ptr,
    x_ptr,
    st_ptr,
    ns_ptr,
    w_ptr,
    b_ptr,
    dx_ptr,
    dst_ptr,
    dw_ptr,
    db_ptr,
    T,
    C,
    TP,
    K: tl.constexpr,
    KP: tl.constexpr,
    HAS_STATE: tl.constexpr,
    HAS_SEG: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACT: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BT: tl.constexpr,
):
    pid_b = tl.program_id(0).to(tl.int64)
    pid_t = tl.program_id(1)
    offs_c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    mc = offs_c < C
    rows = tl.arange(0, BT)
    kr = tl.arange(0, KP)
    xb = pid_b * T * C
    sb = pid_b * (K - 1) * C
    nb = pid_b * T
    dw = tl.zeros([KP, BLOCK_C], dtype=tl.float32)  # row s: lag s (weight column k-1-s)
    db = tl.zeros([BLOCK_C], dtype=tl.float32)
    t_start = pid_t.to(tl.int64) * TP  # 64-bit: rt * C passes 2**31 at long T
    t_end = tl.minimum(t_start + TP, T)
    for t0 in range(t_start, t_end, BT):
        rt = t0 + rows
        mt = rt < T
        m2 = mt[:, None] & mc[None, :]
        g = _gout(
            dy_ptr,
            x_ptr,
            st_ptr,
            ns_ptr,
            w_ptr,
            b_ptr,
            xb,
            sb,
            nb,
            rt,
            offs_c,
            mc,
            T,
            C,
            K,
            HAS_STATE,
            HAS_SEG,
            HAS_BIAS,
            ACT,
        )  # 0 past T
        db += tl.sum(g, 0)
        alive = rt >= -K
        for s in tl.static_range(K):
            if HAS_SEG:
                if s > 0:
                    p = rt - s + 1
                    ns = tl.load(ns_ptr + nb + p, mask=(p >= 0) & (p < T), other=1)
                    alive = alive & (ns != 0)
            q = rt - s
            mq = ((q >= 0) & (q < T))[:, None] & mc[None, :]
            xv = tl.load(x_ptr + xb + q[:, None] * C + offs_c[None, :], mask=mq, other=0.0).to(tl.float32)
            if HAS_STATE:
                ms = ((q < 0) & (q >= 1 - K))[:, None] & mc[None, :]
                xv += tl.load(st_ptr + sb + (q + K - 1)[:, None] * C + offs_c[None, :], mask=ms, other=0.0).to(
                    tl.float32
                )
            prod = g * xv
            if HAS_SEG:
                prod = tl.where(alive[:, None], prod, 0.0)
            dw += tl.where(kr[:, None] == s, tl.sum(prod, 0)[None, :], 0.0)
        dx = _dx_rows(
            dy_ptr,
            x_ptr,
            st_ptr,
            ns_ptr,
            w_ptr,
            b_ptr,
            xb,
            sb,
            nb,
            rt,
            offs_c,
            mc,
            T,
            C,
            K,
            HAS_STATE,
            HAS_SEG,
            HAS_BIAS,
            ACT,
        )
        tl.store(dx_ptr + xb + rt[:, None] * C + offs_c[None, :], dx.to(dx_ptr.dtype.element_ty), mask=m2)
    if HAS_STATE:
        if pid_t == 0:  # dstate: the same sum at positions -(k-1)..-1
            rs = rows - (K - 1)
            ds = _dx_rows(
                dy_ptr,
                x_ptr,
                st_ptr,
                ns_ptr,
                w_ptr,
                b_ptr,
                xb,
                sb,
                nb,
                rs,
                offs_c,
                mc,
                T,
                C,
                K,
                HAS_STATE,
                HAS_SEG,
                HAS_BIAS,
                ACT,
            )
            msk = (rs < 0)[:, None] & mc[None, :]
            tl.store(
                dst_ptr + sb + (rs + K - 1)[:, None] * C + offs_c[None, :], ds.to(dst_ptr.dtype.element_ty), mask=msk
            )
    part = (pid_b * tl.num_programs(1) + pid_t).to(tl.int64)
    mk = (kr < K)[:, None] & mc[None, :]
    tl.store(dw_ptr + part * K * C + (K - 1 - kr)[:, None] * C + offs_c[None, :], dw, mask=mk)
    tl.store(db_ptr + part * C + offs_c, db, mask=mc)


class CausalConvTriton(torch.autograd.Function):
    """``(x, weight, bias, state, not_start, act) -> y``; x ``(B, T, C)``, weight ``(C, k)``, state ``(B, k-1, C)``
    or None, not_start ``(B, T)`` int8 (1 where no document starts) or None; all contiguous."""

    @staticmethod
    def forward(ctx, x, weight, bias, state, not_start, act):
        B, T, C = x.shape
        K = weight.shape[1]
        y = torch.empty_like(x)
        dummy = x
        grid = lambda meta: (B, triton.cdiv(T, meta["BT"]), triton.cdiv(C, meta["BLOCK_C"]))
        _conv_fwd_kernel[grid](
            x,
            state if state is not None else dummy,
            not_start if not_start is not None else dummy,
            weight,
            bias if bias is not None else weight,
            y,
            T,
            C,
            K=K,
            HAS_STATE=state is not None,
            HAS_SEG=not_start is not None,
            HAS_BIAS=bias is not None,
            ACT=act,
        )
        ctx.save_for_backward(x, weight, bias, state, not_start)
        ctx.act = act
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, state, not_start = ctx.saved_tensors
        B, T, C = x.shape
        K = weight.shape[1]
        dy = dy.contiguous()
        TP = min(_TP_MAX, triton.cdiv(T, _TP_UNIT) * _TP_UNIT)
        NTP = triton.cdiv(T, TP)
        dx = torch.empty_like(x)
        dst = torch.empty_like(state) if state is not None else None
        dw = torch.empty(B * NTP, K, C, device=x.device, dtype=torch.float32)
        db = torch.empty(B * NTP, C, device=x.device, dtype=torch.float32)
        grid = lambda meta: (B, NTP, triton.cdiv(C, meta["BLOCK_C"]))
        _conv_bwd_kernel[grid](
            dy,
            x,
            state if state is not None else x,
            not_start if not_start is not None else x,
            weight,
            bias if bias is not None else weight,
            dx,
            dst if dst is not None else dx,
            dw,
            db,
            T,
            C,
            TP,
            K=K,
            KP=max(2, triton.next_power_of_2(K)),
            HAS_STATE=state is not None,
            HAS_SEG=not_start is not None,
            HAS_BIAS=bias is not None,
            ACT=ctx.act,
        )
        dweight = dw.sum(0).t().to(weight.dtype)  # (k, C) -> (C, k)
        dbias = db.sum(0).to(bias.dtype) if bias is not None else None
        return dx, dweight, dbias, dst, None, None


def causal_conv1d_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    state: torch.Tensor | None = None,
    segment_pos: torch.Tensor | None = None,
    activation: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as ``ops.causal_conv.causal_conv1d``: ``x (B, T, C)``, ``weight (C, k)`` -> ``y (B, T, C)`` in
    x's dtype and the new state ``(B, k-1, C)`` (x's dtype; the last k-1 inputs, entries before a document start
    zeroed). ``activation``: None or ``"silu"`` (fused; the backward recomputes the pre-activation).
    Differentiable in x, weight, bias and state."""

    k = check(x, weight, state, segment_pos, bias)
    if activation not in (None, "silu"):
        raise InputError(f"activation must be None or 'silu', got {activation!r}")
    if x.shape[1] == 0:
        raise InputError("x must have at least one time step (T >= 1)")
    if not 1 <= k <= MAX_K:
        raise InputError(f"the triton causal conv takes kernel sizes 1..{MAX_K}, got k={k}")
    check_float("x", x), check_float("weight", weight)
    for name, t in (("bias", bias), ("state", state)):
        if t is not None:
            check_float(name, t)
    if bias is not None and tuple(bias.shape) != (x.shape[-1],):
        raise InputError(f"bias must have shape ({x.shape[-1]},), got {tuple(bias.shape)}")
    for name, t in (("weight", weight), ("bias", bias), ("state", state), ("segment_pos", segment_pos)):
        if t is not None and t.device != x.device:
            raise InputError(f"{name} is on {t.device}, x on {x.device}")
    T = x.shape[1]
    not_start = None if segment_pos is None else (segment_pos != 0).to(torch.int8).contiguous()
    st = state.contiguous() if (state is not None and k > 1) else None
    y = CausalConvTriton.apply(
        x.contiguous(),
        weight.contiguous(),
        None if bias is None else bias.contiguous(),
        st,
        not_start,
        activation == "silu",
    )
    # new state from the last k-1 steps only (exactly as the torch path: x's dtype, starts zeroed)
    hist = state.to(x.dtype) if state is not None else x.new_zeros(x.shape[0], k - 1, x.shape[-1])
    tail = torch.cat([hist, x[:, max(0, T - (k - 1)) :]], dim=1)
    csum = None if segment_pos is None else starts_cumsum(segment_pos, k)
    return y, new_state(tail, k, csum)


__all__ = ["MAX_K", "CausalConvTriton", "causal_conv1d_triton"]
