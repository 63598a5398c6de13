"""Out-of-bounds check of every Triton kernel, for every distinct autotune config, under the CPU interpreter.

Run as a script (``python tests/kernel_bounds.py [OPS [CASE]]``, e.g. ``mlstm,gla T37``, in its own process: it imports the kernel modules with their
GPU autotune lists instead of the interpreter's one config), it prints one JSON line per (op case, config index):
the masked-in loads and stores whose address falls outside every tensor argument of that launch.

Why: an index or mask slip that reads or writes past a tensor is silent under the interpreter (it reads whatever
memory is there) and in a test that compares outputs only (the stray write may land in a tensor nobody checks),
but on a GPU it is ``cudaErrorIllegalAddress``, which also poisons every later CUDA call of that process. Each
launch's allowed memory is the extent of its tensor arguments (``_init_args_hst`` sees them); every load and store
the interpreter performs is checked against it (``create_masked_load`` / ``create_masked_store``, which the
unmasked ``tl.load`` / ``tl.store`` also go through).

Only the meta-parameters (block sizes) change what the interpreter computes, so configs that differ in
``num_warps`` / ``num_stages`` alone are run once.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager

import numpy as np
import torch

_violations: list[dict] = []
_ranges: list[np.ndarray] = []  # the launch's tensor extents: [starts, ends], sorted by start
_kernel = [""]


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """[first byte, one past the last byte] of the elements a strided view can address."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _tensors(o)


def _check(ptrs, mask, kind: str) -> None:
    addr = np.asarray(ptrs.data).astype(np.uint64)
    on = np.broadcast_to(np.asarray(mask.data, dtype=bool), addr.shape)
    used = addr[on]
    if used.size == 0:
        return
    size = ptrs.get_element_ty().primitive_bitwidth // 8
    lo, hi = _ranges
    j = np.searchsorted(lo, used, side="right") - 1  # the tensor starting at or before each address
    inside = (j >= 0) & (used + np.uint64(size) <= hi[np.maximum(j, 0)])
    bad = used[~inside]
    if bad.size:
        _violations.append({"kernel": _kernel[0], "kind": kind, "count": int(bad.size)})


@contextmanager
def bounds_checked():
    """Within: the interpreter records each launch's tensor extents and checks every load and store against them,
    appending to ``_violations``."""
    from triton.runtime import interpreter as itp

    init = itp.GridExecutor._init_args_hst

    def init_checked(self, args_dev, kwargs):
        args_hst, kwargs_hst = init(self, args_dev, kwargs)
        extents = sorted(_extent(t) for t in _tensors([*args_hst, *kwargs_hst.values()]))  # once per launch
        _ranges[:] = [np.array([e[i] for e in extents], dtype=np.uint64) for i in (0, 1)]
        _kernel[0] = self.fn.__name__
        return args_hst, kwargs_hst

    load, store = itp.InterpreterBuilder.create_masked_load, itp.InterpreterBuilder.create_masked_store

    def load_checked(self, ptrs, mask, other, cache_policy, is_volatile):
        _check(ptrs, mask, "load")
        return load(self, ptrs, mask, other, cache_policy, is_volatile)

    def store_checked(self, ptrs, value, mask, cache_policy):
        _check(ptrs, mask, "store")
        return store(self, ptrs, value, mask, cache_policy)

    itp.GridExecutor._init_args_hst = init_checked
    itp.InterpreterBuilder.create_masked_load = load_checked
    itp.InterpreterBuilder.create_masked_store = store_checked
    try:
        yield _violations
    finally:
        itp.GridExecutor._init_args_hst = init
        itp.InterpreterBuilder.create_masked_load, itp.InterpreterBuilder.create_masked_store = load, store


def import_with_gpu_configs():
    """The four kernel modules, imported with the GPU autotune lists (``configs`` returns ``full``)."""
    from seqzoo.kernels import _common

    _common.configs = lambda full, small: full
    from seqzoo.ops.causal_conv import triton as conv
    from seqzoo.ops.gateloop import triton as gla
    from seqzoo.ops.mlstm import triton as mlstm
    from seqzoo.ops.rglru import triton as rglru

    # the conv backward's steps per program must be a multiple of every BT of the GPU list, as on a GPU
    conv._TP_UNIT, conv._TP_MAX = 64, 256
    return {"mlstm": mlstm, "gla": gla, "rglru": rglru, "conv": conv}


def _metas(kernel) -> list:
    """One config per distinct meta-parameter set, in list order."""
    seen, out = set(), []
    for c in kernel.configs:
        key = tuple(sorted(c.kwargs.items()))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _tuned(module) -> dict:
    return {n: k for n, k in vars(module).items() if hasattr(k, "configs") and hasattr(k, "fn")}


# where and in which dtype the cases make their inputs (the GPU sweep, ``tools/gpu_config_sweep.py``, sets them)
DEVICE, DTYPE = "cpu", torch.float32


def _randn(*shape, grad=False):
    return torch.randn(*shape).to(DEVICE, DTYPE).requires_grad_(grad)


def _rand(*shape, grad=False, scale=1.0):
    return (torch.rand(*shape) * scale).to(DEVICE, DTYPE).requires_grad_(grad)


def _reference(op: str, *args) -> dict:
    """The op's PyTorch reference on float64 CPU copies of ``args`` (outputs named as the cases name them)."""
    from seqzoo.ops.causal_conv.naive import causal_conv1d_naive
    from seqzoo.ops.gateloop.naive import gateloop_naive
    from seqzoo.ops.rglru.naive import linear_scan_naive, rglru_naive

    def f64(t):
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach().cpu()
        return t.double() if t.is_floating_point() else t

    args = [f64(a) for a in args]
    with torch.no_grad():
        if op == "gla":
            y, s = gateloop_naive(*args)
            return {"y": y, "state": s.real if s.is_complex() else s}
        if op == "scan":
            h, hT = linear_scan_naive(*args)
            return {"h": h, "h_T": hT}
        if op == "rglru":
            y, hT = rglru_naive(*args)
            return {"y": y, "h_T": hT}
        y, st = causal_conv1d_naive(*args)
        return {"y": y, "state": st}


def _mlstm_reference(q, k, v, i, f, st) -> dict:
    from seqzoo.ops.mlstm import mlstm_naive_recurrent

    with torch.no_grad():
        h, (C, n, m) = mlstm_naive_recurrent(
            *(t.detach().cpu().double() for t in (q, k, v, i, f)), tuple(t.detach().cpu().double() for t in st)
        )
    return {"h": h, "C": C, "n": n, "m": m}


def _backward(outs, ins) -> None:
    outs = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    torch.autograd.backward(outs, [torch.randn_like(o) for o in outs])
    del ins


def cases(mods: dict) -> list[tuple[str, str, object]]:
    """(op, case name, callable) at odd tiny shapes: head dims that are not powers of two, T not a multiple of any
    tile, with and without initial state, forward only and forward + backward."""
    mlstm, gla, rglru, conv = mods["mlstm"], mods["gla"], mods["rglru"], mods["conv"]
    out = []
    for B, T, H, K, V in ((2, 9, 1, 20, 16), (1, 37, 2, 16, 24)):
        for train in (False, True):

            def run_mlstm(B=B, T=T, H=H, K=K, V=V, train=train):
                q, k = _randn(B, T, H, K, grad=train), _randn(B, T, H, K, grad=train)
                v = _randn(B, T, H, V, grad=train)
                i, f = _randn(B, T, H, grad=train), _randn(B, T, H, grad=train)
                st = (_randn(B, H, K, V, grad=train), _rand(B, H, K, grad=train), _randn(B, H))
                st = tuple(t.float().detach().requires_grad_(train) for t in st)  # states are fp32
                h, s = mlstm.mlstm_triton(q, k, v, i, f, st, chunk_size=64)
                if train:
                    _backward([h, *s], [q, k, v, i, f])
                return {"h": h, "C": s[0], "n": s[1], "m": s[2]}, lambda: _mlstm_reference(q, k, v, i, f, st)

            def run_gla(B=B, T=T, H=H, K=K, V=V, train=train):
                q, k = _randn(B, T, H, K, grad=train), _randn(B, T, H, K, grad=train)
                v = _randn(B, T, H, V, grad=train)
                log_a = (-_rand(B, T, H, K)).detach().requires_grad_(train)
                s0 = _randn(B, H, K, V).float().requires_grad_(train)
                y, s = gla.gla_triton(q, k, v, log_a, s0)
                if train:
                    _backward([y, s], [q, k, v, log_a])
                return {"y": y, "state": s}, lambda: _reference("gla", q, k, v, log_a, None, s0)

            out += [("mlstm", f"T{T}-K{K}-V{V}-{'train' if train else 'fwd'}", run_mlstm)]
            out += [("gla", f"T{T}-K{K}-V{V}-{'train' if train else 'fwd'}", run_gla)]
    for B, T, R in ((2, 9, 40), (1, 37, 72)):
        for train in (False, True):

            def run_scan(B=B, T=T, R=R, train=train):
                a = _rand(B, T, R, grad=train)
                b = _randn(B, T, R, grad=train)
                h0 = _randn(B, R).float().requires_grad_(train)
                h, hT = rglru.linear_scan_triton(a, b, h0)
                if train:
                    _backward([h, hT], [a, b])
                return {"h": h, "h_T": hT}, lambda: _reference("scan", a, b, h0)

            def run_rglru(B=B, T=T, R=R, train=train):
                x, gx, ga = (_randn(B, T, R, grad=train) for _ in range(3))
                a_param = _randn(R).float().requires_grad_(train)
                reset = torch.zeros(B, T, dtype=torch.bool, device=DEVICE)
                reset[:, T // 2] = True
                h0 = _randn(B, R).float().requires_grad_(train)
                y, hT = rglru.rglru_fused_triton(x, gx, ga, a_param, reset, h0)
                if train:
                    _backward([y, hT], [x, gx, ga, a_param])
                return {"y": y, "h_T": hT}, lambda: _reference("rglru", x, gx, ga, a_param, reset, h0)

            def run_conv(B=B, T=T, R=R, train=train):
                x, w, bias = _randn(B, T, R, grad=train), _randn(R, 4, grad=train), _randn(R, grad=train)
                seg = (torch.arange(T).repeat(B, 1) % 7).to(DEVICE)  # document starts inside the sequence
                st0 = _randn(B, 3, R, grad=train)
                y, st = conv.causal_conv1d_triton(x, w, bias, st0, seg, "silu")
                if train:
                    _backward([y, st], [x, w, bias])
                return {"y": y, "state": st}, lambda: _reference("conv", x, w, bias, st0, seg, "silu")

            tag = f"T{T}-R{R}-{'train' if train else 'fwd'}"
            out += [("rglru", "scan-" + tag, run_scan), ("rglru", "fused-" + tag, run_rglru), ("conv", tag, run_conv)]
    return out


def main(ops: list[str], only: str = "") -> int:
    os.environ["TRITON_INTERPRET"] = "1"
    with bounds_checked():
        return _run_cases(ops, only)


def _run_cases(ops: list[str], only: str) -> int:
    mods = import_with_gpu_configs()
    torch.manual_seed(0)
    for op, name, run in cases(mods):
        if op not in ops or only not in name:
            continue
        kernels = _tuned(mods[op])
        metas = {n: _metas(k) for n, k in kernels.items()}
        full = {n: k.configs for n, k in kernels.items()}
        for idx in range(max(len(m) for m in metas.values())):
            chosen = {n: m[idx % len(m)] for n, m in metas.items()}
            for n, k in kernels.items():
                k.configs = [chosen[n]]
            _violations.clear()
            run()
            print(
                json.dumps(
                    {
                        "op": op,
                        "case": name,
                        "configs": {n: c.kwargs for n, c in chosen.items()},
                        "violations": list(_violations),
                    }
                ),
                flush=True,
            )
        for n, k in kernels.items():
            k.configs = full[n]
    return 0


if __name__ == "__main__":
    ops = sys.argv[1].split(",") if len(sys.argv) > 1 else ["mlstm", "gla", "rglru", "conv"]
    sys.exit(main(ops, sys.argv[2] if len(sys.argv) > 2 else ""))
