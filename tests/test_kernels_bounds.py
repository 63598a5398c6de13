"""Every masked-in load and store of the Triton kernels stays inside its tensors, for every autotune config's block
sizes (``tests/kernel_bounds.py``: the interpreter, patched to check each address against the launch's tensor
arguments). On a GPU such a slip is ``cudaErrorIllegalAddress``; under the interpreter it is silent without this.

Also the other half of that story: ``prune.KNOWN_FAULTS``, the configs that are in bounds here but faulted on a real
GPU (a miscompile), are dropped by the autotune hook and by the compile table on that architecture only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl

from seqzoo.bench import aot
from seqzoo.kernels import prune

sys.path.insert(0, str(Path(__file__).parent))
import kernel_bounds

HERE = Path(__file__).parent


@triton.jit
def _copy16(x_ptr, y_ptr, N, MASKED: tl.constexpr):
    r = tl.arange(0, 16)
    m = (r < N) if MASKED else (r < 16)
    tl.store(y_ptr + r, tl.load(x_ptr + r, mask=m, other=0.0), mask=m)


def test_the_check_finds_an_unmasked_tail_and_passes_the_masked_one():
    # views of the first 10 of 16 elements: the unmasked launch then reads and writes past the views (what the
    # check must report) but inside their storage, so it does not corrupt this process's heap
    x, y = torch.randn(16)[:10], torch.empty(16)[:10]
    with kernel_bounds.bounds_checked() as found:
        _copy16[(1,)](x, y, 10, MASKED=True)
        assert found == []
        _copy16[(1,)](x, y, 10, MASKED=False)
        assert found == [
            {"kernel": "_copy16", "kind": "load", "count": 6},
            {"kernel": "_copy16", "kind": "store", "count": 6},
        ]
    found.clear()


def _bounds(ops: str, case: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, str(HERE / "kernel_bounds.py"), ops, case], capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


def _assert_in_bounds(rows: list[dict], ops: set[str]) -> None:
    assert {r["op"] for r in rows} == ops
    bad = [r for r in rows if r["violations"]]
    assert not bad, bad


def test_mlstm_and_gla_kernels_stay_in_bounds_at_every_config():
    # the GPU lists: BV 16/32/64 for the mLSTM, BV x BKI for GLA; odd head dims (K = 20, V = 24), T = 9 and 37
    rows = _bounds("mlstm,gla", "train")
    assert len({json.dumps(r["configs"]["_mlstm_fwd_kernel"]) for r in rows if r["op"] == "mlstm"}) == 3
    _assert_in_bounds(rows, {"mlstm", "gla"})


@pytest.mark.slow
def test_every_kernel_stays_in_bounds_at_every_config():
    _assert_in_bounds(_bounds("mlstm,gla,rglru,conv", ""), {"mlstm", "gla", "rglru", "conv"})


class _Named:
    __name__ = "_mlstm_fwd_kernel"


@pytest.mark.parametrize(
    "cc, dtype, dropped",
    [
        (90, torch.bfloat16, True),
        (90, torch.float16, True),
        (90, torch.float32, False),
        (80, torch.bfloat16, False),
        (100, torch.bfloat16, False),
    ],
)
def test_hook_drops_a_known_fault_on_its_architecture_for_16_bit_operands(cc, dtype, dropped, monkeypatch):
    monkeypatch.delenv("SEQZOO_AUTOTUNE", raising=False)  # every kept config (gpu_check.sh sets "first")
    bad = triton.Config({"BV": 16}, num_warps=8, num_stages=1)
    good = triton.Config({"BV": 16}, num_warps=4, num_stages=1)
    hook = prune.ResourcePrune()
    hook.kernel = _Named()
    hook.usage = lambda config, nargs, kwargs: prune.Usage(128, 0, 1024)  # compiled, fits, no spills
    kept, why = hook.verdict([bad, good], {"q_ptr": torch.empty(1, dtype=dtype)}, {}, cc)
    assert why is None
    assert kept == ([good] if dropped else [bad, good])


def test_compile_table_marks_a_known_fault_not_kept():
    def row(target, dtype):
        return {
            "kernel": "_mlstm_fwd_kernel",
            "constexprs": "L=64",
            "scenario": "s",
            "target": target,
            "config": "BV=16,w8,s1",
            "dtype": dtype,
            "status": "ok",
            "registers": 128,
            "spill_bytes": 0,
            "shared": 1024,
        }

    rows = aot.mark_kept([row("sm_90", "bfloat16"), row("sm_80", "bfloat16"), row("sm_90", "float32")])
    assert [r["kept"] for r in rows] == [False, True, True]
    assert [r["known_fault"] for r in rows] == [True, False, False]
    assert aot.summary(rows)["known_faults"] == 1


def test_known_faults_name_real_kernels_and_configs():
    # imported with the GPU autotune lists in a fresh process (this one has the interpreter's single configs)
    code = (
        "import sys, json; sys.path.insert(0, 'tests'); import kernel_bounds as kb\n"
        "from seqzoo.kernels.prune import config_label\n"
        "mods = kb.import_with_gpu_configs()\n"
        "print(json.dumps({n: [config_label(c) for c in k.configs] for m in mods.values() "
        "for n, k in kb._tuned(m).items()}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=HERE.parent)
    assert out.returncode == 0, out.stderr[-2000:]
    lists = json.loads(out.stdout.splitlines()[-1])
    for f in prune.KNOWN_FAULTS:
        assert f.config in lists[f.kernel], f
        assert len(lists[f.kernel]) > 1  # another config remains to run


@pytest.mark.parametrize(
    "op, case, kernel",
    [
        ("mlstm", "T9-K20-V16-fwd", "_mlstm_fwd_kernel"),
        ("conv", "T9-R40-train", "_conv_fwd_kernel"),
        ("gla", "T9-K20-V16-fwd", None),
        ("rglru", "scan-T9-R40-fwd", None),
    ],
)
def test_gpu_config_sweep_runs_one_config_under_the_interpreter(op, case, kernel):
    # the plumbing of tools/gpu_config_sweep.py (its GPU run is in docs/benchmarks.md): one child at config index 1,
    # its outputs against the op's float64 reference
    out = subprocess.run(
        [
            sys.executable,
            str(HERE.parent / "tools" / "gpu_config_sweep.py"),
            "--device",
            "cpu",
            "--child",
            op,
            case,
            "fp32",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.splitlines()[-1])
    if kernel == "_mlstm_fwd_kernel":  # index 1: the known fault's config (forced: the hook is not asked)
        assert res["configs"][kernel] == {"BV": 16, "num_warps": 8, "num_stages": 1}
    elif kernel:
        assert kernel in res["configs"]
    assert res["ok"] and res["max_rel_error"] < 1e-5
