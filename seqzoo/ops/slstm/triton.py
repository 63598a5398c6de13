"""Triton sLSTM forward (arXiv:2405.04517 §2.2): the recurrence of ``naive.py`` with R held on chip across T.

Per head and step (gate order i, f, z, o; ``wx`` already holds W x_t + b)::

    g_t = wx_t + h_{t-1} R                      R: (d, 4d), one block of the block-diagonal recurrent kernel
    m_t = max(i, logsigmoid(f) + m_{t-1})       (m_t = i where n_{t-1} == 0: the first step)
    i' = exp(i - m_t),  f' = exp(logsigmoid(f) + m_{t-1} - m_t)
    c_t = f' c_{t-1} + i' tanh(z),  n_t = f' n_{t-1} + i',  h_t = sigmoid(o) c_t / n_t

One program per (batch tile of BLOCK_B rows, head): the head's four (d, d) gate blocks of R are loaded once
before the time loop and stay in registers; each step reads one (BLOCK_B, 4, d) slice of ``wx``, does four
``tl.dot`` of h_{t-1} with the gate blocks (fp32, ``input_precision="ieee"``: TF32 would round h every step and
the error would compound over T), the pointwise update in fp32, and writes h_t. Packed documents: where
``segment_pos == 0`` the state entering the step is set to zeros first, as ``naive.py`` does.

Forward only: inputs that require a gradient are refused (the hand-written backward through time is not written
yet). Reference: ``seqzoo.ops.slstm.slstm_naive`` (tests/ops/test_slstm_triton.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ...errors import InputError
from ...kernels._common import check_float, configs, next_pow2
from ...kernels.prune import autotune
from .common import check_inputs

# Largest head width whose four (d, d) fp32 gate blocks are kept on chip: 4·64·64·4 B = 64 KiB per program,
# spread over the program's registers. Wider heads would need R streamed from memory every step.
MAX_HEAD_DIM = 64
BLOCK_B = 16  # batch rows per program; tl.dot needs tiles of at least 16 on each side

# warps per program: more warps spread R over more registers (fewer per thread) but share one step's short work
_FWD_CONFIGS = configs(
    [triton.Config({}, num_warps=nw) for nw in (2, 4, 8)],
    triton.Config({}, num_warps=4),
)


@triton.jit
def _sigmoid(x):
    return 1.0 / (1.0 + tl.exp(-x))


@triton.jit
def _logsigmoid(x):
    """log(sigmoid(x)) = min(x, 0) - log(1 + e^{-|x|}), never exp of a large positive number."""
    return tl.minimum(x, 0.0) - tl.log(1.0 + tl.exp(-tl.abs(x)))


@triton.jit
def _tanh(x):
    """tanh through e^{-2|x|} (in (0, 1], no overflow) and the sign of x."""
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def _gate_block(R_ptr, head_base, rows, cols, gate, d, mask2):
    """The (D, D) block R[head, :, gate, :] (zeros outside d x d)."""
    p = R_ptr + head_base + rows[:, None] * (4 * d) + gate * d + cols[None, :]
    return tl.load(p, mask=mask2, other=0.0).to(tl.float32)


@autotune(configs=_FWD_CONFIGS, key=["d", "HAS_STATE", "HAS_SEG"])
@triton.jit
def _slstm_fwd_kernel(
    wx_ptr,
    R_ptr,
    state_ptr,  # (4, B, H*d) fp32: h, c, n, m entering the call (read only when HAS_STATE)
    seg_ptr,  # (B, T) int64 segment positions (read only when HAS_SEG)
    out_ptr,  # (B, T, H, d) in wx's dtype
    final_ptr,  # (4, B, H*d) fp32
    B,
    T,
    H,
    d,
    HAS_STATE: tl.constexpr,
    HAS_SEG: tl.constexpr,
    BLOCK_B: tl.constexpr,
    D: tl.constexpr,
):
    pid_b = tl.program_id(0)
    head = tl.program_id(1)
    bs = (pid_b * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)
    cols = tl.arange(0, D)
    row_ok = bs < B
    col_ok = cols < d
    ok = row_ok[:, None] & col_ok[None, :]

    # R on chip for the whole sequence: four (D, D) blocks, read from memory once
    rows_r = tl.arange(0, D)
    rmask = (rows_r < d)[:, None] & col_ok[None, :]
    head_base = head.to(tl.int64) * d * 4 * d
    R_i = _gate_block(R_ptr, head_base, rows_r, cols, 0, d, rmask)
    R_f = _gate_block(R_ptr, head_base, rows_r, cols, 1, d, rmask)
    R_z = _gate_block(R_ptr, head_base, rows_r, cols, 2, d, rmask)
    R_o = _gate_block(R_ptr, head_base, rows_r, cols, 3, d, rmask)

    HD = H * d
    st = bs[:, None] * HD + head * d + cols[None, :]  # (BLOCK_B, D) offsets into a (B, H*d) state
    plane = B * HD
    if HAS_STATE:
        h = tl.load(state_ptr + st, mask=ok, other=0.0)
        c = tl.load(state_ptr + plane + st, mask=ok, other=0.0)
        n = tl.load(state_ptr + 2 * plane + st, mask=ok, other=0.0)
        m = tl.load(state_ptr + 3 * plane + st, mask=ok, other=0.0)
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
        logf = _logsigmoid(fg)
        first = n == 0.0
        m_new = tl.where(first, ig, tl.maximum(ig, logf + m))
        ip = tl.exp(ig - m_new)
        # f' = 0 on a first step (it multiplies the zero state); logf + m - m_new <= 0 otherwise, so no overflow
        fp = tl.where(first, 0.0, tl.exp(tl.where(first, 0.0, logf + m - m_new)))
        c = fp * c + ip * _tanh(zg)
        n = fp * n + ip
        h = _sigmoid(og) * c / n
        m = m_new
        tl.store(out_ptr + out_row + t * HD, h.to(out_ptr.dtype.element_ty), mask=ok)

    tl.store(final_ptr + st, h, mask=ok)
    tl.store(final_ptr + plane + st, c, mask=ok)
    tl.store(final_ptr + 2 * plane + st, n, mask=ok)
    tl.store(final_ptr + 3 * plane + st, m, mask=ok)


def _refuse_grad(wx, R, state) -> None:
    """No backward yet: a gradient through this mode would be silently missing, so refuse it."""
    if not torch.is_grad_enabled():
        return
    tensors = [("wx", wx), ("R", R)] + ([] if state is None else list(zip(("h", "c", "n", "m"), state)))
    wanting = [name for name, t in tensors if t.requires_grad]
    if wanting:
        raise InputError(
            f"slstm: mode='triton' has no backward yet, so {', '.join(wanting)} must not require grad "
            "(run under torch.no_grad(), or use mode='fused'/'native' for training)"
        )


def slstm_triton(wx, R, state=None, segment_pos=None):
    """``wx (B, T, H, 4, d)``, ``R (H, d, 4, d)``, ``state (h, c, n, m)`` each ``(B, H*d)`` or None ->
    ``h (B, T, H, d)`` in wx's dtype and the final ``(h, c, n, m)`` each ``(B, H*d)`` float32, as ``slstm_naive``.
    ``segment_pos (B, T)``: 0 where a document starts (the state is reset to zeros before that step). Forward only."""
    B, T, H, d = check_inputs(wx, R, state, segment_pos)
    check_float("wx", wx), check_float("R", R)
    if d > MAX_HEAD_DIM:
        raise InputError(f"slstm: mode='triton' keeps R on chip for head dims d <= {MAX_HEAD_DIM}, got d={d}")
    if T < 1:
        raise InputError("slstm: wx must have at least one time step (T >= 1)")
    _refuse_grad(wx, R, state)
    wx = wx.contiguous()
    Rc = R.contiguous()
    dev = wx.device
    states_in = None if state is None else torch.stack([s.to(device=dev, dtype=torch.float32) for s in state])
    seg = None if segment_pos is None else segment_pos.to(device=dev, dtype=torch.int64).contiguous()
    out = torch.empty(B, T, H, d, device=dev, dtype=wx.dtype)
    final = torch.empty(4, B, H * d, device=dev, dtype=torch.float32)
    grid = (triton.cdiv(B, BLOCK_B), H)
    _slstm_fwd_kernel[grid](
        wx,
        Rc,
        states_in.contiguous() if states_in is not None else final,
        seg if seg is not None else final,
        out,
        final,
        B,
        T,
        H,
        d,
        HAS_STATE=states_in is not None,
        HAS_SEG=seg is not None,
        BLOCK_B=BLOCK_B,
        D=next_pow2(d),
    )
    return out, tuple(final.unbind(0))


__all__ = ["MAX_HEAD_DIM", "slstm_triton"]
