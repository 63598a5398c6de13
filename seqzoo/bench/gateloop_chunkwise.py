"""Time the chunkwise GateLoop against its per-token loop and the mLSTM chunkwise at equal state size (one run).

    python -m seqzoo.bench.gateloop_chunkwise --B 2 --T 2048 --d-model 256 --n-heads 4 --threads 1 --out results/gateloop-bench.json

Multi-head GateLoop with K = V = d_model / n_heads per head and data-controlled complex transitions (γ̃ ~ 1 + 2·N(0, 1),
θ ~ N(0, 1)); its state is K × V complex per head, i.e. 2K × V reals. The mLSTM contender
(``ops/mlstm/chunkwise.py: mlstm_chunkwise``) gets the same B, T, heads and V with key width 2K, so both carry the
same number of reals. Contenders run interleaved in one process (min of ``repeats`` calls each, after a warm-up)
and are reported as ratios measured in that run: ``loop / chunkwise`` (the speed-up over the loop) and
``chunkwise / mlstm`` for forward and forward+backward (loss: mean of y² plus |S|). On a shared machine only these
ratios are comparable, not the milliseconds. Contenders: ``chunkwise`` (``gateloop_chunkwise``), ``loop``
(``gateloop_naive``, the recurrent mode), ``mlstm`` and, with ``--attention``, ``attention`` (the surrogate form).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from ..errors import InputError
from ..ops.gateloop.attention import gateloop_attention
from ..ops.gateloop.chunkwise import gateloop_chunkwise
from ..ops.gateloop.naive import gateloop_naive
from ..ops.mlstm import mlstm_chunkwise
from .kernels import _time_cpu_interleaved


def _closures(fn, inputs):
    leaves = [t.detach().requires_grad_(True) for t in inputs]

    def fwd():
        with torch.no_grad():
            fn(*inputs)

    def fwdbwd():
        for t in leaves:
            t.grad = None
        y, S = fn(*leaves)
        S = S[0] if isinstance(S, tuple) else S
        (y.square().mean() + S.abs().mean()).backward()

    return fwd, fwdbwd


def run(
    B: int = 2,
    T: int = 2048,
    d_model: int = 256,
    n_heads: int = 4,
    chunk_size: int = 64,
    threads: int | None = 1,
    repeats: int = 3,
    attention: bool = False,
    seed: int = 0,
) -> dict:
    for name, val in (("B", B), ("T", T), ("d_model", d_model), ("n_heads", n_heads), ("chunk_size", chunk_size)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 1:
            raise InputError(f"gateloop bench: {name} must be a positive int, got {val!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise InputError(f"gateloop bench: repeats must be a positive int, got {repeats!r}")
    if d_model % n_heads:
        raise InputError(f"gateloop bench: n_heads={n_heads} must divide d_model={d_model}")
    if threads:
        torch.set_num_threads(threads)
    K = V = d_model // n_heads
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    q, k, v = r(B, T, n_heads, K), r(B, T, n_heads, K), r(B, T, n_heads, V)
    log_mag, phase = F.logsigmoid(1 + 2 * r(B, T, n_heads, K)), r(B, T, n_heads, K)
    gl = [q, k, v, log_mag, phase]
    ml = [r(B, T, n_heads, 2 * K), r(B, T, n_heads, 2 * K), r(B, T, n_heads, V), r(B, T, n_heads), 3 + r(B, T, n_heads)]
    contenders = {
        "chunkwise": (lambda *a: gateloop_chunkwise(*a, chunk_size=chunk_size), gl),
        "loop": (gateloop_naive, gl),
        "mlstm": (lambda *a: mlstm_chunkwise(*a, chunk_size=chunk_size), ml),
    }
    if attention:
        contenders["attention"] = (gateloop_attention, gl)
    pairs = {name: _closures(fn, ins) for name, (fn, ins) in contenders.items()}
    res: dict = {
        "shape": {"B": B, "T": T, "d_model": d_model, "n_heads": n_heads, "K": K, "V": V, "chunk_size": chunk_size},
        "mlstm_shape": {"K": 2 * K, "V": V, "note": "same reals per state as the complex K x V GateLoop state"},
        "threads": torch.get_num_threads(),
        "timing": f"min of {repeats} calls, contenders interleaved, one process",
        "torch": torch.__version__,
    }
    for phase_name, idx in (("fwd", 0), ("fwdbwd", 1)):
        ms = _time_cpu_interleaved({n: p[idx] for n, p in pairs.items()}, repeats)
        res[f"{phase_name}_ms"] = {n: round(t, 2) for n, t in ms.items()}
        res[f"{phase_name}_loop_over_chunkwise"] = round(ms["loop"] / ms["chunkwise"], 3)
        res[f"{phase_name}_chunkwise_over_mlstm"] = round(ms["chunkwise"] / ms["mlstm"], 3)
        if attention:
            res[f"{phase_name}_attention_over_chunkwise"] = round(ms["attention"] / ms["chunkwise"], 3)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seqzoo.bench.gateloop_chunkwise", description=__doc__.splitlines()[0])
    p.add_argument("--B", type=int, default=2)
    p.add_argument("--T", type=int, default=2048)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--attention", action="store_true", help="also time the surrogate-attention mode (O(T²))")
    p.add_argument("--out", default="results/gateloop-bench.json", help="JSON file for the results")
    a = p.parse_args(argv)
    res = run(a.B, a.T, a.d_model, a.n_heads, a.chunk_size, a.threads, a.repeats, a.attention)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
