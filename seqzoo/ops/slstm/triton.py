"""Triton sLSTM (arXiv:2405.04517 §2.2): the recurrence of ``naive.py`` and its BPTT, chosen by head width d:
R held on chip across T for d <= ``MAX_HEAD_DIM`` (64, this module), R streamed from memory in tiles every step
for wider heads (``triton_streamed.py``). ``slstm_triton`` is the one entry point for both.

Per head and step (gate order i, f, z, o; ``wx`` already holds W x_t + b)::

    g_t = wx_t + h_{t-1} R                      R: (d, 4d), one block of the block-diagonal recurrent kernel
    m_t = max(i, logsigmoid(f) + m_{t-1})       (m_t = i where n_{t-1} == 0: the first step)
    i' = exp(i - m_t),  f' = exp(logsigmoid(f) + m_{t-1} - m_t)
    c_t = f' c_{t-1} + i' tanh(z),  n_t = f' n_{t-1} + i',  h_t = sigmoid(o) c_t / n_t

On-chip path: one program per (batch tile of BLOCK_B rows, head): the head's four (d, d) gate blocks of R are
loaded once before the time loop and stay in registers; each step reads one (BLOCK_B, 4, d) slice of ``wx``, does
four ``tl.dot`` of h_{t-1} with the gate blocks (fp32, ``input_precision="ieee"``: TF32 would round h every step
and the error would compound over T), the pointwise update in fp32 (``triton_cell.py: cell_step``), and writes
h_t. Packed documents: where ``segment_pos == 0`` the state entering the step is set to zeros first, as
``naive.py`` does.

Backward (``_slstm_bwd_kernel``, when a gradient is needed): the forward also saves the pre-activations and the
states of every step (fp32: stored, not recomputed); one program per (batch tile, head) holds R^T on chip and walks
t = T-1 .. 0 with the local derivatives of ``fused.py: _SLSTMFunction.backward`` (``triton_cell.py: cell_grads``,
the same chain through h, c, n, m, cut at document starts), writing dG (= d wx) per step; dh_{t-1} = dG_t R^T is
four ``tl.dot``. dR = Σ_{b,t} h_{t-1}^T dG_t is one batched product in PyTorch after the kernel. Reference:
``seqzoo.ops.slstm.slstm_naive`` (tests/ops/test_slstm_triton.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...errors import InputError
from ...kernels._common import check_float, configs, next_pow2
from ...kernels.prune import autotune
from . import triton_streamed
from .common import check_inputs
from .triton_cell import cell_grads, cell_step, load_planes, saved_step, store_planes

# Largest head width whose four (d, d) fp32 gate blocks are kept on chip: 4·64·64·4 B = 64 KiB per program,
# spread over the program's registers. Wider heads run triton_streamed.py (R re-read from memory every step).
MAX_HEAD_DIM = 64
BLOCK_B = 16  # batch rows per program; tl.dot needs tiles of at least 16 on each side

# warps per program: more warps spread R over more registers (fewer per thread) but share one step's short work
_FWD_CONFIGS = configs(
    [triton.Config({}, num_warps=nw) for nw in (2, 4, 8)],
    triton.Config({}, num_warps=4),
)


@triton.jit
def _program_tile(B, d, BLOCK_B: tl.constexpr, D: tl.constexpr):
    """This program's batch rows ``bs`` (int64), which of them exist, and the (BLOCK_B, D) mask of real entries."""
    bs = (tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)
    row_ok = bs < B
    ok = row_ok[:, None] & (tl.arange(0, D) < d)[None, :]
    return bs, row_ok, ok


@triton.jit
def _gate_blocks(R_ptr, head, d, D: tl.constexpr):
    """The head's four (D, D) blocks R[head, :, g, :] for g = i, f, z, o in fp32 (zeros outside d x d)."""
    rows = tl.arange(0, D)
    cols = tl.arange(0, D)
    mask = (rows < d)[:, None] & (cols < d)[None, :]
    p = R_ptr + head.to(tl.int64) * d * 4 * d + rows[:, None] * (4 * d) + cols[None, :]
    R_i = tl.load(p, mask=mask, other=0.0).to(tl.float32)
    R_f = tl.load(p + d, mask=mask, other=0.0).to(tl.float32)
    R_z = tl.load(p + 2 * d, mask=mask, other=0.0).to(tl.float32)
    R_o = tl.load(p + 3 * d, mask=mask, other=0.0).to(tl.float32)
    return R_i, R_f, R_z, R_o


@autotune(configs=_FWD_CONFIGS, key=["d", "HAS_STATE", "HAS_SEG", "SAVE"])
@triton.jit
def _slstm_fwd_kernel(
    wx_ptr,
    R_ptr,
    state_ptr,  # (4, B, H*d) fp32: h, c, n, m entering the call (read only when HAS_STATE)
    seg_ptr,  # (B, T) int64 segment positions (read only when HAS_SEG)
    out_ptr,  # (B, T, H, d) in wx's dtype
    final_ptr,  # (4, B, H*d) fp32
    g_save_ptr,  # (B, T, H, 4, d) fp32 pre-activations, written when SAVE (for the backward)
    s_save_ptr,  # (4, T+1, B, H*d) fp32 states h, c, n, m after each step, written at t+1 when SAVE
    B,
    T,
    H,
    d,
    HAS_STATE: tl.constexpr,
    HAS_SEG: tl.constexpr,
    SAVE: tl.constexpr,
    BLOCK_B: tl.constexpr,
    D: tl.constexpr,
):
    head = tl.program_id(1)
    bs, row_ok, ok = _program_tile(B, d, BLOCK_B, D)
    cols = tl.arange(0, D)
    R_i, R_f, R_z, R_o = _gate_blocks(R_ptr, head, d, D)  # on chip for the whole sequence, read once

    HD = H * d
    st = bs[:, None] * HD + head * d + cols[None, :]  # (BLOCK_B, D) offsets into a (B, H*d) state
    plane = B * HD
    if HAS_STATE:
        h, c, n, m = load_planes(state_ptr, plane, st, ok)
    else:
        h = tl.zeros([BLOCK_B, D], dtype=tl.float32)
        c = tl.zeros([BLOCK_B, D], dtype=tl.float32)
        n = tl.zeros([BLOCK_B, D], dtype=tl.float32)
        m = tl.zeros([BLOCK_B, D], dtype=tl.float32)

    # padded rows/columns read zeros: they run first steps from a zero state (n = 1, h = 0), never NaN, never stored
    wx_row = bs[:, None] * T * H * 4 * d + head * 4 * d + cols[None, :]
    out_row = bs[:, None] * T * HD + head * d + cols[None, :]
    for t in range(T):
        if HAS_SEG:
            sp = tl.load(seg_ptr + bs * T + t, mask=row_ok, other=1)
            fresh = (sp == 0)[:, None]
            h = tl.where(fresh, 0.0, h)
            c = tl.where(fresh, 0.0, c)
            n = tl.where(fresh, 0.0, n)
            m = tl.where(fresh, 0.0, m)
        p = wx_ptr + wx_row + t * H * 4 * d
        ig = tl.load(p, mask=ok, other=0.0).to(tl.float32) + tl.dot(h, R_i, input_precision="ieee")
        fg = tl.load(p + d, mask=ok, other=0.0).to(tl.float32) + tl.dot(h, R_f, input_precision="ieee")
        zg = tl.load(p + 2 * d, mask=ok, other=0.0).to(tl.float32) + tl.dot(h, R_z, input_precision="ieee")
        og = tl.load(p + 3 * d, mask=ok, other=0.0).to(tl.float32) + tl.dot(h, R_o, input_precision="ieee")
        h, c, n, m = cell_step(ig, fg, zg, og, c, n, m)
        tl.store(out_ptr + out_row + t * HD, h.to(out_ptr.dtype.element_ty), mask=ok)
        if SAVE:
            store_planes(g_save_ptr + wx_row + t * H * 4 * d, d, 0, ok, ig, fg, zg, og)
            store_planes(s_save_ptr + (t + 1) * plane, (T + 1) * plane, st, ok, h, c, n, m)

    store_planes(final_ptr, plane, st, ok, h, c, n, m)


@autotune(configs=_FWD_CONFIGS, key=["d", "HAS_SEG"])
@triton.jit
def _slstm_bwd_kernel(
    R_ptr,
    g_save_ptr,  # (B, T, H, 4, d) fp32 pre-activations from the forward
    s_save_ptr,  # (4, T+1, B, H*d) fp32 states: index 0 the initial state, t+1 the state after step t
    seg_ptr,
    dout_ptr,  # (B, T, H, d) gradient of the outputs
    dfinal_ptr,  # (4, B, H*d) fp32 gradient of the final state
    dg_ptr,  # (B, T, H, 4, d) fp32: gradient of the pre-activations (= of wx)
    dinit_ptr,  # (4, B, H*d) fp32: gradient of the initial state
    B,
    T,
    H,
    d,
    HAS_SEG: tl.constexpr,
    BLOCK_B: tl.constexpr,
    D: tl.constexpr,
):
    """Backward through time, t = T-1 .. 0, with R on chip (used transposed: dh_{t-1} = dG_t R^T)."""
    head = tl.program_id(1)
    bs, row_ok, ok = _program_tile(B, d, BLOCK_B, D)
    cols = tl.arange(0, D)
    R_i, R_f, R_z, R_o = _gate_blocks(R_ptr, head, d, D)
    Rt_i, Rt_f, Rt_z, Rt_o = tl.trans(R_i), tl.trans(R_f), tl.trans(R_z), tl.trans(R_o)

    HD = H * d
    st = bs[:, None] * HD + head * d + cols[None, :]
    plane = B * HD
    SP = (T + 1) * plane  # one of h, c, n, m over all steps
    dh, dc, dn, dm = load_planes(dfinal_ptr, plane, st, ok)  # gradients reaching the state from later on
    wx_row = bs[:, None] * T * H * 4 * d + head * 4 * d + cols[None, :]
    out_row = bs[:, None] * T * HD + head * d + cols[None, :]
    for i in range(T):
        t = T - 1 - i
        fresh = row_ok[:, None]  # unused without HAS_SEG
        if HAS_SEG:
            sp = tl.load(seg_ptr + bs * T + t, mask=row_ok, other=1)
            fresh = (sp == 0)[:, None]
        gp = g_save_ptr + wx_row + t * H * 4 * d
        ig, fg, zg, og, c_prev, n_prev, m_prev, c_t, n_t, m_t = saved_step(
            gp, d, s_save_ptr + t * plane + st, plane, SP, ok, fresh, HAS_SEG
        )
        dht = tl.load(dout_ptr + out_row + t * HD, mask=ok, other=0.0).to(tl.float32) + dh
        dgi, dgf, dgz, dgo, dc, dn, dm = cell_grads(
            ig, fg, zg, og, c_prev, n_prev, m_prev, c_t, n_t, m_t, dht, dc, dn, dm, ok
        )
        store_planes(dg_ptr + wx_row + t * H * 4 * d, d, 0, ok, dgi, dgf, dgz, dgo)
        dh = tl.dot(dgi, Rt_i, input_precision="ieee") + tl.dot(dgf, Rt_f, input_precision="ieee")
        dh += tl.dot(dgz, Rt_z, input_precision="ieee") + tl.dot(dgo, Rt_o, input_precision="ieee")
        if HAS_SEG:  # step t read zeros: nothing flows on to the state before the document start
            dh = tl.where(fresh, 0.0, dh)
            dc = tl.where(fresh, 0.0, dc)
            dn = tl.where(fresh, 0.0, dn)
            dm = tl.where(fresh, 0.0, dm)
    store_planes(dinit_ptr, plane, st, ok, dh, dc, dn, dm)


def _forward(wx, R, init, seg, save: bool):
    """Launch the forward; ``init (4, B, H*d)`` fp32 or None. -> out, final (4, B, H*d), G and S when ``save``."""
    B, T, H, _, d = wx.shape
    dev = wx.device
    out = torch.empty(B, T, H, d, device=dev, dtype=wx.dtype)
    final = torch.empty(4, B, H * d, device=dev, dtype=torch.float32)
    G = S = final  # unused pointers without save
    if save:
        G = torch.empty(B, T, H, 4, d, device=dev, dtype=torch.float32)
        S = torch.empty(4, T + 1, B, H * d, device=dev, dtype=torch.float32)
        S[:, 0] = 0.0 if init is None else init
    _launch_forward(wx, R, init, seg, out, final, G, S, save)
    return out, final, G, S


def _launch_forward(wx, R, init, seg, out, final, G, S, save: bool) -> None:
    """The forward kernel for this head width into the given buffers: R on chip for d <= ``MAX_HEAD_DIM``, else
    streamed (``triton_streamed.py``, with its h scratch)."""
    B, T, H, _, d = wx.shape
    if d <= MAX_HEAD_DIM:
        kernel, extra = _slstm_fwd_kernel, {"D": next_pow2(d)}
    else:
        hbuf = torch.empty(2, B, H * d, device=wx.device, dtype=torch.float32)
        kernel, extra = triton_streamed._slstm_fwd_streamed_kernel, {"hbuf_ptr": hbuf}
    kernel[(triton.cdiv(B, BLOCK_B), H)](
        wx,
        R,
        init if init is not None else final,
        seg if seg is not None else final,
        out,
        final,
        G,
        S,
        B,
        T,
        H,
        d,
        HAS_STATE=init is not None,
        HAS_SEG=seg is not None,
        SAVE=save,
        BLOCK_B=BLOCK_B,
        **extra,
    )


def _launch_backward(R, G, S, seg, dout, dfinal, dG, dinit) -> None:
    """The backward through time for this head width into ``dG`` and ``dinit`` (the records of a saving forward)."""
    B, T, H, _, d = G.shape
    if d <= MAX_HEAD_DIM:
        kernel, extra = _slstm_bwd_kernel, {"D": next_pow2(d)}
    else:
        kernel, extra = triton_streamed._slstm_bwd_streamed_kernel, {}
    kernel[(triton.cdiv(B, BLOCK_B), H)](
        R,
        G,
        S,
        seg if seg is not None else dinit,
        dout,
        dfinal,
        dG,
        dinit,
        B,
        T,
        H,
        d,
        HAS_SEG=seg is not None,
        BLOCK_B=BLOCK_B,
        **extra,
    )


class _SLSTMTriton(torch.autograd.Function):
    """``(wx, R, init (4, B, H*d) fp32, seg) -> (out, final (4, B, H*d))`` with the Triton BPTT as backward."""

    @staticmethod
    def forward(ctx, wx, R, init, seg):
        out, final, G, S = _forward(wx, R, init, seg, save=True)
        ctx.save_for_backward(R, G, S, seg)
        ctx.wx_dtype, ctx.has_init = wx.dtype, init is not None
        return out, final

    @staticmethod
    def backward(ctx, dout, dfinal):
        R, G, S, seg = ctx.saved_tensors
        B, T, H, _, d = G.shape
        dout = torch.zeros(B, T, H, d, device=G.device) if dout is None else dout.contiguous()
        dfinal = torch.zeros(4, B, H * d, device=G.device) if dfinal is None else dfinal.float().contiguous()
        dG = torch.empty_like(G)
        dinit = torch.empty(4, B, H * d, device=G.device, dtype=torch.float32)
        _launch_backward(R, G, S, seg, dout, dfinal, dG, dinit)
        # dR = sum over b, t of h_read^T dG_t: one batched product after the loop (h_read is 0 at a document start)
        h_read = S[0, :T].reshape(T, B, H, d)
        if seg is not None:
            h_read = torch.where((seg == 0).t()[:, :, None, None], 0.0, h_read)
        dR = torch.einsum("tbhj,bthgl->hjgl", h_read, dG)
        return dG.to(ctx.wx_dtype), dR.to(R.dtype), (dinit if ctx.has_init else None), None


def slstm_triton(wx, R, state=None, segment_pos=None):
    """``wx (B, T, H, 4, d)``, ``R (H, d, 4, d)``, ``state (h, c, n, m)`` each ``(B, H*d)`` or None ->
    ``h (B, T, H, d)`` in wx's dtype and the final ``(h, c, n, m)`` each ``(B, H*d)`` float32, as ``slstm_naive``.
    ``segment_pos (B, T)``: 0 where a document starts (the state is reset to zeros before that step).
    Differentiable in wx, R and state (the Triton backward through time; dR summed in PyTorch). Any head width:
    d <= ``MAX_HEAD_DIM`` keeps R on chip, wider heads stream it (``triton_streamed.py``)."""
    B, T, H, d = check_inputs(wx, R, state, segment_pos)
    check_float("wx", wx), check_float("R", R)
    if T < 1:
        raise InputError("slstm: wx must have at least one time step (T >= 1)")
    dev = wx.device
    init = None if state is None else torch.stack([s.to(device=dev, dtype=torch.float32) for s in state])
    seg = None if segment_pos is None else segment_pos.to(device=dev, dtype=torch.int64).contiguous()
    grad = torch.is_grad_enabled() and (
        wx.requires_grad or R.requires_grad or (init is not None and init.requires_grad)
    )
    if grad:
        out, final = _SLSTMTriton.apply(wx.contiguous(), R.contiguous(), init, seg)
    else:
        out, final, _, _ = _forward(wx.contiguous(), R.contiguous(), init, seg, save=False)
    return out, tuple(final.unbind(0))


__all__ = ["MAX_HEAD_DIM", "slstm_triton"]
