"""Every autotune config of every Triton kernel, one at a time, on a GPU: which ones fault, which ones are wrong.

The autotuner runs every config that its prune hook keeps, but a test only ever checks the one it picks. A config
that writes out of bounds (``cudaErrorIllegalAddress``), or computes wrongly, is therefore found by the user whose
shape happens to select it. This runs each config of each op's kernels (``config`` index i applied to every
kernel of the op, modulo its list length) in its own process with ``CUDA_LAUNCH_BLOCKING=1``, on the odd tiny
shapes of ``tests/kernel_bounds.py`` (the interpreter's out-of-bounds check of the same cases), and compares every
op's outputs (not its gradients) against its float64 PyTorch reference::

    python tools/gpu_config_sweep.py --out results/config-sweep       # on a machine with CUDA; about 2 minutes

Writes ``sweep.jsonl`` (one line per run: op, case, dtype, config index, the configs, ok / error, max error).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # seqzoo from this checkout; the cases of tests/kernel_bounds.py
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
TOL = {"fp32": 1e-3, "bf16": 5e-2, "fp16": 2e-2}


def child(op: str, case: str, dtype: str, idx: int, device: str = "cuda") -> dict:
    import kernel_bounds as kb
    import torch

    kb.DEVICE, kb.DTYPE = device, getattr(torch, DTYPES[dtype])
    mods = kb.import_with_gpu_configs()
    kernels = kb._tuned(mods[op])
    chosen = {}
    for n, k in kernels.items():
        k.configs = [k.configs[idx % len(k.configs)]]
        c = k.configs[0]
        chosen[n] = {**c.kwargs, "num_warps": c.num_warps, "num_stages": c.num_stages}
    run = {name: fn for o, name, fn in kb.cases(mods) if o == op}[case]
    torch.manual_seed(0)
    out = {"op": op, "case": case, "dtype": dtype, "config": idx, "configs": chosen}
    got, reference = run()  # every case returns its outputs and a callable for its float64 reference
    if device == "cuda":
        torch.cuda.synchronize()
    err = 0.0
    for name, r in reference().items():
        g = got[name].detach().double().cpu()
        err = max(err, float((g - r).abs().max() / max(1.0, float(r.abs().max()))))
    out.update(max_rel_error=err, ok=bool(err <= TOL[dtype]))
    return out


def _names() -> tuple[list, dict]:
    """Case names and config counts per op, from an import on the GPU (full lists)."""
    import kernel_bounds as kb

    mods = kb.import_with_gpu_configs()
    cases = [(op, name) for op, name, _ in kb.cases(mods)]
    counts = {op: max(len(k.configs) for k in kb._tuned(m).values()) for op, m in mods.items()}
    return cases, counts


def _run_child(job, timeout: int, device: str) -> dict:
    op, case, dt, idx = job
    env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1", "PYTHONPATH": f"{ROOT}:{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, __file__, "--device", device, "--child", op, case, dt, str(idx)]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"op": op, "case": case, "dtype": dt, "config": idx, "ok": False, "error": f"timeout {timeout} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode == 0 and lines:
        res = json.loads(lines[-1])
    else:
        tail = [ln for ln in p.stderr.splitlines() if ln.strip()][-3:]
        res = {"op": op, "case": case, "dtype": dt, "config": idx, "ok": False, "rc": p.returncode, "error": tail}
    res["seconds"] = round(time.time() - t0, 1)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results/config-sweep")
    ap.add_argument("--procs", type=int, default=14)
    ap.add_argument("--timeout", type=int, default=120, help="seconds per run")
    ap.add_argument("--ops", default="mlstm,gla,rglru,conv")
    ap.add_argument("--device", default="cuda", help="cuda; cpu runs the same under TRITON_INTERPRET=1 (plumbing)")
    ap.add_argument("--child", nargs=4, metavar=("OP", "CASE", "DTYPE", "CONFIG"))
    a = ap.parse_args()
    if a.child:
        op, case, dt, idx = a.child
        print(json.dumps(child(op, case, dt, int(idx), a.device)), flush=True)
        return 0
    if a.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    cases, counts = _names()
    todo = []
    for op, case in cases:
        if op not in a.ops.split(","):
            continue
        dtypes = ("fp32", "bf16", "fp16") if op == "mlstm" else (("bf16",) if "T37" in case else ())
        todo += [(op, case, dt, i) for dt in dtypes for i in range(counts[op])]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    bad = 0
    with open(out / "sweep.jsonl", "w") as fh, ThreadPoolExecutor(a.procs) as pool:
        for res in pool.map(lambda j: _run_child(j, a.timeout, a.device), todo):
            fh.write(json.dumps(res) + "\n")
            fh.flush()
            bad += not res["ok"]
    print(f"{len(todo)} runs, {bad} not ok: {out / 'sweep.jsonl'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
