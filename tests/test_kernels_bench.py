"""The kernel benchmark (seqzoo/bench/kernels.py) in its smoke mode, and the lazy import of triton.

Without CUDA the benchmark's GPU code path runs under Triton's CPU interpreter (TRITON_INTERPRET=1, set by
conftest.py) at one tiny shape; the checks are about the plumbing (rows, files, roofline bounds), never speed.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

CUDA = torch.cuda.is_available()
pytest.importorskip("triton")


@pytest.mark.skipif(CUDA, reason="the smoke mode runs the GPU path under the CPU interpreter")
def test_kernel_bench_smoke(tmp_path):
    """The GPU code path of seqzoo.bench.kernels (Triton contenders, roofline columns, files, plot) at one tiny
    shape under the interpreter, and the CPU ratio mode; checks the plumbing, not speed."""
    import json

    from seqzoo.bench.kernels import PEERS, gla_roofline_ms, run_kernel_bench, scan_roofline_ms

    rows = run_kernel_bench(
        out_dir=tmp_path / "gpu",
        lengths=[16],
        tokens=16,
        n_heads=1,
        dk=16,
        dv=16,
        dtype="float32",
        smoke=True,
        threads=None,
        ops=("gla", "scan", "rglru"),
    )
    impls = {(r["op"], r["impl"]) for r in rows}
    assert {("scan", "seqzoo triton"), ("rglru", "seqzoo triton fused"), ("gla", "seqzoo triton")} <= impls
    peers = {name for per_op in PEERS.values() for name in per_op}
    ours = [r for r in rows if r["impl"] not in peers]  # peers: their own rows
    assert all(r.get("fwdbwd_ms") and r["frac_roofline_fwd"] > 0 for r in ours), [r for r in ours if "error" in r]
    assert all(r.get("error") for r in rows if r not in ours)  # a peer that cannot run here says why
    for name in ("kernels.csv", "kernels.json", "config.json", "kernels.png"):
        assert (tmp_path / "gpu" / name).stat().st_size > 0
    assert json.loads((tmp_path / "gpu" / "config.json").read_text())["smoke_interpreter"] is True
    cpu = run_kernel_bench(
        device="cpu", out_dir=tmp_path / "cpu", lengths=[16], rounds=1, threads=None, ops=("scan",), plot=False
    )
    assert {r["impl"] for r in cpu if r["op"] == "scan"} == {
        "torch two-level chunked",
        "torch per-token loop (baseline)",
    }
    assert all(r["fwd_speedup_vs_loop"] == 1.0 for r in cpu if "baseline" in r["impl"])
    # the bounds worked by hand (docs/benchmarks.md "Roofline bounds"): 134 µs scan forward at B=8, T=4096, D=2048 (H100); 1.34 ms GLA C=128 memory bound
    assert abs(scan_roofline_ms(8, 4096, 2048) - 0.134) < 0.001
    assert abs(gla_roofline_ms(16, 4096, 16, 128, 256, 128, 128, states_on_chip=False) - 1.34) < 0.01


def test_import_seqzoo_does_not_import_triton():
    code = "import sys, seqzoo, seqzoo.kernels, seqzoo.bench.kernels; assert 'triton' not in sys.modules, 'triton imported'"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_isolated_bench_survives_a_part_that_aborts(tmp_path, monkeypatch):
    """``--isolate`` (the default on CUDA): each op's seqzoo + torch contenders and each peer run in a child process;
    a child killed by the compiler (an LLVM assertion aborted the mLSTM op on an H200 with triton 3.6) becomes a row
    with its exit status and last line, and the other parts' rows are kept and merged."""
    import json
    import sys

    import seqzoo.bench.kernels as bk

    real = bk._child_command

    def child(argv):
        if "conv" in argv and "--no-peers" in argv:  # the conv op's own part dies as the compiler did
            return [
                sys.executable,
                "-c",
                "import os, sys; print('Assertion failed: trying to erase', file=sys.stderr); os.abort()",
            ]
        return real(argv)

    monkeypatch.setattr(bk, "_child_command", child)
    out = tmp_path / "iso"
    argv = ["--device", "cpu", "--lengths", "16", "--rounds", "1", "--threads", "1", "--isolate"]
    assert bk.main([*argv, "--ops", "scan,conv", "--out", str(out), "--no-plot"]) == 0
    rows = json.loads((out / "kernels.json").read_text())
    scan = {r["impl"] for r in rows if r["op"] == "scan"}
    assert scan == {"torch two-level chunked", "torch per-token loop (baseline)"}
    assert all(r["fwd_ms"] > 0 for r in rows if r["op"] == "scan")
    dead = [r for r in rows if r["op"] == "conv" and r["impl"] == "seqzoo and torch"]
    assert len(dead) == 1 and dead[0]["error"].startswith("process exited with -6: Assertion failed")
    config = json.loads((out / "config.json").read_text())
    assert config["isolated"] and config["device"] == "cpu"
    assert (out / "kernels.csv").read_text().count("\n") == len(rows) + 1


def test_isolated_children_get_the_runs_own_options():
    from seqzoo.bench.kernels import _without_options

    argv = ["--device", "cuda", "--ops", "mlstm", "--out=/tmp/x", "--no-plot", "--lengths", "4096", "--isolate"]
    assert _without_options(argv, {"--ops", "--out", "--no-plot", "--isolate"}) == [
        "--device",
        "cuda",
        "--lengths",
        "4096",
    ]
