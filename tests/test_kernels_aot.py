"""Ahead-of-time compile check of the Triton kernels for NVIDIA targets (seqzoo/bench/aot.py), the autotune
prune hook (seqzoo/kernels/prune.py) and the 64-bit index check. Compiling needs triton (no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest
import torch

from seqzoo.errors import InputError
from seqzoo.kernels import prune
from seqzoo.kernels.prune import Usage, keep_mask, smem_limit

triton = pytest.importorskip("triton")

from seqzoo.bench import aot

# ------------------------------------------------------------------------------------------ decision logic (CPU)


def test_keep_mask_fabricated():
    lim = 100_000
    us = [Usage(128, 0, 50_000), Usage(255, 64, 50_000), Usage(200, 0, 100_001), None, Usage(96, 0, 100_000)]
    assert keep_mask(us, lim) == [True, False, False, False, True]
    # nothing spill-free: nothing kept (a spilling config is never launched; the dispatch takes the torch path)
    us = [Usage(255, 64, 10), Usage(255, 32, 10), Usage(255, 32, 200_000), Usage(255, 32, 20)]
    assert keep_mask(us, lim) == [False] * 4


def test_smem_limits():
    assert smem_limit(80) == 166912 and smem_limit(90) == 232448 and smem_limit(100) == 232448
    assert smem_limit(89) == 101376 and smem_limit(75) == 49152


class _Compiled:
    def __init__(self, regs, spills, shared):
        self.n_regs, self.n_spills, self.metadata = regs, spills, types.SimpleNamespace(shared=shared)

    def _init_handles(self):
        pass


class _Kernel:
    """Stands in for a JITFunction: ``warmup`` returns fabricated resources per BV."""

    __name__ = "fake_kernel"

    def __init__(self, table):
        self.table, self.calls = table, []

    def warmup(self, *args, grid, **kwargs):
        self.calls.append(kwargs)
        res = self.table[kwargs["BV"]]
        if res is None:
            raise RuntimeError("out of resource: shared memory")
        return _Compiled(*res)


def test_prune_hook_fabricated(monkeypatch):
    monkeypatch.delenv("SEQZOO_AUTOTUNE", raising=False)  # every kept config (gpu_check.sh sets "first")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (8, 0))
    hook = prune.ResourcePrune()
    hook.kernel = _Kernel({16: (96, 0, 20_000), 32: (255, 128, 40_000), 64: (128, 0, 170_000), 128: None})
    cfgs = [triton.Config({"BV": bv}, num_warps=4) for bv in (16, 32, 64, 128)]
    kept = hook(cfgs, {"x": torch.zeros(2)}, L=64)
    assert [c.kwargs["BV"] for c in kept] == [16]  # 32 spills, 64 exceeds sm_80's 163 KB, 128 does not compile
    assert all(c["L"] == 64 for c in hook.kernel.calls)  # the launch's constexprs reach the compile
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (9, 0))
    assert [c.kwargs["BV"] for c in hook(cfgs, {"x": torch.zeros(2)}, L=64)] == [16, 64]  # 227 KB on sm_90
    hook.kernel = _Kernel({16: (255, 8, 300_000), 32: (255, 8, 300_000), 64: None, 128: None})
    with pytest.raises(RuntimeError, match="no autotune config can run on sm_90.*shared memory"):
        hook(cfgs, {"x": torch.zeros(2)}, L=64)
    hook.kernel = _Kernel({16: (255, 8, 1000), 32: (255, 16, 1000), 64: None, 128: None})  # fits, but spills
    with pytest.raises(RuntimeError, match="no autotune config can run on sm_90.*spills registers"):
        hook(cfgs, {"x": torch.zeros(2)}, L=64)


def test_autotune_first_keeps_the_first_fitting_config_and_compiles_nothing_after_it(monkeypatch):
    monkeypatch.delenv("SEQZOO_AUTOTUNE", raising=False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (9, 0))
    table = {16: (255, 128, 40_000), 32: (96, 0, 20_000), 64: (128, 0, 170_000), 128: None}  # 16 spills
    cfgs = [triton.Config({"BV": bv}, num_warps=4) for bv in (16, 32, 64, 128)]
    hook = prune.ResourcePrune()
    hook.kernel = _Kernel(table)
    assert [c.kwargs["BV"] for c in hook(cfgs, {"x": torch.zeros(2)}, L=64)] == [32, 64]  # default: all
    monkeypatch.setenv("SEQZOO_AUTOTUNE", "first")
    hook.kernel = _Kernel(table)
    assert [c.kwargs["BV"] for c in hook(cfgs, {"x": torch.zeros(2)}, L=64)] == [32]
    assert [c["BV"] for c in hook.kernel.calls] == [16, 32]  # the spilling 16, then 32: nothing compiled after
    hook.kernel = _Kernel({16: (255, 8, 1000), 32: None, 64: None, 128: None})  # none kept: same error as "all"
    with pytest.raises(RuntimeError, match="spills registers"):
        hook(cfgs, {"x": torch.zeros(2)}, L=64)
    monkeypatch.setenv("SEQZOO_AUTOTUNE", "fastest")
    with pytest.raises(ValueError, match="SEQZOO_AUTOTUNE must be one of"):
        hook(cfgs, {"x": torch.zeros(2)}, L=64)


def test_hook_installed_on_every_autotuned_kernel():
    from seqzoo.ops.causal_conv import triton as c
    from seqzoo.ops.gateloop import triton as g
    from seqzoo.ops.mlstm import triton as m
    from seqzoo.ops.rglru import triton as r

    tuned = [v for mod in (c, g, m, r) for v in vars(mod).values() if isinstance(v, triton.runtime.Autotuner)]
    assert len(tuned) == 12
    for t in tuned:
        assert isinstance(t.early_config_prune, prune.ResourcePrune) and t.early_config_prune.kernel is t.fn


# --------------------------------------------------------------------------------------------- index safety (IR)
_BAD = """
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from seqzoo.bench.aot import unsafe_offsets

@triton.jit
def k(x_ptr, y_ptr, T, H, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    r = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + pid * T * H + r)  # 32-bit: wraps past 2**31
    tl.store(y_ptr + pid.to(tl.int64) * T * H + r, v)  # 64-bit
    tl.store(y_ptr + pid * BLOCK + r, v)  # bounded by the grid and a tile: not a size product

sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "T": "i32", "H": "i32", "BLOCK": "constexpr"}
ck = triton.compile(ASTSource(k, sig, {"BLOCK": 16}), target=GPUTarget("cuda", 90, 32))
print(len(unsafe_offsets(ck.asm["ttir"])), unsafe_offsets(ck.asm["ttir"])[0].split("=")[0].strip())
"""


def test_unsafe_offsets_finds_32bit_size_products(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    (tmp_path / "bad_kernel.py").write_text(_BAD)  # triton.jit reads the source from a file
    out = subprocess.run([sys.executable, str(tmp_path / "bad_kernel.py")], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    n, name = out.stdout.split()
    assert n == "1"  # the pid * T * H load, not the int64 store nor the pid * BLOCK one
    assert name.startswith("%")


# ---------------------------------------------------------------------------------------- compile check (CI subset)
# gateloop K=8: the real (BK=16) and complex (2K, BK=16) calls give one compiled kernel
SMALL = {"mlstm": [(64, 64, 64)], "gateloop": [(8, 16, 64)], "rglru": [192], "conv": [(128, 4)]}


def test_scenarios_dedupe_sizes_with_one_compiled_kernel():
    sizes = {"mlstm": [(48, 48, 64), (64, 64, 64), (256, 512, 64)], "rglru": [1024, 1536]}
    scs = aot.scenarios(sizes, ["bfloat16"], ["train"])
    assert [(s["op"], s.get("K")) for s in scs] == [
        ("mlstm", 48),
        ("mlstm", 256),
        ("rglru", None),
        ("linear_scan", None),
    ]


def test_heads_the_dispatch_refuses_are_listed_not_compiled():
    """qk heads wider than the mLSTM kernels' register tile (``qk_head_unfit``) are never launched on a GPU: the
    check leaves them out of the compile jobs and lists them with the reason (the presets do have them)."""
    sizes = {"mlstm": [(64, 64, 64), (384, 384, 64), (384, 384, 32), (1024, 1024, 64)]}
    assert [s["K"] for s in aot.scenarios(sizes, ["float32"], ["train"])] == [64]
    out = aot.not_launched(sizes)
    assert len(out) == 2 and out[0].startswith("mlstm K=384 V=384 chunk 32/64: qk head dim K=384")
    assert "K=1024" in out[1]
    assert any("K=384" in x for x in aot.not_launched(aot.preset_sizes()))  # xlstm71-125m


def test_launch_summary_counts_configs_once_per_launch():
    """Per kernel x dtype x launch x target: configs, errors, kept, pruned, largest spill; a launch recorded in two
    scenarios counts its configs once (fabricated rows, as ``mark_kept`` marks them)."""

    def row(config, scenario, status="ok", spill=0, kept=True, target="sm_90"):
        return {
            "kernel": "_k",
            "dtype": "bfloat16",
            "constexprs": "L=16",
            "target": target,
            "config": config,
            "scenario": scenario,
            "status": status,
            "spill_bytes": spill,
            "kept": kept,
        }

    rows = [
        row("w4", "a"),
        row("w8", "a", spill=96, kept=False),
        row("w16", "a", status="error", kept=False),
        row("w4", "b"),  # the same launch from another scenario
        row("w4", "a", target="sm_80", spill=8, kept=False),
    ]
    lines = aot.launch_summary(rows).splitlines()
    assert lines[2:] == [
        "| _k | bfloat16 | L=16 | sm_80 | 1 | 0 | 0 | 1 | 8 |",
        "| _k | bfloat16 | L=16 | sm_90 | 3 | 1 | 1 | 1 | 96 |",
    ]


def test_check_refuses_unknown_names():
    with pytest.raises(InputError, match="--targets"):
        aot.check(targets=["sm_75"], sizes=SMALL)
    with pytest.raises(InputError, match="--dtypes"):
        aot.check(dtypes=["float64"], sizes=SMALL)


def test_aot_ci_subset(tmp_path):
    """Every kernel the dispatchers launch in training (forward + backward) at the smallest preset sizes, bf16, the
    first and last autotune config, sm_90; the first config on sm_80 / sm_100 for the RG-LRU kernels. Captured from
    the real launch code."""
    rows = aot.check(targets=["sm_90"], dtypes=["bfloat16"], modes=["train"], sizes=SMALL, configs="ends", workers=2)
    rows += aot.check(
        targets=["sm_80", "sm_100"], dtypes=["float16"], modes=["train"], sizes={"rglru": [192]}, configs="first"
    )
    kernels = {r["kernel"] for r in rows}
    assert kernels == {
        "_mlstm_fwd_kernel",
        "_mlstm_bwd_dstate_kernel",
        "_mlstm_bwd_kernel",
        "_gla_fwd_kernel",
        "_gla_bwd_dstate_kernel",
        "_gla_bwd_kernel",
        "_rglru_fwd_kernel",
        "_rglru_bwd_kernel",
        "_scan_fwd_kernel",
        "_scan_bwd_kernel",
        "_conv_fwd_kernel",
        "_conv_bwd_kernel",
    }
    s = aot.write_outputs(rows, tmp_path, {})
    assert s["errors"] == 0, [r.get("error") for r in rows if r["status"] != "ok"]
    assert s["kept_with_spills"] == 0 and s["i32_offsets"] == 0
    assert {r["target"] for r in rows} == {"sm_80", "sm_90", "sm_100"}
    for r in rows:
        assert 0 < r["registers"] <= 255 and r["shared"] >= 0 and r["spill_bytes"] >= 0
        assert r["kept"] == (r["shared"] <= r["smem_limit"] and r["spill_bytes"] == 0)
    # the hook's rule on the real numbers
    groups = {}
    for r in rows:
        groups.setdefault((r["kernel"], r["constexprs"], r["scenario"], r["target"]), []).append(r)
    for grp in groups.values():
        us = [Usage(r["registers"], r["spill_bytes"], r["shared"]) for r in grp]
        assert [r["kept"] for r in grp] == keep_mask(us, grp[0]["smem_limit"])
    md = (tmp_path / "kernels_aot.md").read_text()
    summary_part, every = md.split("## Every compile")
    assert every.count("| _") == len(rows) and "## Per kernel, launch and target" in summary_part
    assert (tmp_path / "kernels_aot.csv").exists() and (tmp_path / "kernels_aot.json").exists()
    assert (tmp_path / "kernels_aot_summary.md").read_text().count("| `_") == len(
        {(r["kernel"], r["target"]) for r in rows}
    )


def test_mlstm_on_sm80_fits_at_the_tile_kernel_tile_picks(tmp_path):
    """Real cubins, every autotune config: head dim 64, bf16, training, sm_80 (A100). At chunk 64 the h-writing
    forward spills in every config; at 32 every kernel keeps one, which is the tile ``kernel_tile`` falls to
    (tests/test_kernels_fallback.py) and the tile an A100 runs at the presets' chunk 64."""
    rows = aot.check(
        targets=["sm_80"],
        dtypes=["bfloat16"],
        modes=["train"],
        sizes={"mlstm": [(64, 64, 32)]},
        configs="all",
        workers=2,
    )
    kept: dict[tuple, bool] = {}  # per launch (the forward twice: writing h, and the states-only recompute)
    for r in rows:
        launch = (r["kernel"], r["constexprs"])
        kept[launch] = kept.get(launch, False) or r["kept"]
    assert len(kept) == 4 and all(kept.values()), kept
    assert {k for k, _ in kept} == {"_mlstm_fwd_kernel", "_mlstm_bwd_dstate_kernel", "_mlstm_bwd_kernel"}
    assert not any(r["kept"] and r["spill_bytes"] for r in rows)


@pytest.mark.slow
def test_aot_full_check(tmp_path):
    """The full table: every kernel x autotune config x fp32/bf16/fp16 x sm_80/sm_90/sm_100 at the presets' sizes."""
    rows = aot.check(workers=2, cache_dir=os.environ.get("SEQZOO_AOT_CACHE"))
    s = aot.write_outputs(rows, tmp_path, {})
    assert s["errors"] == 0 and s["kept_with_spills"] == 0 and s["i32_offsets"] == 0


def test_compile_scratch_is_removed(tmp_path, monkeypatch):
    """The workers' cubin scratch folder is temporary: nothing is left behind after the compiles."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    launches = aot.capture(aot.scenarios({"conv": [(128, 4)]}, ["float32"], ["state"]))
    rows = aot.compile_jobs(aot.jobs(launches, ["sm_90"], "first"), workers=1)
    assert rows and rows[0]["status"] == "ok"
    assert list(tmp_path.iterdir()) == []


def test_cli_help():
    from seqzoo.cli import make_parser

    with pytest.raises(SystemExit) as e:
        make_parser().parse_args(["kernels", "check", "--help"])
    assert e.value.code == 0
