"""Triton real diagonal scan ``h_t = a_t ⊙ h_{t-1} + b_t`` (RG-LRU core; GateLoop with d_h = 1, real case).

Forward: one program per (batch row, block of BLOCK_R channels) walks the sequence in tiles of BT steps: loads a
(BT, BLOCK_R) tile of a and b at once (many loads in flight, not one dependent load per step), scans it with
``tl.associative_scan`` and applies the carried state h (fp32) — reads a, b once, writes h once (3·N·s bytes
in all; no chunk carries in memory, no second pass).
Backward: the reverse scan of the same form, tiles from the end, reverse ``tl.associative_scan`` of
(a_{t+1}, dh_t) with the carried gradient in fp32:

    G_t = dh_t + a_{t+1} G_{t+1}   (G_{T-1} also gets dh_T),  da_t = G_t h_{t-1},  db_t = G_t,  dh0 = a_0 G_0

Any T, any R (masked), any float32/float16/bfloat16 a, b (fp32 arithmetic); h0 and the final state in fp32.
Reference: ``seqzoo.ops.rglru.linear_scan_naive`` (tests/ops/test_<op>.py).

``rglru_fused_triton`` fuses the RG-LRU gates into the same single pass (4·N·s bytes forward; reference
``ops.rglru.rglru_naive``); ``rglru_triton`` keeps the gates as torch ops and calls the bare scan.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...errors import InputError
from ...kernels._common import check_float, configs
from ...kernels.prune import autotune
from .gates import check_rglru_inputs, rglru_gates

_FWD_CONFIGS = configs(
    [
        triton.Config({"BLOCK_R": br, "BT": bt}, num_warps=nw)
        for br in (32, 64, 128)
        for bt in (16, 32, 64)
        for nw in (2, 4)
    ],
    triton.Config({"BLOCK_R": 32, "BT": 16}, num_warps=1),
)
_BWD_CONFIGS = _FWD_CONFIGS


@triton.jit
def _combine(a1, b1, a2, b2):
    """(a1, b1) then (a2, b2): h -> a2 (a1 h + b1) + b2."""
    return a1 * a2, a2 * b1 + b2


@triton.jit
def _row(x, rows, i):
    """Row i of a (BT, BLOCK_R) tile as a (BLOCK_R,) vector."""
    return tl.sum(tl.where(rows[:, None] == i, x, 0.0), 0)


@autotune(configs=_FWD_CONFIGS, key=["R", "HAS_H0"])
@triton.jit
def _scan_fwd_kernel(
    a_ptr, b_ptr, h0_ptr, h_ptr, hT_ptr, T, R, HAS_H0: tl.constexpr, BLOCK_R: tl.constexpr, BT: tl.constexpr
):
    pid_b = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    mask = offs < R
    rows = tl.arange(0, BT)
    base = pid_b * T * R  # (B, T, R) contiguous
    if HAS_H0:
        h = tl.load(h0_ptr + pid_b * R + offs, mask=mask, other=0.0).to(tl.float32)
    else:
        h = tl.zeros([BLOCK_R], dtype=tl.float32)
    for t0 in range(0, T, BT):
        rt = t0 + rows
        m2 = (rt < T)[:, None] & mask[None, :]
        p = base + rt[:, None] * R + offs[None, :]  # (BT, BLOCK_R)
        a = tl.load(a_ptr + p, mask=m2, other=1.0).to(tl.float32)  # steps past T: a = 1, b = 0 (h carried)
        b = tl.load(b_ptr + p, mask=m2, other=0.0).to(tl.float32)
        A, Bc = tl.associative_scan((a, b), 0, _combine)  # tile-local scan from a zero state
        ht = A * h[None, :] + Bc
        tl.store(h_ptr + p, ht.to(h_ptr.dtype.element_ty), mask=m2)
        h = _row(ht, rows, BT - 1)
    tl.store(hT_ptr + pid_b * R + offs, h, mask=mask)


@autotune(configs=_BWD_CONFIGS, key=["R", "HAS_H0"])
@triton.jit
def _scan_bwd_kernel(
    a_ptr,
    h_ptr,
    h0_ptr,
    dh_ptr,
    dhT_ptr,
    da_ptr,
    db_ptr,
    dh0_ptr,
    T,
    R,
    HAS_H0: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BT: tl.constexpr,
):
    pid_b = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    mask = offs < R
    rows = tl.arange(0, BT)
    base = pid_b * T * R
    g_next = tl.load(dhT_ptr + pid_b * R + offs, mask=mask, other=0.0).to(tl.float32)  # G at the next tile start
    NT = tl.cdiv(T, BT)
    for i in range(NT):
        t0 = (NT - 1 - i) * BT
        rt = t0 + rows
        m2 = (rt < T)[:, None] & mask[None, :]
        p = base + rt[:, None] * R + offs[None, :]
        # G_t = dh_t + a_{t+1} G_{t+1}: reverse scan of (a_{t+1}, dh_t); a_T := 1 carries dh_T into G_{T-1}
        an = tl.load(a_ptr + p + R, mask=((rt + 1) < T)[:, None] & mask[None, :], other=1.0).to(tl.float32)
        dh = tl.load(dh_ptr + p, mask=m2, other=0.0).to(tl.float32)
        A, Gc = tl.associative_scan((an, dh), 0, _combine, reverse=True)
        G = Gc + A * g_next[None, :]
        if HAS_H0:
            first = tl.load(h0_ptr + pid_b * R + offs, mask=mask, other=0.0).to(tl.float32)
        else:
            first = tl.zeros([BLOCK_R], dtype=tl.float32)
        hp = tl.load(h_ptr + p - R, mask=(rt >= 1)[:, None] & m2, other=0.0).to(tl.float32)  # h_{t-1}
        hp = tl.where((rt == 0)[:, None], first[None, :], hp)
        tl.store(da_ptr + p, (G * hp).to(da_ptr.dtype.element_ty), mask=m2)
        tl.store(db_ptr + p, G.to(db_ptr.dtype.element_ty), mask=m2)
        g_next = _row(G, rows, 0)
    a0 = tl.load(a_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(dh0_ptr + pid_b * R + offs, a0 * g_next, mask=mask)


def _grid(B, R):
    return lambda meta: (B, triton.cdiv(R, meta["BLOCK_R"]))


class LinearScanTriton(torch.autograd.Function):
    """``(a, b, h0, out_dtype) -> (h, h_T)``; a, b ``(B, T, R)`` contiguous, h0 ``(B, R)`` fp32 or None."""

    @staticmethod
    def forward(ctx, a, b, h0, out_dtype):
        B, T, R = b.shape
        h = torch.empty(B, T, R, device=b.device, dtype=out_dtype)
        hT = torch.empty(B, R, device=b.device, dtype=torch.float32)
        _scan_fwd_kernel[_grid(B, R)](a, b, h0 if h0 is not None else hT, h, hT, T, R, HAS_H0=h0 is not None)
        ctx.save_for_backward(a, h, h0)
        ctx.dtypes = (a.dtype, b.dtype)
        return h, hT

    @staticmethod
    def backward(ctx, dh, dhT):
        a, h, h0 = ctx.saved_tensors
        B, T, R = h.shape
        dh = dh.contiguous()
        dhT = dhT.float().contiguous()
        da = torch.empty(B, T, R, device=h.device, dtype=ctx.dtypes[0])
        db = torch.empty(B, T, R, device=h.device, dtype=ctx.dtypes[1])
        dh0 = torch.empty(B, R, device=h.device, dtype=torch.float32)
        _scan_bwd_kernel[_grid(B, R)](
            a, h, h0 if h0 is not None else dh0, dh, dhT, da, db, dh0, T, R, HAS_H0=h0 is not None
        )
        return da, db, (dh0 if h0 is not None else None), None


def linear_scan_triton(
    a: torch.Tensor, b: torch.Tensor, state: torch.Tensor | None = None, out_dtype: torch.dtype | None = torch.float32
):
    """``a, b (B, T, R)``, ``state (B, R)`` or None -> ``h (B, T, R)`` in ``out_dtype`` (default fp32, as
    ``ops.rglru.linear_scan``; pass the activation dtype to halve the write traffic) and ``h_T (B, R)`` fp32.

    Differentiable in a, b and state. With a 16-bit ``out_dtype`` the backward reads h_{t-1} rounded to that dtype.
    """
    if a.shape != b.shape or b.dim() != 3:
        raise InputError(f"a and b must both have shape (B, T, R), got {tuple(a.shape)} and {tuple(b.shape)}")
    if b.shape[1] == 0:
        raise InputError("a, b must have at least one time step (T >= 1)")
    check_float("a", a), check_float("b", b)
    if state is not None:
        if state.shape != (b.shape[0], b.shape[2]):
            raise InputError(f"state must have shape ({b.shape[0]}, {b.shape[2]}), got {tuple(state.shape)}")
        state = state.float().contiguous()
    out_dtype = out_dtype or torch.float32
    h, hT = LinearScanTriton.apply(a.contiguous(), b.contiguous(), state, out_dtype)
    return h, hT


def rglru_triton(x, gate_x, gate_a, a_param, reset=None, state=None, c: float = 8.0):
    """RG-LRU with the gates in torch (``ops.rglru.rglru_gates``) and the scan in Triton; same contract as
    ``ops.rglru.rglru`` (y in x's dtype, h_T fp32). ``rglru_fused_triton`` is the fused one-pass version."""

    if x.dim() != 3:
        raise InputError(f"x must have shape (B, T, R), got {tuple(x.shape)}")
    a, b = rglru_gates(x, gate_x, gate_a, a_param, reset, c)
    return linear_scan_triton(a, b, state, out_dtype=x.dtype)


# ------------------------------------------------------------------------------------------------ fused RG-LRU
@triton.jit
def _softplus(x):
    """log(1 + eˣ) to fp32's relative precision for every x. ``log(1 + e)`` alone loses it where e = eˣ is small
    (Λ̃ = −9: e = 1.2e-4, whose rounding in 1 + e leaves a 5e-4 relative error), and a log a that is off by that
    compounds over the ~1/(1 − a) tokens a strongly decaying channel remembers (fp32 y off by 3e-4 of max |y| on
    an H200 at T = 4096). Goldberg's correction log(w)·e/(w − 1), w = 1 + e, is exact to a few ulps without
    log1p, which Triton's core language lacks; where w rounds to 1, log(1 + e) = e."""
    e = tl.exp(tl.minimum(x, 20.0))
    w = 1.0 + e
    small = tl.where(w == 1.0, e, tl.log(w) * (e / tl.where(w == 1.0, 1.0, w - 1.0)))
    return tl.where(x > 20.0, x, small)


@triton.jit
def _one_minus_exp(z, u):
    """1 − eᶻ for z <= 0 to fp32's relative precision, given u = eᶻ as the caller computed it (the backward needs
    it too): −expm1 by Kahan's correction (1 − u)·z / log u. Near z = 0 the plain 1 − u keeps only |z|'s share of
    u's bits, and β = sqrt(1 − a²) of a slowly decaying channel (1 − a² ~ 1e-4) would carry a 6e-4 relative error
    into every input it scales. Only for u >= 1/2, where 1 − u is exact: a subnormal u (2 log a below −87, fast
    decaying channels) has few bits, log u is far from z there (β off by 0.35 %), and 1 − u needs no correction."""
    plain = u < 0.5
    r = (1.0 - u) * (z / tl.log(tl.where(plain | (u == 1.0), 0.5, u)))
    return tl.where(u == 1.0, -z, tl.where(plain, 1.0 - u, r))


@triton.jit
def _exp_near_one(z):
    """eᶻ for z <= 0, correct to fp32's rounding where it is near 1. Compiled for NVIDIA GPUs, ``tl.exp`` is PTX's
    ex2.approx.f32, off by up to ~2⁻²² relative, i.e. ~4 ulps of an a just below 1, and the same way for neighbouring
    inputs: the scan multiplies T such a's, so a slowly decaying channel's state drifts by ~T·2⁻²² (that error
    emulated in the interpreter: fp32 y off by 1.2e-4 of max |y| at T = 1024, tests/ops/test_rglru.py).
    1 − (1 − eᶻ), with 1 − eᶻ by Kahan's correction, needs only an accurate log (``tl.log`` compiles to libdevice's,
    checked in the PTX of triton 3.6 and 3.9) and leaves the exp's error in the term that is small."""
    u = tl.exp(z)
    return tl.where(u > 0.5, 1.0 - _one_minus_exp(z, u), u)


@triton.jit
def _rglru_gate_tile(ga, sp, c):
    """log a = −c σ(gate_a) softplus(Λ̃) on a tile; returns (r, log_a)."""
    r = tl.sigmoid(ga)
    return r, -c * r * sp[None, :]


@autotune(configs=_FWD_CONFIGS, key=["R", "HAS_RESET", "HAS_H0"])
@triton.jit
def _rglru_fwd_kernel(
    x_ptr,
    gx_ptr,
    ga_ptr,
    ap_ptr,
    rs_ptr,
    h0_ptr,
    y_ptr,
    hT_ptr,
    T,
    R,
    c,
    HAS_RESET: tl.constexpr,
    HAS_H0: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BT: tl.constexpr,
):
    pid_b = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    mask = offs < R
    rows = tl.arange(0, BT)
    base = pid_b * T * R
    ap = tl.load(ap_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sp = _softplus(ap)  # softplus(Λ̃)
    if HAS_H0:
        h = tl.load(h0_ptr + pid_b * R + offs, mask=mask, other=0.0).to(tl.float32)
    else:
        h = tl.zeros([BLOCK_R], dtype=tl.float32)
    for t0 in range(0, T, BT):
        rt = t0 + rows
        mt = rt < T
        m2 = mt[:, None] & mask[None, :]
        p = base + rt[:, None] * R + offs[None, :]
        x = tl.load(x_ptr + p, mask=m2, other=0.0).to(tl.float32)
        ig = tl.sigmoid(tl.load(gx_ptr + p, mask=m2, other=0.0).to(tl.float32))
        r, log_a = _rglru_gate_tile(tl.load(ga_ptr + p, mask=m2, other=0.0).to(tl.float32), sp, c)
        a = _exp_near_one(log_a)
        beta = tl.sqrt(_one_minus_exp(2.0 * log_a, tl.exp(2.0 * log_a)))
        if HAS_RESET:
            rs = (tl.load(rs_ptr + pid_b * T + rt, mask=mt, other=0) != 0)[:, None]
            a = tl.where(rs, 0.0, a)
            beta = tl.where(rs, 1.0, beta)
        a = tl.where(m2, a, 1.0)  # steps past T carry h unchanged
        b = tl.where(m2, beta * ig * x, 0.0)
        A, Bc = tl.associative_scan((a, b), 0, _combine)
        ht = A * h[None, :] + Bc
        tl.store(y_ptr + p, ht.to(y_ptr.dtype.element_ty), mask=m2)
        h = _row(ht, rows, BT - 1)
    tl.store(hT_ptr + pid_b * R + offs, h, mask=mask)


@autotune(configs=_BWD_CONFIGS, key=["R", "HAS_RESET", "HAS_H0"])
@triton.jit
def _rglru_bwd_kernel(
    x_ptr,
    gx_ptr,
    ga_ptr,
    ap_ptr,
    rs_ptr,
    h0_ptr,
    y_ptr,
    dy_ptr,
    dhT_ptr,
    dx_ptr,
    dgx_ptr,
    dga_ptr,
    dsp_ptr,
    dh0_ptr,
    T,
    R,
    c,
    HAS_RESET: tl.constexpr,
    HAS_H0: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BT: tl.constexpr,
):
    """Reverse pass in tiles: G_t = dy_t + a_{t+1} G_{t+1} (reverse associative scan); da_t = G_t h_{t-1},
    db_t = G_t, then the chain rule through the gates (sqrt with the bounded derivative 1/sqrt(max(4u, 1e-6)) of
    ``ops.rglru.gates``); ∂/∂softplus(Λ̃) summed over t per program into dsp (B, R)."""
    pid_b = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    mask = offs < R
    rows = tl.arange(0, BT)
    base = pid_b * T * R
    ap = tl.load(ap_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sp = _softplus(ap)
    g_next = tl.load(dhT_ptr + pid_b * R + offs, mask=mask, other=0.0).to(tl.float32)
    dsp = tl.zeros([BLOCK_R], dtype=tl.float32)
    if HAS_H0:
        first = tl.load(h0_ptr + pid_b * R + offs, mask=mask, other=0.0).to(tl.float32)
    else:
        first = tl.zeros([BLOCK_R], dtype=tl.float32)
    NT = tl.cdiv(T, BT)
    for i in range(NT):
        t0 = (NT - 1 - i) * BT
        rt = t0 + rows
        mt = rt < T
        m2 = mt[:, None] & mask[None, :]
        p = base + rt[:, None] * R + offs[None, :]
        # a_{t+1} (recomputed from its gate; 1 past the end so that dh_T reaches G_{T-1})
        mn = ((rt + 1) < T)[:, None] & mask[None, :]
        _, log_an = _rglru_gate_tile(tl.load(ga_ptr + p + R, mask=mn, other=0.0).to(tl.float32), sp, c)
        an = _exp_near_one(log_an)
        if HAS_RESET:
            rsn = (tl.load(rs_ptr + pid_b * T + rt + 1, mask=(rt + 1) < T, other=0) != 0)[:, None]
            an = tl.where(rsn, 0.0, an)
        an = tl.where(mn, an, 1.0)
        dy = tl.load(dy_ptr + p, mask=m2, other=0.0).to(tl.float32)
        A, Gc = tl.associative_scan((an, dy), 0, _combine, reverse=True)
        G = Gc + A * g_next[None, :]  # G_t
        g_next = _row(G, rows, 0)

        x = tl.load(x_ptr + p, mask=m2, other=0.0).to(tl.float32)
        ig = tl.sigmoid(tl.load(gx_ptr + p, mask=m2, other=0.0).to(tl.float32))
        r, log_a = _rglru_gate_tile(tl.load(ga_ptr + p, mask=m2, other=0.0).to(tl.float32), sp, c)
        a = _exp_near_one(log_a)
        e2 = tl.exp(2.0 * log_a)
        u = _one_minus_exp(2.0 * log_a, e2)
        beta = tl.sqrt(u)
        hp = tl.load(y_ptr + p - R, mask=(rt >= 1)[:, None] & m2, other=0.0).to(tl.float32)  # h_{t-1}
        hp = tl.where((rt == 0)[:, None], first[None, :], hp)
        # ∂/∂log a through a and through β = sqrt(1 − e^{2 log a})
        dlog_a = G * hp * a + G * ig * x * (-2.0 * e2) / tl.sqrt(tl.maximum(4.0 * u, 1e-6))
        if HAS_RESET:
            rs = (tl.load(rs_ptr + pid_b * T + rt, mask=mt, other=0) != 0)[:, None]
            beta = tl.where(rs, 1.0, beta)
            dlog_a = tl.where(rs, 0.0, dlog_a)
        dlog_a = tl.where(m2, dlog_a, 0.0)
        tl.store(dx_ptr + p, (G * beta * ig).to(dx_ptr.dtype.element_ty), mask=m2)
        tl.store(dgx_ptr + p, (G * beta * x * ig * (1.0 - ig)).to(dgx_ptr.dtype.element_ty), mask=m2)
        tl.store(dga_ptr + p, (dlog_a * (-c * sp[None, :]) * r * (1.0 - r)).to(dga_ptr.dtype.element_ty), mask=m2)
        dsp += tl.sum(dlog_a * (-c * r), 0)
    # dh0 = a_0 G_0
    _, log_a0 = _rglru_gate_tile(tl.load(ga_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)[None, :], sp, c)
    a0 = tl.sum(_exp_near_one(log_a0), 0)
    if HAS_RESET:
        a0 = tl.where(tl.load(rs_ptr + pid_b * T) != 0, 0.0, a0)
    tl.store(dsp_ptr + pid_b * R + offs, dsp, mask=mask)
    tl.store(dh0_ptr + pid_b * R + offs, a0 * g_next, mask=mask)


class RGLRUFusedTriton(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gx, ga, a_param, reset_u8, h0, c):
        B, T, R = x.shape
        y = torch.empty_like(x)
        hT = torch.empty(B, R, device=x.device, dtype=torch.float32)
        rs = reset_u8 if reset_u8 is not None else hT
        _rglru_fwd_kernel[_grid(B, R)](
            x,
            gx,
            ga,
            a_param,
            rs,
            h0 if h0 is not None else hT,
            y,
            hT,
            T,
            R,
            float(c),
            HAS_RESET=reset_u8 is not None,
            HAS_H0=h0 is not None,
        )
        ctx.save_for_backward(x, gx, ga, a_param, reset_u8, h0, y)
        ctx.c = float(c)
        return y, hT

    @staticmethod
    def backward(ctx, dy, dhT):
        x, gx, ga, a_param, reset_u8, h0, y = ctx.saved_tensors
        B, T, R = x.shape
        dx, dgx, dga = torch.empty_like(x), torch.empty_like(gx), torch.empty_like(ga)
        dsp = torch.empty(B, R, device=x.device, dtype=torch.float32)
        dh0 = torch.empty(B, R, device=x.device, dtype=torch.float32)
        rs = reset_u8 if reset_u8 is not None else dsp
        _rglru_bwd_kernel[_grid(B, R)](
            x,
            gx,
            ga,
            a_param,
            rs,
            h0 if h0 is not None else dsp,
            y,
            dy.contiguous(),
            dhT.float().contiguous(),
            dx,
            dgx,
            dga,
            dsp,
            dh0,
            T,
            R,
            ctx.c,
            HAS_RESET=reset_u8 is not None,
            HAS_H0=h0 is not None,
        )
        da_param = (dsp.sum(0) * torch.sigmoid(a_param.float())).to(a_param.dtype)  # softplus' = sigmoid
        return dx, dgx, dga, da_param, None, (dh0 if h0 is not None else None), None


def rglru_fused_triton(x, gate_x, gate_a, a_param, reset=None, state=None, c: float = 8.0):
    """Fused RG-LRU: gates, decay, sqrt-normalised input and the scan in one pass (reads x and two gate
    pre-activations, writes y: 4·N·s bytes); backward is one reverse pass with the gate chain rule.

    Same contract as ``ops.rglru.rglru``: ``x, gate_x, gate_a (B, T, R)``, ``a_param (R)``, ``reset (B, T)`` bool,
    ``state (B, R)`` -> ``y (B, T, R)`` in x's dtype, ``h_T (B, R)`` fp32. Gate math in fp32 whatever the input dtype
    (the torch reference does it in the activation dtype). The backward reads h_{t-1} from y (x's dtype).
    """

    check_rglru_inputs(x, gate_x, gate_a, a_param, reset)
    if x.shape[1] == 0:
        raise InputError("x must have at least one time step")
    if state is not None and state.shape != (x.shape[0], x.shape[2]):
        raise InputError(f"state must have shape ({x.shape[0]}, {x.shape[2]}), got {tuple(state.shape)}")
    for name, t in (("x", x), ("gate_x", gate_x), ("gate_a", gate_a), ("a_param", a_param)):
        check_float(name, t)
    rs = None if reset is None else reset.to(torch.uint8).contiguous()
    state = None if state is None else state.float().contiguous()
    return RGLRUFusedTriton.apply(
        x.contiguous(), gate_x.contiguous(), gate_a.contiguous(), a_param.contiguous(), rs, state, c
    )
