"""Triton sLSTM for wide heads (d > 64): R streamed from memory in tiles inside every step, and its BPTT.

Per head and step, as ``triton.py`` (arXiv:2405.04517 §2.2, gate order i, f, z, o)::

    g_t = wx_t + h_{t-1} R          R: (d, 4d), one block of the block-diagonal recurrent kernel
    (h, c, n, m)_t = cell_step(g_t, (c, n, m)_{t-1})        (triton_cell.py: the stabilised exponential gating)

R of one head (4·d·d values: 4 MiB at d = 512 in fp32) does not fit on chip, so each step re-reads it from global
memory (L2-resident across steps and batch tiles) in (BLOCK_K, BLOCK_N) tiles. One program per (batch tile of
BLOCK_B rows, head) walks the time loop; inside a step it loops over output tiles of BLOCK_N columns, each
accumulating the four gates' ``h_{t-1}[:, k-tile] @ R[k-tile, g, n-tile]`` over the BLOCK_K-row tiles in fp32
(``input_precision="ieee"``), then runs the pointwise step on that tile. The running state lives in global scratch
owned by the program: c, n, m in ``final`` (read and written per column tile, in place), h double-buffered in
``hbuf`` (step t reads plane t % 2 and writes the other, since every output tile reads all of h_{t-1}). A CTA
barrier (``tl.debug_barrier``) ends each step so that the next one sees every tile's h_t. Programs of one launch
never share scratch (disjoint rows and heads), so no cross-program sync is needed.

Backward (``_slstm_bwd_streamed_kernel``): stores, does not recompute — it reads the pre-activations ``G`` and
the states ``S`` of every step that the forward saved (fp32, the same records as ``triton.py``). Walking
t = T-1 .. 0, each step has two phases split by a barrier: (1) per column tile, the local derivatives
(``triton_cell.py: cell_grads``) give dG_t (written to d wx) and the gradients of c, n, m entering the step (in
place in ``dstate``); (2) per row tile of the head's inputs, dh_{t-1} = Σ_g dG_t[g] R[:, g, :]^T over column tiles,
R read transposed from memory. Both kernels first copy their entering state (the initial state, the final
state's gradient) into their scratch, so re-running a launch (the autotuner's timing runs) gives the same result.
dR = Σ_{b,t} h_{t-1}^T dG_t is one batched product in PyTorch after the kernel (``triton.py``).
Reference: ``seqzoo.ops.slstm.slstm_naive`` (tests/ops/test_slstm_triton_streamed.py).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...kernels._common import configs
from ...kernels.prune import autotune
from .triton_cell import cell_grads, cell_step, load_planes, saved_step, store_planes

# (BLOCK_N, BLOCK_K) tiles of R per step and warps: wider tiles read R in fewer, larger loads but hold four
# (BLOCK_B, BLOCK_N) accumulators and four (BLOCK_K, BLOCK_N) R tiles at once
_CONFIGS = configs(
    [
        triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=nw, num_stages=1)
        for bn in (32, 64)
        for bk in (32, 64)
        for nw in (4, 8)
    ],
    triton.Config({"BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=1),
)


@triton.jit
def _program(R_ptr, B, T, H, d, BLOCK_B: tl.constexpr):
    """This program's batch rows (int64) and which exist; one state plane's size; the (BLOCK_B, 1) offsets of its
    head's slice in a (B, H*d) state, in wx / the pre-activations and in the output; its head's block of R."""
    head = tl.program_id(1)
    bs = (tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)
    HD = H * d
    row_st = bs[:, None] * HD + head * d
    wx_row = bs[:, None] * T * H * 4 * d + head * 4 * d
    out_row = bs[:, None] * T * HD + head * d
    return bs, bs < B, B * HD, row_st, wx_row, out_row, R_ptr + head.to(tl.int64) * d * 4 * d


@triton.jit
def _fresh(seg_ptr, bs, row_ok, T, t, HAS_SEG: tl.constexpr):
    """(BLOCK_B, 1): True where a document starts at step t (always False without packed documents)."""
    fresh = (bs < 0)[:, None]
    if HAS_SEG:
        sp = tl.load(seg_ptr + bs * T + t, mask=row_ok, other=1)
        fresh = (sp == 0)[:, None]
    return fresh


@triton.jit
def _enter(
    src_ptr,
    dst_ptr,
    h_ptr,
    plane,
    row_st,
    row_ok,
    d,
    HAS_SRC: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Copy the four planes entering the time loop (``src``, or zeros without ``HAS_SRC``) into the program's
    scratch ``dst`` and the first plane also to ``h_ptr``; a barrier, so every tile sees them."""
    nn = tl.arange(0, BLOCK_N)
    for n0 in range(0, d, BLOCK_N):
        cols = n0 + nn
        ok = row_ok[:, None] & (cols < d)[None, :]
        st = row_st + cols[None, :]
        if HAS_SRC:
            x0, x1, x2, x3 = load_planes(src_ptr, plane, st, ok)
        else:
            x0 = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
            x1, x2, x3 = x0, x0, x0
        store_planes(dst_ptr, plane, st, ok, x0, x1, x2, x3)
        tl.store(h_ptr + st, x0, mask=ok)
    tl.debug_barrier()


@autotune(configs=_CONFIGS, key=["d", "HAS_STATE", "HAS_SEG", "SAVE"])
@triton.jit
def _slstm_fwd_streamed_kernel(
    wx_ptr,  # (B, T, H, 4, d)
    R_ptr,  # (H, d, 4, d)
    state_ptr,  # (4, B, H*d) fp32: h, c, n, m entering the call (read only when HAS_STATE)
    seg_ptr,  # (B, T) int64 segment positions (read only when HAS_SEG)
    out_ptr,  # (B, T, H, d) in wx's dtype
    final_ptr,  # (4, B, H*d) fp32: the running state (c, n, m in place; h_t each step), the final state at the end
    g_save_ptr,  # (B, T, H, 4, d) fp32 pre-activations, written when SAVE
    s_save_ptr,  # (4, T+1, B, H*d) fp32 states after each step, written at t+1 when SAVE
    B,
    T,
    H,
    d,
    hbuf_ptr,  # (2, B, H*d) fp32 scratch: h_{t-1} in plane t % 2, h_t written to the other
    HAS_STATE: tl.constexpr,
    HAS_SEG: tl.constexpr,
    SAVE: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    bs, row_ok, plane, row_st, wx_row, out_row, R_head = _program(R_ptr, B, T, H, d, BLOCK_B)
    HD = H * d
    nn = tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)

    # the entering state (zeros for a fresh stream) into the scratch
    _enter(state_ptr, final_ptr, hbuf_ptr, plane, row_st, row_ok, d, HAS_STATE, BLOCK_B, BLOCK_N)

    for t in range(T):
        fresh = _fresh(seg_ptr, bs, row_ok, T, t, HAS_SEG)
        h_prev = hbuf_ptr + (t % 2) * plane
        h_next = hbuf_ptr + ((t + 1) % 2) * plane
        for n0 in range(0, d, BLOCK_N):
            cols = n0 + nn
            ok = row_ok[:, None] & (cols < d)[None, :]
            acc_i = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
            acc_f = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
            acc_z = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
            acc_o = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
            for k0 in range(0, d, BLOCK_K):
                ks = k0 + kk
                hk = tl.load(h_prev + row_st + ks[None, :], mask=row_ok[:, None] & (ks < d)[None, :], other=0.0)
                if HAS_SEG:  # a document starts: the step reads the fresh state
                    hk = tl.where(fresh, 0.0, hk)
                r_ok = (ks < d)[:, None] & (cols < d)[None, :]
                rp = R_head + ks[:, None] * (4 * d) + cols[None, :]  # R[head, k-tile, gate, n-tile]
                acc_i += tl.dot(hk, tl.load(rp, mask=r_ok, other=0.0).to(tl.float32), input_precision="ieee")
                acc_f += tl.dot(hk, tl.load(rp + d, mask=r_ok, other=0.0).to(tl.float32), input_precision="ieee")
                acc_z += tl.dot(hk, tl.load(rp + 2 * d, mask=r_ok, other=0.0).to(tl.float32), input_precision="ieee")
                acc_o += tl.dot(hk, tl.load(rp + 3 * d, mask=r_ok, other=0.0).to(tl.float32), input_precision="ieee")
            st = row_st + cols[None, :]
            _, c, n, m = load_planes(final_ptr, plane, st, ok)
            if HAS_SEG:
                c = tl.where(fresh, 0.0, c)
                n = tl.where(fresh, 0.0, n)
                m = tl.where(fresh, 0.0, m)
            ig, fg, zg, og = load_planes(wx_ptr + wx_row + t * H * 4 * d + cols[None, :], d, 0, ok)
            ig += acc_i
            fg += acc_f
            zg += acc_z
            og += acc_o
            h, c, n, m = cell_step(ig, fg, zg, og, c, n, m)
            tl.store(out_ptr + out_row + t * HD + cols[None, :], h.to(out_ptr.dtype.element_ty), mask=ok)
            tl.store(h_next + st, h, mask=ok)
            store_planes(final_ptr, plane, st, ok, h, c, n, m)
            if SAVE:
                store_planes(g_save_ptr + wx_row + t * H * 4 * d + cols[None, :], d, 0, ok, ig, fg, zg, og)
                store_planes(s_save_ptr + (t + 1) * plane, (T + 1) * plane, st, ok, h, c, n, m)
        tl.debug_barrier()  # every tile's h_t is written before step t + 1 reads it


@autotune(configs=_CONFIGS, key=["d", "HAS_SEG"])
@triton.jit
def _slstm_bwd_streamed_kernel(
    R_ptr,
    g_save_ptr,  # (B, T, H, 4, d) fp32 pre-activations from the forward
    s_save_ptr,  # (4, T+1, B, H*d) fp32 states: index 0 the initial state, t+1 the state after step t
    seg_ptr,
    dout_ptr,  # (B, T, H, d) gradient of the outputs
    dfinal_ptr,  # (4, B, H*d) fp32 gradient of the final state
    dg_ptr,  # (B, T, H, 4, d) fp32: gradient of the pre-activations (= of wx)
    dstate_ptr,  # (4, B, H*d) fp32: the running gradient of the state, at the end that of the initial state
    B,
    T,
    H,
    d,
    HAS_SEG: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    bs, row_ok, plane, row_st, wx_row, out_row, R_head = _program(R_ptr, B, T, H, d, BLOCK_B)
    HD = H * d
    SP = (T + 1) * plane  # one of h, c, n, m over all steps
    nn = tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)

    # gradients reaching the final state from later on, into the scratch
    _enter(dfinal_ptr, dstate_ptr, dstate_ptr, plane, row_st, row_ok, d, True, BLOCK_B, BLOCK_N)

    for i in range(T):
        t = T - 1 - i
        fresh = _fresh(seg_ptr, bs, row_ok, T, t, HAS_SEG)
        # phase 1, per column tile: dG_t and the gradients of c, n, m entering step t
        for n0 in range(0, d, BLOCK_N):
            cols = n0 + nn
            ok = row_ok[:, None] & (cols < d)[None, :]
            st = row_st + cols[None, :]
            ig, fg, zg, og, c_prev, n_prev, m_prev, c_t, n_t, m_t = saved_step(
                g_save_ptr + wx_row + t * H * 4 * d + cols[None, :],
                d,
                s_save_ptr + t * plane + st,
                plane,
                SP,
                ok,
                fresh,
                HAS_SEG,
            )
            dh, dc, dn, dm = load_planes(dstate_ptr, plane, st, ok)
            dht = tl.load(dout_ptr + out_row + t * HD + cols[None, :], mask=ok, other=0.0).to(tl.float32) + dh
            dgi, dgf, dgz, dgo, dc, dn, dm = cell_grads(
                ig, fg, zg, og, c_prev, n_prev, m_prev, c_t, n_t, m_t, dht, dc, dn, dm, ok
            )
            store_planes(dg_ptr + wx_row + t * H * 4 * d + cols[None, :], d, 0, ok, dgi, dgf, dgz, dgo)
            if HAS_SEG:  # step t read zeros: nothing flows on to the state before the document start
                dc = tl.where(fresh, 0.0, dc)
                dn = tl.where(fresh, 0.0, dn)
                dm = tl.where(fresh, 0.0, dm)
            tl.store(dstate_ptr + plane + st, dc, mask=ok)
            tl.store(dstate_ptr + 2 * plane + st, dn, mask=ok)
            tl.store(dstate_ptr + 3 * plane + st, dm, mask=ok)
        tl.debug_barrier()  # all of dG_t written, all of dh_t read
        # phase 2, per row tile of the inputs: dh_{t-1} = sum over gates and column tiles of dG_t R^T
        for k0 in range(0, d, BLOCK_K):
            ks = k0 + kk
            acc = tl.zeros([BLOCK_B, BLOCK_K], dtype=tl.float32)
            for n0 in range(0, d, BLOCK_N):
                cols = n0 + nn
                g_ok = row_ok[:, None] & (cols < d)[None, :]
                gp = dg_ptr + wx_row + t * H * 4 * d + cols[None, :]
                r_ok = (cols < d)[:, None] & (ks < d)[None, :]
                rp = R_head + ks[None, :] * (4 * d) + cols[:, None]  # R[head, k-tile, gate, n-tile] transposed
                for g in tl.static_range(4):
                    dgg = tl.load(gp + g * d, mask=g_ok, other=0.0)
                    acc += tl.dot(dgg, tl.load(rp + g * d, mask=r_ok, other=0.0).to(tl.float32), input_precision="ieee")
            if HAS_SEG:
                acc = tl.where(fresh, 0.0, acc)
            tl.store(dstate_ptr + row_st + ks[None, :], acc, mask=row_ok[:, None] & (ks < d)[None, :])
        tl.debug_barrier()  # dh_{t-1} complete before step t - 1 reads it


__all__: list[str] = []  # launched by triton.py: _launch_forward, _launch_backward
