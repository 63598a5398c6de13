"""Record every Triton kernel launch of the ops' real entry points, without running the kernels.

Run as ``TRITON_INTERPRET=1 python -m seqzoo.bench.aot_capture < scenarios.json > launches.json`` (``aot.capture``
does this in a subprocess: the interpreter must be chosen before triton is imported). Each scenario calls an op
dispatcher (``ops.mlstm.mlstm``, ``ops.gateloop.gateloop``, ``ops.rglru.rglru`` / ``linear_scan``,
``ops.causal_conv.causal_conv1d``, ``ops.slstm.slstm``) with ``mode="triton"`` at the requested head dims, chunk
size and dtype, forward and (for ``train``) backward. ``InterpretedFunction.run`` is replaced by a recorder, so the launch code runs for real
(argument order, dtypes, constexprs, grid) but no kernel executes: shapes as large as the presets' cost nothing.
``dot_dtype`` is switched to its GPU answer (bf16/fp16 ``tl.dot`` operands for 16-bit inputs), the one place where
the launch code's constexprs differ between the interpreter and a GPU. The autotune config's own keys (``BV``,
``num_warps``, ...) are dropped from the record: ``aot.py`` substitutes every GPU config.
"""

from __future__ import annotations

import json
import sys

import torch

from ..errors import InputError


def _encode(v):
    """JSON form of a constexpr value: bools/ints/floats as is, ``tl.dtype`` as ``{"tl": name}``."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    name = getattr(v, "name", None)
    if name is not None:
        return {"tl": name}
    raise InputError(f"cannot record constexpr value {v!r}")


def _arg(v):
    if isinstance(v, torch.Tensor):
        return {"kind": "tensor", "dtype": str(v.dtype).removeprefix("torch.")}
    if isinstance(v, bool):
        return {"kind": "bool", "value": v}
    if isinstance(v, int):
        return {"kind": "int", "value": v}
    if isinstance(v, float):
        return {"kind": "float", "value": v}
    raise InputError(f"cannot record kernel argument {v!r}")


def install_recorder(records: list, label: list) -> None:
    """Replace ``InterpretedFunction.run`` by a recorder appending to ``records`` (``label[0]`` names the scenario)."""
    import importlib

    from triton.runtime.interpreter import InterpretedFunction

    def run(self, *args, grid, warmup, **kwargs):
        fn = self.fn
        tuned = getattr(importlib.import_module(fn.__module__), fn.__name__, None)
        config_keys = set(tuned.configs[0].all_kwargs()) if hasattr(tuned, "configs") else set()
        names = self.arg_names
        params = dict(zip(names, args))
        params.update({k: v for k, v in kwargs.items() if k in names and k not in config_keys})
        records.append(
            {
                "scenario": label[0],
                "kernel": f"{fn.__module__}:{fn.__name__}",
                "args": {k: _arg(v) for k, v in params.items() if not _is_constexpr(self, k)},
                "constexprs": {k: _encode(v) for k, v in params.items() if _is_constexpr(self, k)},
                "config_keys": sorted(config_keys),
            }
        )

    InterpretedFunction.run = run


def _is_constexpr(interp, name: str) -> bool:
    import inspect

    import triton.language as tl

    ann = inspect.signature(interp.fn).parameters[name].annotation
    return ann is tl.constexpr or ann == "tl.constexpr" or getattr(ann, "__name__", "") == "constexpr"


def _dt(name: str) -> torch.dtype:
    return getattr(torch, name)


def _leaf(*shape, dtype, scale=1.0):
    return (torch.randn(*shape) * scale).to(dtype).requires_grad_(True)


def _backward(outs, ins):
    tensors = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    loss = sum(o.float().sum() for o in tensors)
    torch.autograd.grad(loss, [t for t in ins if t is not None and t.requires_grad], allow_unused=True)


def scenario(sc: dict) -> None:
    """Call one op dispatcher as ``sc`` says (keys: op, dtype, mode ``train`` | ``state``, and the op's sizes)."""
    dt = _dt(sc["dtype"])
    B, H, T = 2, sc.get("H", 4), sc["T"]
    train = sc["mode"] == "train"
    if sc["op"] == "mlstm":
        from ..ops.mlstm import mlstm

        K, V = sc["K"], sc["V"]
        q, k = _leaf(B, T, H, K, dtype=dt), _leaf(B, T, H, K, dtype=dt)
        v = _leaf(B, T, H, V, dtype=dt)
        i, f = _leaf(B, T, H, dtype=dt), _leaf(B, T, H, dtype=dt)
        state = None if train else (torch.zeros(B, H, K, V), torch.zeros(B, H, K), torch.zeros(B, H))
        h, st = mlstm(q, k, v, i, f, state, mode="triton", chunk_size=sc["chunk"])
        if train:
            _backward([h, *st], [q, k, v, i, f])
    elif sc["op"] == "gateloop":
        from ..ops.gateloop import gateloop

        K, V = sc["K"], sc["V"]
        q, k = _leaf(B, T, H, K, dtype=dt), _leaf(B, T, H, K, dtype=dt)
        v = _leaf(B, T, H, V, dtype=dt)
        log_mag = (-torch.rand(B, T, H, K)).to(dt).requires_grad_(True)
        phase = _leaf(B, T, H, K, dtype=dt) if sc.get("complex") else None
        state = None if train else torch.zeros(B, H, K, V, dtype=torch.complex64)
        y, S = gateloop(q, k, v, log_mag, phase, state, mode="triton", chunk_size=sc["chunk"])
        if train:
            _backward([y, S.real], [q, k, v, log_mag, phase])
    elif sc["op"] in ("rglru", "linear_scan"):
        from ..ops.rglru import linear_scan, rglru

        R = sc["R"]
        h0 = None if train else torch.zeros(B, R)
        if sc["op"] == "rglru":
            x, gx, ga = (_leaf(B, T, R, dtype=dt) for _ in range(3))
            a_param = _leaf(R, dtype=dt)
            reset = torch.zeros(B, T, dtype=torch.bool) if sc.get("reset") else None
            y, hT = rglru(x, gx, ga, a_param, reset, h0, mode="triton")
            ins = [x, gx, ga, a_param]
        else:
            a = torch.rand(B, T, R).to(dt).requires_grad_(True)
            b = _leaf(B, T, R, dtype=dt)
            y, hT = linear_scan(a, b, h0, mode="triton")
            ins = [a, b]
        if train:
            _backward([y, hT], ins)
    elif sc["op"] == "causal_conv":
        from ..ops.causal_conv import causal_conv1d

        C, k = sc["C"], sc["k"]
        x = _leaf(B, T, C, dtype=dt)
        w = _leaf(C, k, dtype=dt)
        bias = _leaf(C, dtype=dt) if sc.get("bias", True) else None
        state = None if train else torch.zeros(B, k - 1, C, dtype=dt)
        seg = torch.zeros(B, T, dtype=torch.long) if sc.get("segments") else None
        y, st = causal_conv1d(x, w, bias, state, seg, mode="triton", activation=sc.get("activation"))
        if train:
            _backward([y], [x, w, bias])
    elif sc["op"] == "slstm":
        from ..ops.slstm import slstm

        d = sc["d"]
        wx, R = _leaf(B, T, H, 4, d, dtype=dt), _leaf(H, d, 4, d, dtype=dt, scale=0.1)
        state = None if train else tuple(torch.zeros(B, H * d) for _ in range(4))
        seg = torch.ones(B, T, dtype=torch.long) if sc.get("segments") else None
        with torch.set_grad_enabled(train):  # "state": the inference launch that saves nothing for a backward
            h, st = slstm(wx, R, state, mode="triton", segment_pos=seg)
        if train:
            _backward([h, *st], [wx, R])
    else:
        raise InputError(f"unknown op {sc['op']!r}")


def capture(scenarios: list[dict]) -> list[dict]:
    """Launch records of ``scenarios`` (in this process: TRITON_INTERPRET=1 must already be set)."""
    import triton  # noqa: F401  (the interpreter is chosen at import)

    from ..kernels import _common
    from ..ops.causal_conv import triton as _c  # noqa: F401  (their autotune configs: the interpreter's, at import)
    from ..ops.gateloop import triton as _g  # noqa: F401
    from ..ops.mlstm import triton as _m  # noqa: F401
    from ..ops.rglru import triton as _r  # noqa: F401
    from ..ops.slstm import triton as _s  # noqa: F401

    records: list = []
    label = [""]
    install_recorder(records, label)
    torch.manual_seed(0)
    with _common.gpu_operand_dtypes():  # the launches carry the 16-bit dot operands a GPU compiles
        for sc in scenarios:
            label[0] = json.dumps(sc, sort_keys=True)
            scenario(sc)
    return records


def main() -> int:
    scenarios = json.load(sys.stdin)
    json.dump(capture(scenarios), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
