"""Time the RG-LRU scan against a loop written like the reference's ``rnn_scan`` (same run, same inputs).

    python -m seqzoo.bench.rglru_scan --B 4 --T 2048 --R 512 --threads 1

Reports the best of ``repeats`` wall times for forward and forward+backward, and the ratios loop / scan
(the project's yardstick: ≥ 2×, target ≥ 5× at B=4, T=2048, R=512 on CPU; measured results in docs/griffin.md).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from ..ops.rglru import rglru


def reference_style_loop(x, a, reset, state=None):
    """The recurrentgemma PyTorch ``rnn_scan`` pattern: a Python loop over t writing into y (fp32 accumulation)."""
    a = a * ~reset[..., None]
    h = torch.zeros(x.shape[0], x.shape[2], dtype=torch.float32) if state is None else state
    y = torch.zeros_like(x)
    for t in range(x.shape[1]):
        h = a[:, t].float() * h + x[:, t].float()
        y[:, t] = h.to(x.dtype)
    return y, h


def _best(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def run(B=4, T=2048, R=512, threads=1, repeats=5, seed=0, modes=("reference_loop", "naive", "scan")):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, R, generator=g)
    gx, ga = torch.randn(B, T, R, generator=g), torch.randn(B, T, R, generator=g)
    ap = torch.empty(R).uniform_(-6.9, -2.2, generator=g)
    reset = torch.zeros(B, T, dtype=torch.bool)
    reset[:, 0] = True

    res = {"B": B, "T": T, "R": R, "threads": threads, "repeats": repeats}
    for label, fn in {
        "reference_loop": lambda: _scan_ref(x, gx, ga, ap, reset),
        "naive": lambda: rglru(x, gx, ga, ap, reset, mode="naive"),
        "scan": lambda: rglru(x, gx, ga, ap, reset, mode="scan"),
    }.items():
        if label not in modes:
            continue
        with torch.no_grad():
            res[f"{label}_fwd_ms"] = round(1e3 * _best(fn, repeats), 2)
        xg = x.clone().requires_grad_(True)

        def fwd_bwd(fn=label):
            y = {
                "reference_loop": lambda: _scan_ref(xg, gx, ga, ap, reset),
                "naive": lambda: rglru(xg, gx, ga, ap, reset, mode="naive"),
                "scan": lambda: rglru(xg, gx, ga, ap, reset, mode="scan"),
            }[fn]()[0]
            y.sum().backward()

        res[f"{label}_fwdbwd_ms"] = round(1e3 * _best(fwd_bwd, max(2, repeats // 2)), 2)
    for base in ("reference_loop", "naive"):
        if base in modes and "scan" in modes:
            res[f"speedup_fwd_vs_{base}"] = round(res[f"{base}_fwd_ms"] / res["scan_fwd_ms"], 2)
            res[f"speedup_fwdbwd_vs_{base}"] = round(res[f"{base}_fwdbwd_ms"] / res["scan_fwdbwd_ms"], 2)
    return res


def _scan_ref(x, gx, ga, ap, reset):
    """Gates as in the reference RG-LRU, then the reference-style loop."""
    from ..ops.rglru.gates import rglru_gates

    a, b = rglru_gates(x, gx, ga, ap, reset)
    return reference_style_loop(b, a, torch.zeros_like(reset))


def main(argv=None):
    p = argparse.ArgumentParser(description="RG-LRU scan vs reference-style loop")
    p.add_argument("--B", type=int, default=4)
    p.add_argument("--T", type=int, default=2048)
    p.add_argument("--R", type=int, default=512)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--modes", default="reference_loop,naive,scan", help="comma-separated subset to time")
    p.add_argument("--out", default=None, help="write the result JSON here")
    a = p.parse_args(argv)
    res = run(a.B, a.T, a.R, a.threads, a.repeats, modes=tuple(a.modes.split(",")))
    text = json.dumps(res, indent=2)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
