"""The mLSTM layer's headwise (block-diagonal) q / k / v maps (arXiv:2405.04517 §2.4: "LinearHeadwiseExpand"):

    y[..., n, o] = sum_i W[n, o, i] x[..., n, i]        x (..., nb * bs_in), W (nb, bs_out, bs_in)

``headwise_reference`` is that equation as an einsum. ``headwise_matmul`` computes it as batched matmuls over
groups of blocks (any block shape, any device and dtype). ``headwise_native`` runs ``headwise.c`` for the
xLSTM's blocks of 4 x 4 on CPU: one pass over x forward and one over (x, dy) backward, in the rotated form of the
C file's header, where the matmul form multiplies mostly zeros (8x the useful flops at the grouped width of 32)
and copies x into block-major order and back. ``headwise`` picks: the C path for CPU float32 / float64 blocks of
4 x 4 from ``_GROUP_MIN_TOKENS`` tokens on where it builds (not under autocast or torch.compile), else the
matmuls.
"""

from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ..native_build import SUFFIX, NativeLibrary, pointer, row_cuts, run_rows, split_rows

_i64, _ptr, _lay = ctypes.c_int64, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
_LIB = NativeLibrary(
    Path(__file__).with_name("headwise.c"),
    "mlstm-headwise",
    {
        **{f"headwise4_forward_{s}": [_i64, _i64, _i64, _ptr, _i64, _ptr, _ptr, _lay, _i64, _ptr, _ptr]
           for s in SUFFIX.values()},
        **{f"headwise4_backward_{s}": [_i64, _i64, _i64, _ptr, _lay, _ptr, _i64, _ptr, _i64, _ptr, _ptr, _ptr,
                                       ctypes.c_int, _ptr] for s in SUFFIX.values()},
    },
)  # fmt: skip
library, unavailable = _LIB.library, _LIB.unavailable
MAX_GATES = 16  # as headwise.c


def headwise_reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The equation as an einsum: ``x (..., nb*bs_in)``, ``weight (nb, bs_out, bs_in)`` -> ``(..., nb*bs_out)``."""
    nb, bs_out, bs_in = weight.shape
    y = torch.einsum("...ni,noi->...no", x.unflatten(-1, (nb, bs_in)), weight)
    return y.flatten(-2)


# blocks are computed in groups of this many input features: a (G·bs) x (G·bs) block-diagonal matmul per group does
# G times the useful flops, but at GEMM speed, where a batched matmul with an inner size of 4 runs far below it
_GROUP_WIDTH = 32


# below this many tokens (decoding) the blocks are one bmm as they are: building the grouped weight costs more
_GROUP_MIN_TOKENS = 64


@functools.cache  # asked on every q/k/v map, forward and backward
def _group(nb: int, bs: int) -> int:
    """How many blocks share one group matmul: the largest divisor of nb with G·bs <= ``_GROUP_WIDTH`` (>= 1)."""
    return max(g for g in range(1, nb + 1) if nb % g == 0 and g * bs <= max(bs, _GROUP_WIDTH))


def _many_tokens(x: torch.Tensor) -> bool:
    """Whether ``x (..., E)`` has ``_GROUP_MIN_TOKENS`` tokens or more (below: decoding, where the plain bmm and
    the separate maps cost less than grouping or a C call)."""
    return x.numel() >= _GROUP_MIN_TOKENS * x.shape[-1]


def _group_for(x: torch.Tensor, nb: int, bs: int) -> int:
    """The group size for input ``x`` (..., nb·bs): ``_group`` from ``_GROUP_MIN_TOKENS`` tokens on, else 1."""
    return _group(nb, bs) if _many_tokens(x) else 1


def _grouped_weight(weight: torch.Tensor, G: int) -> torch.Tensor:
    """``(nb, bs_out, bs_in)`` -> ``(nb/G, G·bs_out, G·bs_in)``: each group's blocks on a block diagonal."""
    if G == 1:
        return weight
    nb, bo, bi = weight.shape
    wg = weight.new_zeros(nb // G, G, G, bo, bi)
    idx = torch.arange(G, device=weight.device)
    wg[:, idx, idx] = weight.view(nb // G, G, bo, bi)
    return wg.permute(0, 1, 3, 2, 4).reshape(nb // G, G * bo, G * bi)


def _headwise_bmm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    nb, bs_out, bs_in = weight.shape
    G = _group_for(x, nb, bs_in)
    y = torch.bmm(x.reshape(-1, nb // G, G * bs_in).transpose(0, 1), _grouped_weight(weight, G).transpose(1, 2))
    return y.transpose(0, 1).reshape(*x.shape[:-1], nb * bs_out)  # y was (nb/G, N, G·bs_out)


def _matmul_dtype(x: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype ``bmm`` would compute the map in: autocast's where it is on for x's device, else the inputs'."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return torch.promote_types(x.dtype, weight.dtype)


class _HeadwiseMatmul(torch.autograd.Function):
    """Saves ``x`` itself (which the layer keeps anyway) instead of the block-major copy that ``bmm`` would save:
    6 of an mLSTM layer's ~58 MB of training activations at T = 1024 (3 maps); backward redoes the transpose. The
    weight gradient is the group matmul's full (G·bs_out x G·bs_in) gradient, of which the diagonal blocks are kept:
    6x faster on CPU than a batched matmul of (bs_out x N) by (N x bs_in) blocks at N = 4096, nb = 128, bs = 4."""

    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        ctx.dtype = _matmul_dtype(x, weight)
        with torch.autocast(x.device.type, enabled=False):
            return _headwise_bmm(x.to(ctx.dtype), weight.to(ctx.dtype))

    @staticmethod
    def backward(ctx, gy):
        x_in, w_in = ctx.saved_tensors
        # the backward runs outside autocast: its matmuls take the forward's dtype explicitly, and the gradients
        # return in the inputs' own dtypes
        x, weight, gy = x_in.to(ctx.dtype), w_in.to(ctx.dtype), gy.to(ctx.dtype)
        nb, bs_out, bs_in = weight.shape
        G = _group_for(x, nb, bs_in)
        gyt = gy.reshape(-1, nb // G, G * bs_out).transpose(0, 1)  # (nb/G, N, G·bs_out)
        gx = gw = None
        if ctx.needs_input_grad[0]:
            gx = torch.bmm(gyt, _grouped_weight(weight, G)).transpose(0, 1).reshape(x.shape)
        if ctx.needs_input_grad[1]:
            full = torch.bmm(gyt.transpose(1, 2), x.reshape(-1, nb // G, G * bs_in).transpose(0, 1))
            blocks = full.view(nb // G, G, bs_out, G, bs_in).diagonal(dim1=1, dim2=3)  # (nb/G, bs_out, bs_in, G)
            gw = blocks.permute(0, 3, 1, 2).reshape(nb, bs_out, bs_in).to(w_in.dtype)
        return None if gx is None else gx.to(x_in.dtype), gw


def headwise_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Block-diagonal map: ``x (B, T, nb*bs_in)``, ``weight (nb, bs_out, bs_in)`` -> ``(B, T, nb*bs_out)``,
    ``y[..., n, o] = sum_i W[n, o, i] x[..., n, i]``.

    One ``bmm`` over groups of blocks with the tokens as rows (``_GROUP_WIDTH``: groups of 8 blocks of 4 x 4 are
    (32 x 32) block-diagonal matmuls, 2.5x faster on CPU than one bmm over the 128 blocks of 4 x 4);
    ``einsum("btni,noi->btno")`` reaches a bmm through more permutes and copies."""
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _HeadwiseMatmul.apply(x, weight)
    return _headwise_bmm(x, weight)


# _ROTATION[o, s] = (o + s) % 4: the input (forward) or output (backward) index that rotation s pairs with o
_ROTATION = torch.tensor([[(o + s) % 4 for s in range(4)] for o in range(4)])


def _rotated(weight: torch.Tensor) -> torch.Tensor:
    """``(nb, 4, 4)`` -> ``(4, nb*4)``: row s holds ``weight[n, o, (o + s) % 4]`` at ``4n + o``."""
    idx = _ROTATION.to(weight.device).expand(weight.shape[0], 4, 4)
    return weight.gather(2, idx).permute(2, 0, 1).reshape(4, -1).contiguous()


def _unrotated(rows: torch.Tensor, nb: int) -> torch.Tensor:
    """The inverse of ``_rotated``: ``(4, nb*4)`` -> ``(nb, 4, 4)``."""
    idx = _ROTATION.to(rows.device).expand(nb, 4, 4)
    return rows.new_zeros(nb, 4, 4).scatter_(2, idx, rows.view(4, nb, 4).permute(1, 2, 0))


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x (..., E)`` as ``(N, E)`` rows with unit column stride, a view where the strides allow one."""
    rows = x.reshape(-1, x.shape[-1])
    return rows if rows.stride(-1) == 1 else rows.contiguous()


def _native_fits(x: torch.Tensor, weight: torch.Tensor, *more: torch.Tensor) -> bool:
    """Whether the C path takes ``x`` and block weight ``weight`` (blocks of 4 x 4, E a multiple of 32 bytes, CPU
    float32 / float64, built), with ``more`` tensors (other inputs and weights) of the same dtype on the CPU."""
    return (
        weight.dim() == 3
        and weight.shape[1:] == (4, 4)
        and x.shape[-1] == 4 * weight.shape[0]
        and x.dtype in SUFFIX
        and x.shape[-1] % _lanes(x.dtype) == 0
        and all(t.dtype == x.dtype and t.device.type == "cpu" for t in (x, weight, *more))
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()  # a C call would break the compiled graph
        and library() is not None
    )


def _lanes(dtype: torch.dtype) -> int:
    """Elements per vector of ``headwise.c`` (VBYTES = 32)."""
    return 32 // dtype.itemsize


def _layout(shape: torch.Size, heads: int, dtype: torch.dtype) -> tuple[tuple[int, ...], int]:
    """The outputs' layout for ``x (..., E)`` of ``shape``: ``(T, sb, st, sh, K)`` as ``headwise.c`` reads it, and
    the number of heads it splits E into: (B, H, T, K) buffers for ``heads`` > 1 where K is a multiple of the vector
    width and x is (B, T, E) (the layout the chunkwise cell reads, so that it copies none of q, k, v), else (N, E)."""
    E = shape[-1]
    if heads > 1 and len(shape) == 3 and E % heads == 0 and (E // heads) % _lanes(dtype) == 0:
        T, K = shape[1], E // heads
        return (T, heads * T * K, K, T * K, K), heads
    N = max(1, math.prod(shape[:-1]))
    return (N, N * E, E, E, E), 1


def _outputs(rows: torch.Tensor, shape: torch.Size, heads: int) -> torch.Tensor:
    """An empty output for ``_layout``, shaped (B, T, H, K) for heads > 1, else as x."""
    E = shape[-1]
    if heads > 1:
        B, T, K = shape[0], shape[1], E // heads
        return rows.new_empty(B, heads, T, K).transpose(1, 2)
    return rows.new_empty(shape)


def _gate_weight_grad(gg: torch.Tensor, y: torch.Tensor, heads: int) -> torch.Tensor:
    """``gg^T y``: ``gg (N, G)``, ``y`` an output of ``_outputs`` (N rows of E) -> ``(G, E)``; for heads > 1 as
    (B·H) matmuls of (G x T) by (T x K) over y's (B, H, T, K) buffer, which a flat (N, E) view would copy."""
    if heads == 1:
        return gg.t() @ y.reshape(gg.shape[0], -1)
    B, T, H, K = y.shape
    per_head = torch.matmul(gg.view(B, T, -1).transpose(1, 2)[:, None], y.transpose(1, 2))  # (B, H, G, K)
    return per_head.sum(0).transpose(0, 1).reshape(-1, H * K)


def _gate_parts(w_gates: torch.Tensor | None, E: int, n_maps: int) -> list:
    """The gate weight's (G, E) column block per map, contiguous for the C calls (None per map without gates)."""
    return [None] * n_maps if w_gates is None else [w.contiguous() for w in w_gates.split(E, dim=1)]


def _int64s(values) -> ctypes.Array:
    return (ctypes.c_int64 * len(values))(*values)


class _MapsNative(torch.autograd.Function):
    """Headwise maps of one or two inputs, each map ``m`` reading input ``owners[m]``, optionally with gate
    pre-activations ``gates = [y_0; y_1; ...] Wg^T + bg`` summed in the same pass (``headwise.c``); the outputs in
    ``_layout``'s (B, H, T, K) buffers when ``heads`` > 1."""

    @staticmethod
    def forward(ctx, owners, with_gates, heads, *tensors):
        n_in, n_maps = max(owners) + 1, len(owners)
        xs, ws = tensors[:n_in], tensors[n_in : n_in + n_maps]
        rows = [_rows(x) for x in xs]
        (N, E), dt, shape = rows[0].shape, xs[0].dtype, xs[0].shape
        lay, heads = _layout(shape, heads, dt)
        G = tensors[-2].shape[0] if with_gates else 0
        wg = _gate_parts(tensors[-2] if with_gates else None, E, n_maps)
        gates = tensors[-1].expand(N, G).contiguous() if with_gates else None  # the bias; each map adds its part
        ys = [_outputs(rows[0], shape, heads) for _ in ws]
        D = [_rotated(w) for w in ws]  # kept alive here: the C calls read them through raw pointers
        fn, clay = getattr(library(), f"headwise4_forward_{SUFFIX[dt]}"), _int64s(lay)

        def call(r0, r1):
            return [
                fn(r0, r1 - r0, E, pointer(rows[o]), rows[o].stride(0), pointer(d), pointer(y), clay, G, pointer(g),
                   None if gates is None else pointer(gates[r0]))
                for o, d, g, y in zip(owners, D, wg, ys)
            ]  # fmt: skip

        if any(r for rcs in split_rows(N, call) for r in rcs):
            raise RuntimeError("mlstm headwise native forward (headwise.c): refused its shapes")
        # with gates, the outputs too (for the gate weights' gradient): the chunkwise cell keeps the same buffers
        ctx.save_for_backward(*rows, *ws, *((tensors[-2], *ys) if with_gates else ()))
        ctx.owners, ctx.with_gates, ctx.heads, ctx.shape = owners, with_gates, heads, shape
        outs = tuple(ys)
        return (*outs, gates.view(*shape[:-1], G)) if with_gates else outs

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        owners, with_gates, heads, shape = ctx.owners, ctx.with_gates, ctx.heads, ctx.shape
        n_in, n_maps = max(owners) + 1, len(owners)
        saved = ctx.saved_tensors
        rows, ws = saved[:n_in], saved[n_in : n_in + n_maps]
        (N, E), dt = rows[0].shape, rows[0].dtype
        lay, _ = _layout(shape, heads, dt)
        wg_full, ys = (saved[n_in + n_maps], saved[n_in + n_maps + 1 :]) if with_gates else (None, ())
        G = wg_full.shape[0] if with_gates else 0
        wg = _gate_parts(wg_full, E, n_maps)

        def in_layout(g):  # y's gradient in the outputs' layout (free when it arrives as the cell leaves it); 0 if None
            if g is None:
                return _outputs(rows[0], shape, heads).zero_()
            g = g.to(dt)
            return g.transpose(1, 2).contiguous().transpose(1, 2) if heads > 1 else g.contiguous()

        gys = [in_layout(g) for g in grads[:n_maps]]
        gg = None
        if with_gates:
            gg = rows[0].new_zeros(N, G) if grads[n_maps] is None else grads[n_maps].to(dt).reshape(N, G).contiguous()
        gxs = [rows[0].new_empty(N, E) if ctx.needs_input_grad[3 + i] else None for i in range(n_in)]
        first = {r0: i for i, r0 in enumerate(row_cuts(N)[:-1])}
        acc = torch.zeros(len(first), n_maps, 4, E, dtype=torch.float64)  # per thread's rows (C adds to it)
        fn, clay = getattr(library(), f"headwise4_backward_{SUFFIX[dt]}"), _int64s(lay)
        Et = [_rotated(w.transpose(1, 2)) for w in ws]

        def call(r0, r1):
            written, rcs = set(), []
            for m, o in enumerate(owners):  # in order: a second map of the same input adds to its gradient
                gx = gxs[o]
                rcs.append(fn(r0, r1 - r0, E, pointer(gys[m]), clay, pointer(rows[o]), rows[o].stride(0),
                              pointer(Et[m]), G, pointer(wg[m]), None if gg is None else pointer(gg[r0]),
                              None if gx is None else pointer(gx[r0]), int(o in written), pointer(acc[first[r0], m])))  # fmt: skip
                written.add(o)
            return any(rcs)

        run_rows(N, call, "mlstm headwise native backward (headwise.c)")
        sums = acc.sum(0)  # (maps, 4, E)
        gws = [_unrotated(sums[m].to(w.dtype), w.shape[0]) for m, w in enumerate(ws)]
        gin = [None if g is None else g.view(shape) for g in gxs]
        extra = [torch.cat([_gate_weight_grad(gg, y, heads) for y in ys], dim=1), gg.sum(0)] if with_gates else []
        return (None, None, None, *gin, *gws, *extra)


def headwise_native(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``headwise_reference`` through ``headwise.c`` (``_native_fits``); forward and backward."""
    return _MapsNative.apply((0,), False, 1, x, weight)[0]


def headwise(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Block-diagonal map ``x (B, T, nb*bs_in)``, ``weight (nb, bs_out, bs_in)`` -> ``(B, T, nb*bs_out)``: the C
    path from ``_GROUP_MIN_TOKENS`` tokens on where ``_native_fits``, else ``headwise_matmul``."""
    if _many_tokens(x) and _native_fits(x, weight):
        return headwise_native(x, weight)
    return headwise_matmul(x, weight)


def linear_parts(xs, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``[x_0; x_1; ...] weight^T + bias`` without the concatenated input: one matmul per part."""
    parts = weight.split([x.shape[-1] for x in xs], dim=1)
    # contiguous parts: with a column slice of w as the weight, the CPU backward computed the (parts x out)
    # weight gradient as x^T @ g, 10x slower than g^T @ x at (4096 x 512) inputs
    if torch.is_grad_enabled() and weight.requires_grad:
        parts = [p.contiguous() for p in parts]
    out = F.linear(xs[0], parts[0], bias)
    for x, wp in zip(xs[1:], parts[1:]):
        out = out + F.linear(x, wp)
    return out


def qkv_gates_reference(x_c, x_m, wq, wk, wv, w_gates, b_gates, n_heads: int = 1):
    """The NeurIPS mLSTM layer's q, k (from the conv branch ``x_c (B, T, E)``), v (from ``x_m``) and its gate
    pre-activations ``[q; k; v] w_gates^T + b_gates`` (B, T, G), as separate maps and matmuls; q, k, v are
    (B, T, E), or (B, T, H, E / H) for ``n_heads`` = H > 1."""
    q, k, v = headwise(x_c, wq), headwise(x_c, wk), headwise(x_m, wv)
    gates = linear_parts((q, k, v), w_gates, b_gates)
    if n_heads > 1:
        q, k, v = (t.unflatten(-1, (n_heads, -1)) for t in (q, k, v))
    return q, k, v, gates


def qkv_gates(x_c, x_m, wq, wk, wv, w_gates, b_gates, n_heads: int = 1):
    """``qkv_gates_reference``; in one C pass forward and one backward (gates summed beside the maps, q, k, v
    written per head as the chunkwise cell reads them) where it fits: the inputs ``_native_fits``, at most
    ``MAX_GATES`` gates, from ``_GROUP_MIN_TOKENS`` tokens on."""
    if (
        _many_tokens(x_c)
        and x_m.shape == x_c.shape
        and w_gates.dim() == 2
        and w_gates.shape[1] == 3 * x_c.shape[-1]  # the C calls read E columns per map
        and b_gates.shape == w_gates.shape[:1]
        and w_gates.shape[0] <= MAX_GATES
        and _native_fits(x_c, wq, x_m, wk, wv, w_gates, b_gates)
        and wk.shape == wq.shape == wv.shape
    ):
        q, k, v, gates = _MapsNative.apply((0, 0, 1), True, n_heads, x_c, x_m, wq, wk, wv, w_gates, b_gates)
        if n_heads > 1 and q.dim() == x_c.dim():  # the layout kept (N, E) rows (K not a multiple of the vectors)
            q, k, v = (t.unflatten(-1, (n_heads, -1)) for t in (q, k, v))
        return q, k, v, gates
    return qkv_gates_reference(x_c, x_m, wq, wk, wv, w_gates, b_gates, n_heads)
