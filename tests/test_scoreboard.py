"""The GPU scoreboard (seqzoo/bench/scoreboard.py) on a CPU: its --smoke mode runs every target at tiny shapes with
the Triton kernels in the interpreter (TRITON_INTERPRET=1, conftest.py). The checks are about the plumbing: the
result file's schema, a failed check or a dead part recorded as not met with its reason, a missing peer giving
``baseline: published`` (mLSTM) or ``skipped`` (GateLoop). Never speed: no GPU here, ever.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the smoke mode is the CPU run")

import seqzoo.bench.scoreboard as sb
from seqzoo.bench import scoreboard_measure as measure
from seqzoo.bench import scoreboard_ops as ops
from seqzoo.bench import scoreboard_parts as parts
from seqzoo.cli import main


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One in-process smoke run of every part (about 10 s on a busy 2-core CPU), shared by the tests below."""
    out = tmp_path_factory.mktemp("scoreboard")
    path = sb.run_scoreboard(out, smoke=True, isolate=False, commit="test-commit")
    return path, json.loads(path.read_text())


def test_smoke_file_has_the_schema(smoke):
    path, data = smoke
    assert path.name.startswith(data["date"][:10] + "-cpu-smoke-") and path.suffix == ".json"
    lengths = measure.SMOKE_SHAPES.lengths
    assert set(data["targets"]) == {f"{t.name}_T{T}" for t in sb.TARGETS for T in lengths}
    for name, e in data["targets"].items():
        assert isinstance(e["met"], bool) and isinstance(e["goal"], float), name
        assert e["ratio"] is None or (isinstance(e["ratio"], float) and e["ratio"] > 0), name
        assert e["compare"] in ("<=", ">=") and e["status"] in ("met", "not met", "skipped", "failed"), name
        assert e["met"] == (e["status"] == "met"), name
    assert data["smoke"] is True and data["commit"] == "test-commit" and data["dtype"] == "float32"
    assert set(data["versions"]) >= {"torch", "triton", "flash-linear-attention", "mlstm_kernels", "cuda", "driver"}
    assert data["date"].endswith("Z") and data["gpu"].startswith("cpu-smoke")
    assert set(data["parts"]) == set(parts.PARTS) and all(p["error"] is None for p in data["parts"].values())
    # every seqzoo implementation passed its check and was timed at both lengths (raw times kept)
    ours = {t.ours for t in sb.TARGETS} | {"slstm_loop", "copy"}
    timed = {(r["impl"], r["T"]) for r in data["records"] if r["status"] == "ok" and r["times_ms"]}
    assert {(i, T) for i in ours for T in lengths} <= timed
    for r in data["records"]:
        if r["impl"] != "copy" and r["status"] == "ok":
            assert r["check"]["ok"] and r["check"]["worst"] <= r["check"]["tol"] == 1e-3


def test_smoke_scores_every_seqzoo_target(smoke):
    """Targets whose yardstick runs here (copy, the sLSTM loop) get a ratio; on a CPU far from the goals."""
    _, data = smoke
    for name, e in data["targets"].items():
        if name.startswith(("rglru_", "slstm_")):
            assert e["ratio"] is not None and e["baseline"] == "same run", (name, e)
            assert len(e["times_ms"]) == 2
        if name.startswith("slstm_"):  # the official CUDA cell: its time, or why there is none (no xlstm, no CUDA)
            beside = e["beside"]["slstm_official"]
            assert isinstance(beside, str) and beside.startswith("slstm_official: "), beside
        if name.startswith("rglru_"):
            assert set(e["GBps"]) == {"copy", "scan" if "scan" in name else "rglru_fused"}


def test_a_missing_peer_gives_published_or_skipped_with_the_reason(smoke):
    """mlstm_kernels and fla cannot run here (not installed, or failing under the interpreter: docs/benchmarks.md
    "Peer kernels"): the mLSTM target falls back to the published TFLA figure, GateLoop is skipped; both say why."""
    _, data = smoke
    for T in measure.SMOKE_SHAPES.lengths:
        m = data["targets"][f"mlstm_T{T}"]
        assert m["baseline"] == "published" and m["base_error"].startswith("mlstm_kernels: ")
        assert m["published_ms"] == sb.PUBLISHED["mlstm"][4096][0] and "published at T = 4096" in m["source"]
        assert m["ratio"] == pytest.approx(m["times_ms"]["mlstm"] / m["published_ms"])
        for name in ("gateloop_real", "gateloop_complex"):
            g = data["targets"][f"{name}_T{T}"]
            assert g["baseline"] == "skipped" and g["ratio"] is None and not g["met"]
            assert g["error"].startswith("fla_chunk_gla: ")


class _ScaleGrad(torch.autograd.Function):
    """Identity forward, gradient × ``factor``: a kernel whose backward is slightly wrong."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.factor, None


@pytest.mark.parametrize("where", ["output", "gradient"])
def test_a_reference_mismatch_is_recorded_as_not_met_with_its_reason(tmp_path, monkeypatch, where):
    """The scan kernel's output × 1.01, or its gradient × 1.01: its check fails, it is never timed, and its targets
    are failed, not met, with the gap in the reason; the fused RG-LRU beside it is unaffected."""
    import seqzoo.ops.rglru.triton as rt

    real = rt.linear_scan_triton

    def broken(a, b, state=None, out_dtype=torch.float32):
        h, hT = real(a, b, state, out_dtype)
        return (h * 1.01 if where == "output" else _ScaleGrad.apply(h, 1.01)), hT

    monkeypatch.setattr(rt, "linear_scan_triton", broken)
    data = json.loads(sb.run_scoreboard(tmp_path, smoke=True, isolate=False, only=["rglru"]).read_text())
    for T in measure.SMOKE_SHAPES.lengths:
        for phase in ("fwd", "fwdbwd"):
            e = data["targets"][f"rglru_scan_{phase}_T{T}"]
            assert e["status"] == "failed" and e["met"] is False and e["ratio"] is None
            assert "scan: check failed: differs from the float64 reference: worst gap" in e["error"]
            assert data["targets"][f"rglru_fused_{phase}_T{T}"]["ratio"] is not None
    bad = [r for r in data["records"] if r["impl"] == "scan"]
    assert bad and all(r["status"] == "check failed" and "times_ms" not in r for r in bad)
    gap = bad[0]["check"]["gaps"]["y" if where == "output" else "d1"]
    assert gap == pytest.approx(0.01, rel=1e-3)


def test_a_nan_output_fails_its_check_and_the_file_stays_strict_json(tmp_path, monkeypatch):
    """A kernel that writes NaN: an infinite gap, never met; the file has no NaN or Infinity (strict JSON)."""
    import seqzoo.ops.rglru.triton as rt

    real = rt.linear_scan_triton
    monkeypatch.setattr(rt, "linear_scan_triton", lambda *a, **k: (real(*a, **k)[0] * float("nan"), None))
    path = sb.run_scoreboard(tmp_path, smoke=True, isolate=False, only=["rglru"])
    data = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    (bad, *_) = [r for r in data["records"] if r["impl"] == "scan"]
    assert bad["status"] == "check failed" and bad["check"]["gaps"]["y"] == "inf" and bad["check"]["worst"] == "inf"
    assert data["targets"]["rglru_scan_fwd_T16"]["met"] is False
    # parts not asked for are written as not run, never dropped
    assert data["targets"]["slstm_T16"]["status"] == "failed" and "not run" in data["targets"]["slstm_T16"]["error"]


def test_a_dead_or_slow_part_is_recorded_with_its_reason(tmp_path, monkeypatch):
    """A part whose process aborts (a compiler assertion) or outlasts its budget: its targets say so, the file is
    written, and the other parts' results are kept."""
    real = sb._child_command

    def child(part, records, smoke):
        if part == "slstm":
            return [sys.executable, "-c", "import os, sys; print('LLVM ERROR: boom', file=sys.stderr); os.abort()"]
        if part == "mlstm":
            return [sys.executable, "-c", "import time; time.sleep(60)"]
        return real(part, records, smoke)

    monkeypatch.setattr(sb, "_child_command", child)
    monkeypatch.setattr(sb, "SMOKE_PART_BUDGET_S", 3)
    monkeypatch.setattr(sb, "MIN_PART_S", 0)
    # 8 s for both: mlstm (run first) may use what slstm's 3 s leave, 5 s, and is killed then
    data = json.loads(sb.run_scoreboard(tmp_path, smoke=True, time_limit_s=8, only=["slstm", "mlstm"]).read_text())
    s = data["targets"]["slstm_T16"]
    assert s["status"] == "failed"
    assert s["error"] == "slstm_triton: part slstm: process exited with -6: LLVM ERROR: boom"
    m = data["targets"]["mlstm_T32"]
    assert m["status"] == "failed" and m["error"] == "mlstm: part mlstm timed out after 5 s"
    assert data["parts"]["mlstm"]["error"] == "part mlstm timed out after 5 s"


def test_an_interrupted_run_keeps_the_records_of_the_part_it_stopped(tmp_path, monkeypatch):
    """The device script's time limit interrupts the run mid-part: the file holds that part's finished records."""
    rec = {"impl": "copy", "T": 16, "phase": "copy", "status": "ok", "ms": 1.0, "bytes": 8}

    def interrupted(part, records, smoke, autotune, budget):
        parts.append_record(records)(rec)
        raise KeyboardInterrupt

    monkeypatch.setattr(sb, "run_part_isolated", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sb.run_scoreboard(tmp_path, smoke=True, only=["rglru"])
    (path,) = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    assert data["parts"]["rglru"]["error"].startswith("part rglru interrupted after")
    assert data["records"] == [rec]
    assert data["targets"]["rglru_scan_fwd_T16"]["error"].startswith("scan: part rglru interrupted")


def test_the_time_limit_leaves_later_parts_not_run(tmp_path):
    data = json.loads(sb.run_scoreboard(tmp_path, smoke=True, time_limit_s=1, only=["rglru"]).read_text())
    assert data["parts"]["rglru"]["error"] == "part rglru not run: the 1 s time limit was spent"
    assert data["targets"]["rglru_scan_fwd_T16"]["error"].startswith("scan: part rglru not run")


def test_bad_input_is_refused_before_any_file(tmp_path, capsys):
    out = tmp_path / "never"
    assert main(["kernels", "scoreboard", "--out", str(out)]) == 2  # no CUDA, no --smoke
    assert "needs a CUDA GPU" in capsys.readouterr().err
    assert main(["kernels", "scoreboard", "--smoke", "--parts", "mlstm,bogus", "--out", str(out)]) == 2
    assert "--parts: unknown ['bogus']" in capsys.readouterr().err
    assert main(["kernels", "scoreboard", "--smoke", "--time-limit", "0", "--out", str(out)]) == 2
    assert not out.exists()


@pytest.mark.parity
def test_the_official_slstm_cell_gets_seqzoos_inputs_right():
    """The official cell's call site (its recurrent kernel = seqzoo's R, zero bias, gate-major input, (B, H, T, d)
    output) computes seqzoo's sLSTM: checked with its PyTorch backend ("vanilla"; the scoreboard runs "cuda", which
    takes the same external layouts), output and the wx gradient against the float64 reference."""
    pytest.importorskip("xlstm")
    fam = ops.slstm_family(dataclasses.replace(measure.SMOKE_SHAPES, slstm_heads=2))  # 2 heads: the layouts differ
    impl = measure.Impl("official", lambda ins: ops.official_slstm_cell(ins, "vanilla"), gradients_gate=False)
    gen = torch.Generator().manual_seed(0)
    ins = fam.make(2, 9, gen)
    verdict = measure.check(impl, ins, measure.reference_of(fam, ins, gen))
    assert verdict["ok"] and set(verdict["gaps"]) == {"y", "d0"}  # R is the module's parameter: not compared
    assert verdict["gaps"]["y"] < 1e-6 and verdict["gaps"]["d0"] < 1e-6


def test_tuned_parts_run_with_autotune_all_and_the_file_says_so(tmp_path, monkeypatch):
    """--tune-parts: those parts' processes get SEQZOO_AUTOTUNE=all, the others --autotune's value; every target
    records how its kernel got its config."""
    seen = tmp_path / "seen.txt"

    def child(part, records, smoke):
        code = "import os, sys; open(sys.argv[1], 'a').write(sys.argv[2] + '=' + os.environ['SEQZOO_AUTOTUNE'] + ' ')"
        return [sys.executable, "-c", code, str(seen), part]

    monkeypatch.setattr(sb, "_child_command", child)
    path = sb.run_scoreboard(tmp_path / "out", smoke=True, only=["rglru", "slstm"], tune_parts=["slstm"])
    assert seen.read_text().split() == ["rglru=first", "slstm=all"]
    data = json.loads(path.read_text())
    assert data["parts"]["slstm"]["autotune"] == "all" and data["parts"]["rglru"]["autotune"] == "first"
    assert data["targets"]["slstm_T16"]["autotune"] == "all"
    assert data["targets"]["rglru_fused_fwd_T16"]["autotune"] == "first"
    assert data["targets"]["mlstm_T16"]["autotune"] is None  # its part did not run


@pytest.mark.slow
def test_the_device_script_brings_back_the_file_and_its_table(tmp_path):
    """tools/gpu_scoreboard.sh on the CPU (--smoke, one part): the result file, table.md and the log land in $OUT."""
    import os
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out, dest = tmp_path / "out", tmp_path / "gpu"
    bin_dir = tmp_path / "bin"  # `python3` on the PATH: this interpreter
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # a venv's python, as it is
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "OUT": str(out), "SCOREBOARD_DIR": str(dest), "COMMIT": "c0ffee"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        ["bash", "tools/gpu_scoreboard.sh", "--smoke", "--parts", "rglru"], cwd=root, env=env, capture_output=True
    )
    assert done.returncode == 0, done.stdout.decode()[-2000:]
    (result,) = out.glob("*.json")
    data = json.loads(result.read_text())
    assert data["commit"] == "c0ffee" and data["smoke"] and data["targets"]["rglru_scan_fwd_T16"]["ratio"] > 0
    assert (
        out / "table.md"
    ).read_text().strip() == "No scoreboard has run on a GPU yet: `benchmarks/gpu/` holds no result file."
    assert "wrote" in (out / "scoreboard.log").read_text()


def _ok(impl: str, T: int, ms: float, phase: str = "fwdbwd", **extra) -> dict:
    return {"impl": impl, "T": T, "phase": phase, "status": "ok", "ms": ms, **extra}


def test_scores_of_same_run_records():
    """The arithmetic of each kind on records as a GPU run writes them (a same-run peer never runs on this CPU)."""
    records = [
        _ok("mlstm", 4096, 20.0),
        _ok("mlstm_kernels", 4096, 16.0),  # 1.25: met, at the goal
        _ok("gla_real", 4096, 26.0),
        _ok("fla_chunk_gla", 4096, 20.0),  # real 1.3: not met; complex 2.4: met
        _ok("gateloop_complex", 4096, 48.0),
        _ok("slstm_triton", 4096, 100.0),
        _ok("slstm_loop", 4096, 900.0),  # 9x: not met
        _ok("scan", 4096, 1.0, "fwd", bytes=3_000_000_000),
        _ok("copy", 4096, 0.5, "copy", bytes=2_000_000_000),  # 3 GB/ms against 4 GB/ms: 0.75, met
    ]
    by = {t.name: t for t in sb.TARGETS}
    got = {name: sb.score(by[name], 4096, records, {}) for name in by}
    expect = {
        "mlstm": (1.25, True),
        "gateloop_real": (1.3, False),
        "gateloop_complex": (2.4, True),
        "slstm": (9.0, False),
        "rglru_scan_fwd": (0.75, True),
    }
    for name, (ratio, met) in expect.items():
        e = got[name]
        assert e["ratio"] == pytest.approx(ratio) and e["met"] is met and e["baseline"] == "same run", (name, e)
    assert got["rglru_scan_fwd"]["GBps"] == {"scan": pytest.approx(3000.0), "copy": pytest.approx(4000.0)}
    assert got["slstm"]["beside"] == {"slstm_official": "slstm_official: not run"}
    assert got["rglru_fused_fwd"]["status"] == "failed" and got["rglru_fused_fwd"]["error"] == "rglru_fused: not run"


def test_the_published_mlstm_figure_is_exact_at_the_gpu_lengths():
    for T in measure.GPU_SHAPES.lengths:
        ms, source = sb.published("mlstm", T)
        assert ms == sb.PUBLISHED["mlstm"][T][0] and "published at T" not in source
    assert "published at T = 16384, not T = 65536" in sb.published("mlstm", 65536)[1]
