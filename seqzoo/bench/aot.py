"""Ahead-of-time compile check: every Triton kernel the op dispatchers launch, compiled for real NVIDIA targets.

No GPU is needed: triton's compiler and the ``ptxas`` / ``cuobjdump`` shipped in the triton wheel
(``triton/backends/nvidia/bin``) build and inspect cubins for any ``sm_XX`` on a CPU-only machine.

1. **Capture** (``aot_capture.py``, a ``TRITON_INTERPRET=1`` subprocess): the ops' real entry points run forward
   and backward at the head dims / chunk sizes / widths the presets use, with the kernel launches recorded instead
   of executed: argument dtypes, integer sizes, constexprs (``L``, ``BK``, ``DOT``, ``HAS_STATE``, ...).
2. **Compile** (subprocesses without the interpreter, ``--procs`` in parallel): for every recorded launch, every
   autotune config of the kernel's GPU list (``triton.autotune(configs=...)`` as the module defines it outside the
   interpreter), every dtype and target, the JIT's own binder specialises the arguments (pointer dtypes, 16-divisible
   sizes, i64 for sizes >= 2³¹) and ``triton.compile(ASTSource(fn, signature, constexprs, attrs),
   target=GPUTarget("cuda", cc, 32))`` builds the cubin. Compiled kernels land in triton's cache
   (``--cache-dir``: keyed by kernel source hash, options and target), so a second run only re-reads them.
3. **Resources**: shared memory from the compiled kernel's metadata (dynamic shared memory at launch),
   registers and local-memory bytes (spills: the ``STACK`` frame + ``LOCAL``) from ``cuobjdump --dump-resource-usage``.
4. **Kept / pruned**: ``prune.keep_mask`` (the autotune hook's own rule) per launch and target: shared memory within
   the target's per-block limit and no spills.
5. **Index safety**: ``unsafe_offsets`` reads the TTIR: a pointer offset computed in 32 bits from a program id and
   a runtime size (e.g. ``pid * T * H * K``) can pass 2³¹ at the presets' sizes; the row counts such offsets.

``seqzoo kernels check`` (``bench/aot_cli.py``) is the command line.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from ..errors import InputError, require
from ..kernels.prune import Usage, config_label, keep_mask, known_fault, smem_limit
from ..kernels.switch import chunk_halvings
from .aot_summary import summary_markdown

TARGETS = {"sm_80": 80, "sm_90": 90, "sm_100": 100}
# ops/slstm/triton.py: MAX_HEAD_DIM (that module imports triton; this one must not): head dims up to it run the
# on-chip kernels (a tile of the next power of two), wider ones the streamed kernels (ops/slstm/triton_streamed.py)
SLSTM_MAX_HEAD_DIM = 64
OPS = ("mlstm", "gateloop", "rglru", "conv", "slstm")  # the keys of preset_sizes, for --ops
DTYPES = ("float32", "bfloat16", "float16")
MODES = ("train", "state")


# ------------------------------------------------------------------------------------------------------- planning
def preset_sizes() -> dict[str, list]:
    """The sizes the presets give each op, read from the mixers the presets build (on the meta device).

    ``mlstm``: (qk head dim, v head dim, chunk), the chunk also halved down to 16; ``gateloop``: (K, V, chunk) of multi-head presets (d_h > 1; max-heads
    presets take the scan path); ``rglru``: d_rnn; ``conv``: (channels, width); ``slstm``: head dim d."""
    import torch

    from ..mixers import MIXERS
    from ..models.presets import PRESETS

    out: dict[str, set] = {"mlstm": set(), "gateloop": set(), "rglru": set(), "conv": set(), "slstm": set()}
    for preset in PRESETS.values():
        cfg = preset.config()
        for name in set(cfg.pattern):
            if name not in ("mlstm", "gateloop", "rglru", "slstm"):
                continue
            with torch.device("meta"):
                m = MIXERS[name](d_model=cfg.d_model, **dict(cfg.mixer_kwargs.get(name, {})))
            if name == "mlstm":
                for tile in chunk_halvings(m.chunk_size):  # the tiles ops/mlstm/triton.py: kernel_tile may run
                    out["mlstm"].add((m.qk_dim, m.v_dim, tile))
                if getattr(m, "conv_size", None):
                    out["conv"].add((m.inner, m.conv_size))
            elif name == "gateloop" and not (m.head_k == 1 and m.head_v == 1):
                out["gateloop"].add((m.head_k, m.head_v, m.chunk_size))
            elif name == "rglru":
                out["rglru"].add(m.d_rnn)
                out["conv"].add((m.d_rnn, m.conv_size))
            elif name == "slstm":
                out["slstm"].add(m.head_dim)
    return {k: sorted(v) for k, v in out.items()}


def _pow2(n: int) -> int:
    return max(16, 1 << (int(n) - 1).bit_length())


def scenarios(sizes: dict[str, list], dtypes: Iterable[str], modes: Iterable[str] = MODES) -> list[dict]:
    """Op calls for ``aot_capture``. Sizes that give the same compiled kernel (same power-of-two tile, same
    16-divisibility) are called once: the first such size stands for the others."""
    from ..ops.mlstm.triton import qk_head_unfit

    out, seen = [], set()

    def add(sc: dict, key: tuple) -> None:
        if key not in seen:
            seen.add(key)
            out.append(sc)

    for dt in dtypes:
        for mode in modes:
            for K, V, L in sizes.get("mlstm", []):
                if qk_head_unfit(K) is not None:  # never launched: the dispatch takes the PyTorch path
                    continue
                sc = {"op": "mlstm", "dtype": dt, "mode": mode, "T": 2 * L, "K": K, "V": V, "chunk": L}
                add(sc, ("mlstm", dt, mode, _pow2(K), L, K % 16 == 0, V % 16 == 0))
            for K, V, L in sizes.get("gateloop", []):
                for cplx in (False, True):
                    sc = {"op": "gateloop", "dtype": dt, "mode": mode, "T": 2 * L, "K": K, "V": V, "chunk": L}
                    sc["complex"] = cplx
                    add(sc, ("gla", dt, mode, _pow2(K * (2 if cplx else 1)), L, K % 16 == 0, V % 16 == 0))
            for R in sizes.get("rglru", []):
                for op in ("rglru", "linear_scan"):
                    add({"op": op, "dtype": dt, "mode": mode, "T": 128, "R": R}, (op, dt, mode, R % 16 == 0))
            for d in sizes.get("slstm", []):
                # the streamed kernels loop over R tiles at run time: one width stands for every wider head
                tile = _pow2(d) if d <= SLSTM_MAX_HEAD_DIM else "streamed"
                for packed in (False, True):  # packed documents compile the segment_pos resets into the loop
                    sc = {"op": "slstm", "dtype": dt, "mode": mode, "T": 16, "d": d, "segments": packed}
                    add(sc, ("slstm", dt, mode, tile, d % 16 == 0, packed))
            for C, k in sizes.get("conv", []):
                sc = {"op": "causal_conv", "dtype": dt, "mode": mode, "T": 128, "C": C, "k": k}
                add(sc, ("conv", dt, mode, k, C % 16 == 0))
    return out


def not_launched(sizes: dict[str, list]) -> list[str]:
    """The preset sizes ``scenarios`` leaves out because the dispatch refuses them on every GPU before compiling
    (``ops/mlstm/triton.py: qk_head_unfit``), one line per head-dim pair with its chunk tiles and the reason."""
    from ..ops.mlstm.triton import qk_head_unfit

    tiles: dict[tuple, list[int]] = {}
    for K, V, L in sizes.get("mlstm", []):
        if qk_head_unfit(K) is not None:
            tiles.setdefault((K, V), []).append(L)
    return [
        f"mlstm K={K} V={V} chunk {'/'.join(map(str, sorted(Ls)))}: {qk_head_unfit(K)}" for (K, V), Ls in tiles.items()
    ]


def capture(scs: list[dict]) -> list[dict]:
    """Launch records of ``scs`` from ``aot_capture`` in a ``TRITON_INTERPRET=1`` subprocess."""
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-m", "seqzoo.bench.aot_capture"],
        input=json.dumps(scs),
        capture_output=True,
        text=True,
        env=env,
    )
    if r.returncode != 0:
        raise RuntimeError(f"kernel launch capture failed:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout)


def jobs(launches: list[dict], targets: Iterable[str], configs: str = "all") -> list[dict]:
    """One job per (distinct launch, autotune config, target). ``configs="ends"`` keeps the first and last config
    of each kernel's list, ``"first"`` the first (CI subsets). Ordered by head-dim tile (``BK``, stable): the small,
    quick compiles of every kernel, dtype and target come first, the slowest (largest tiles) last."""
    out, seen = [], set()
    ncfg = _config_counts(sorted({lc["kernel"] for lc in launches}))
    for lc in launches:
        n = ncfg[lc["kernel"]]
        idx = {"all": range(n), "ends": sorted({0, n - 1}), "first": [0]}[configs]
        for t in targets:
            for ci in idx:
                key = json.dumps([lc["kernel"], _spec(lc["args"]), lc["constexprs"], ci, t], sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    out.append({**lc, "config": ci, "target": t})
    return sorted(out, key=lambda j: j["constexprs"].get("BK", 0) if isinstance(j["constexprs"].get("BK"), int) else 0)


def _spec(args: dict) -> dict:
    """What of the arguments reaches the compiled kernel: dtypes, and of integers only what the JIT specialises on
    (divisible by 16, equal to 1, needing 64 bits)."""
    return {
        k: [a["value"] % 16 == 0, a["value"] == 1, abs(a["value"]) >= 2**31] if a["kind"] == "int" else a.get("dtype")
        for k, a in args.items()
    }


def _config_counts(kernels: list[str]) -> dict[str, int]:
    return _run_worker({"what": "config_counts", "kernels": kernels})


# ---------------------------------------------------------------------------------------------- compiling (worker)
def _bin(name: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def cubin_usage(cubin: bytes, workdir: str) -> tuple[int, int]:
    """(registers, local-memory bytes: stack frame + LOCAL) of a cubin, from ``cuobjdump --dump-resource-usage``."""
    path = os.path.join(workdir, f"k{os.getpid()}.cubin")
    with open(path, "wb") as fh:
        fh.write(cubin)
    out = subprocess.run([_bin("cuobjdump"), "--dump-resource-usage", path], capture_output=True, text=True, check=True)
    fields = dict(re.findall(r"(REG|STACK|LOCAL):(\d+)", out.stdout))
    require("REG" in fields, f"no resource usage in cuobjdump output: {out.stdout[-500:]}")
    return int(fields["REG"]), int(fields.get("STACK", 0)) + int(fields.get("LOCAL", 0))


_SSA = re.compile(r"^\s*(%[\w#]+)(?::\d+)?\s*=\s*([\w.]+)\s*(.*)$")


def unsafe_offsets(ttir: str) -> list[str]:
    """``tt.addptr`` ops whose offset is 32-bit and holds a product of a program-id-derived value and a runtime
    integer argument (a size such as T, H, K, C), e.g. ``pid * T * H * K``: such products pass 2³¹ at large
    batch·length·width. ``pid * BLOCK + arange`` (a constexpr tile) and ``arange * V`` (no program id) are bounded
    by one dimension or one head's state and are not flagged."""
    head = next((line for line in ttir.splitlines() if "tt.func" in line), "")
    int_args = set(re.findall(r"(%[\w#]+):\s*i32\b", head))
    # MLIR reuses value names in nested regions: resolve each name to its visible definition while reading
    defs: dict[int, tuple[str, list]] = {}  # uid -> (op, operand uids or arg names)
    scopes: list[dict[str, int]] = [{}]
    offsets: list[tuple[str, object]] = []  # (addptr line, offset uid) for 32-bit offsets

    def resolve(name: str):
        for scope in reversed(scopes):
            if name in scope:
                return scope[name]
        return name  # a function argument or a region argument

    for line in ttir.splitlines():
        body = line.strip()
        while body.startswith("}"):
            if len(scopes) > 1:
                scopes.pop()
            body = body[1:].strip()
        m = re.search(r"tt\.addptr\s+(%[\w#]+),\s*(%[\w#]+)\s*:\s*(.*)$", body)
        if m:
            types = re.sub(r"\s*loc\(.*$", "", m.group(3))
            if re.search(r"i32>?$", types.split(",")[-1].strip()):
                offsets.append((body, resolve(m.group(2))))
        loop = re.search(r"scf\.for\s+(%[\w#]+)\s*=\s*(%[\w#]+)\s+to\s+(%[\w#]+)\s+step\s+(%[\w#]+)", body)
        if loop:  # the induction variable depends on its bounds (e.g. a start computed from a program id)
            defs[len(defs)] = ("scf.for", [resolve(x) for x in loop.groups()[1:]])
            ivar = (loop.group(1), len(defs) - 1)
        m = _SSA.match(body)
        if m:
            name, op, rest = m.groups()
            uid = len(defs)
            defs[uid] = (op, [resolve(o) for o in re.findall(r"%[\w#]+", rest.split(" : ")[0])])
            scopes[-1][name] = uid
        if body.endswith("{"):
            scopes.append({})
            if loop:
                scopes[-1][ivar[0]] = ivar[1]
    memo: dict = {}

    def deps(v) -> frozenset:
        """{"pid", "arg", "prod"}: depends on a program id / a runtime int / holds a pid x size product."""
        if v in memo:
            return memo[v]
        memo[v] = frozenset()  # guards cycles
        if isinstance(v, str):
            memo[v] = frozenset({"arg"} if v in int_args else set())
            return memo[v]
        op, operands = defs[v]
        found = {"pid"} if op == "tt.get_program_id" else set()
        sub = [deps(o) for o in operands]
        for d in sub:
            found |= d
        if op == "arith.muli" and len(sub) == 2:
            a, b = sub
            if ("pid" in a and "arg" in b) or ("arg" in a and "pid" in b):
                found.add("prod")
        memo[v] = frozenset(found)
        return memo[v]

    return [line for line, off in offsets if "prod" in deps(off)]


def _compile_job(job: dict, workdir: str) -> dict:
    import importlib

    import torch
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    mod_name, kname = job["kernel"].split(":")
    tuned = getattr(importlib.import_module(mod_name), kname)
    fn, config = tuned.fn, tuned.configs[job["config"]]
    cc = TARGETS[job["target"]]
    target = GPUTarget("cuda", cc, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    args = {}
    for name, a in job["args"].items():
        if a["kind"] == "tensor":
            args[name] = torch.empty(16, dtype=getattr(torch, a["dtype"]))  # 64-byte aligned, as CUDA allocations
        else:
            args[name] = a["value"]
    for name, v in job["constexprs"].items():
        args[name] = tl.dtype(v["tl"]) if isinstance(v, dict) else v
    kwargs = {**{k: v for k, v in args.items() if k in fn.arg_names}, **config.all_kwargs()}
    row = {
        "kernel": kname,
        "op": mod_name.split(".")[-2],
        "target": job["target"],
        "config": config_label(config),
        "constexprs": ",".join(f"{k}={_short(v)}" for k, v in job["constexprs"].items()),
        "dtype": next((a["dtype"] for a in job["args"].values() if a["kind"] == "tensor"), ""),
        "scenario": job["scenario"],
    }
    t0 = time.perf_counter()
    try:
        bound, spec, opts = binder(**kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, opts)
        ck = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
        regs, spill = cubin_usage(ck.asm["cubin"], workdir)
        row.update(
            status="ok",
            registers=regs,
            spill_bytes=spill,
            shared=int(ck.metadata.shared),
            i32_offsets=len(unsafe_offsets(ck.asm["ttir"])),
        )
    except Exception as e:  # a compile error is a row of the table (and a failed check), not a crash
        row.update(status="error", error=f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}")
    row["compile_s"] = round(time.perf_counter() - t0, 2)
    return row


def _short(v) -> str:
    return v["tl"] if isinstance(v, dict) else str(v)


def _worker_main() -> int:
    req = json.load(sys.stdin)
    if req["what"] == "config_counts":
        import importlib

        out = {}
        for k in req["kernels"]:
            mod, name = k.split(":")
            out[k] = len(getattr(importlib.import_module(mod), name).configs)
        json.dump(out, sys.stdout)
        return 0
    workdir = req["workdir"]
    for job in req["jobs"]:
        print(json.dumps(_compile_job(job, workdir)), flush=True)
    return 0


def _env(cache_dir: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(OMP_NUM_THREADS="1", TRITON_DEFAULT_FP_FUSION=env.get("TRITON_DEFAULT_FP_FUSION", "1"))
    if cache_dir:
        env["TRITON_CACHE_DIR"] = str(Path(cache_dir) / "triton")
    return env


def _run_worker(req: dict, cache_dir: str | None = None):
    r = subprocess.run(
        [sys.executable, "-m", "seqzoo.bench.aot"],
        input=json.dumps(req),
        capture_output=True,
        text=True,
        env=_env(cache_dir),
    )
    if r.returncode != 0:
        raise RuntimeError(f"kernel compile worker failed:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout)


def compile_jobs(
    todo: list[dict],
    workers: int = 1,
    cache_dir: str | None = None,
    workdir: str | None = None,
    progress: str | Path | None = None,
):
    """Compile ``todo`` in ``workers`` subprocesses (no interpreter); rows per worker in job order. Each worker's
    output is read as it comes (a full pipe would stall a worker); ``progress``: a JSON-lines file that gets each
    row as soon as it is compiled (a long run that is stopped keeps what it finished). ``workdir`` (the workers'
    cubin scratch) defaults to a temporary folder removed afterwards."""
    import tempfile

    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="seqzoo-aot-") as tmp:
            return compile_jobs(todo, workers, cache_dir, tmp, progress)
    import threading

    parts = [todo[i::workers] for i in range(max(1, workers))]
    procs = []
    for part in parts:
        if not part:
            continue
        p = subprocess.Popen(
            [sys.executable, "-m", "seqzoo.bench.aot"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(cache_dir),
        )
        p.stdin.write(json.dumps({"what": "compile", "jobs": part, "workdir": workdir}))
        p.stdin.close()
        procs.append(p)
    lock = threading.Lock()
    outs: list[list[dict]] = [[] for _ in procs]
    errs: list[str] = ["" for _ in procs]
    sink = open(progress, "a") if progress else None  # noqa: SIM115  (written by two reader threads, closed below)

    def drain(j: int, p) -> None:
        for line in p.stdout:
            if line.strip():
                outs[j].append(json.loads(line))
                if sink is not None:
                    with lock:
                        sink.write(line if line.endswith("\n") else line + "\n")
                        sink.flush()

    def drain_err(j: int, p) -> None:
        errs[j] = p.stderr.read()

    threads = [threading.Thread(target=fn, args=(j, p)) for j, p in enumerate(procs) for fn in (drain, drain_err)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if sink is not None:
        sink.close()
    rows = []
    for j, p in enumerate(procs):
        if p.wait() != 0:
            raise RuntimeError(f"kernel compile worker failed:\n{errs[j][-4000:]}")
        rows += outs[j]
    return rows


# ------------------------------------------------------------------------------------------------------- the table
def mark_kept(rows: list[dict]) -> list[dict]:
    """``kept`` per row: ``prune.keep_mask`` over the configs of one launch on one target, less ``prune.KNOWN_FAULTS``
    (the hook's decision)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["kernel"], r["constexprs"], r["scenario"], r["target"]), []).append(r)
    for (_, _, _, target), grp in groups.items():
        limit = smem_limit(TARGETS[target])
        usages = [Usage(r["registers"], r["spill_bytes"], r["shared"]) if r["status"] == "ok" else None for r in grp]
        for r, keep in zip(grp, keep_mask(usages, limit)):
            r["smem_limit"] = limit
            r["fits"] = r["status"] == "ok" and r["shared"] <= limit
            r["known_fault"] = known_fault(r["kernel"], r["config"], TARGETS[target], r["dtype"]) is not None
            r["kept"] = keep and not r["known_fault"]
        for r in grp:
            r["launch_has_kept"] = any(g["kept"] for g in grp)
    return rows


COLUMNS = (
    "op",
    "kernel",
    "dtype",
    "constexprs",
    "config",
    "target",
    "status",
    "registers",
    "spill_bytes",
    "shared",
    "smem_limit",
    "fits",
    "kept",
    "known_fault",
    "i32_offsets",
)


def summary(rows: list[dict]) -> dict:
    launches = {(r["kernel"], r["constexprs"], r["scenario"], r["target"]) for r in rows}
    no_kept = {(r["kernel"], r["constexprs"], r["target"]) for r in rows if not r.get("launch_has_kept")}
    return {
        "compiled": len(rows),
        "errors": sum(r["status"] != "ok" for r in rows),
        "kept": sum(bool(r.get("kept")) for r in rows),
        "pruned": sum(r["status"] == "ok" and not r.get("kept") for r in rows),
        "known_faults": sum(bool(r.get("known_fault")) for r in rows),
        "kept_with_spills": sum(bool(r.get("kept")) and r["spill_bytes"] > 0 for r in rows),
        "i32_offsets": sum(r.get("i32_offsets", 0) for r in rows),
        "launches": len(launches),
        "launches_without_kept_config": sorted(" ".join(x) for x in no_kept),
    }


def markdown(rows: list[dict]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    body = []
    for r in rows:
        cells = []
        for c in COLUMNS:
            v = r.get(c, "")
            if c == "status" and r["status"] != "ok":
                v = f"error: {r.get('error', '')}".replace("|", "/")
            cells.append("yes" if v is True else "no" if v is False else str(v))
        body.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(body) + "\n"


def launch_summary(rows: list[dict]) -> str:
    """One markdown row per kernel x dtype x launch (constexprs) x target: configs compiled, errors, kept, pruned
    and the largest spill among them (``mark_kept``'s rows; a launch met in several scenarios counts once)."""
    groups: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        key = (r["kernel"], r["dtype"], r["constexprs"], r["target"])
        groups.setdefault(key, {}).setdefault(r["config"], r)  # the same launch from two scenarios: one config row
    head = "| kernel | dtype | launch | target | configs | errors | kept | pruned | largest spill (B) |\n" + "|---" * 9
    lines = [head + "|"]
    for (kernel, dtype, constexprs, target), by_config in sorted(groups.items()):
        grp = list(by_config.values())
        ok = [r for r in grp if r["status"] == "ok"]
        kept = sum(bool(r.get("kept")) for r in grp)
        spill = max((r["spill_bytes"] for r in ok), default=0)
        lines.append(
            f"| {kernel} | {dtype} | {constexprs} | {target} | {len(grp)} | {len(grp) - len(ok)} | {kept} "
            f"| {len(ok) - kept} | {spill} |"
        )
    return "\n".join(lines) + "\n"


def write_outputs(rows: list[dict], out: str | Path, meta: dict) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    s = summary(rows)
    (out / "kernels_aot.json").write_text(json.dumps({"meta": meta, "summary": s, "rows": rows}, indent=1))
    with open(out / "kernels_aot.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=[*COLUMNS, "scenario", "error", "compile_s"], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    lines = [f"- {k}: {v}" for k, v in s.items() if k != "launches_without_kept_config"]
    lines += [f"- launch without a kept config: {x}" for x in s["launches_without_kept_config"]]
    lines += [f"- not launched on any GPU (PyTorch path): {x}" for x in meta.get("not_launched", [])]
    (out / "kernels_aot.md").write_text(
        "\n".join(lines)
        + "\n\n## Per kernel, launch and target\n\n"
        + launch_summary(rows)
        + "\n## Every compile\n\n"
        + markdown(rows)
    )
    (out / "kernels_aot_summary.md").write_text(summary_markdown(rows))
    return s


def check(
    targets: Iterable[str] = tuple(TARGETS),
    dtypes: Iterable[str] = DTYPES,
    modes: Iterable[str] = MODES,
    sizes: dict | None = None,
    configs: str = "all",
    workers: int = 1,
    cache_dir: str | None = None,
    progress: str | Path | None = None,
    ops: Iterable[str] | None = None,
) -> list[dict]:
    """Capture, compile and mark: the rows of the table (``write_outputs`` writes them; ``progress``: a JSON-lines
    file of the rows as they compile). ``ops``: only these keys of ``preset_sizes`` (``OPS``; None: all), e.g.
    ``["slstm"]`` to recompile one op's rows and merge them into the committed table (``aot_merge.py``)."""
    targets, dtypes, modes = list(targets), list(dtypes), list(modes)
    for t in targets:
        require(t in TARGETS, f"--targets: unknown target {t!r}; known: {', '.join(TARGETS)}")
    for d in dtypes:
        require(d in DTYPES, f"--dtypes: unknown dtype {d!r}; known: {', '.join(DTYPES)}")
    for m in modes:
        require(m in MODES, f"--modes: unknown mode {m!r}; known: {', '.join(MODES)}")
    require(configs in ("all", "ends", "first"), f"configs must be 'all', 'ends' or 'first', got {configs!r}")
    if not isinstance(workers, int) or workers < 1:
        raise InputError(f"--procs must be a positive int, got {workers!r}")
    sizes = preset_sizes() if sizes is None else sizes
    if ops is not None:
        ops = list(ops)
        for op in ops:
            require(op in OPS, f"--ops: unknown op {op!r}; known: {', '.join(OPS)}")
        sizes = {k: v for k, v in sizes.items() if k in ops}
    launches = capture(scenarios(sizes, dtypes, modes))
    todo = jobs(launches, targets, configs)
    return mark_kept(compile_jobs(todo, workers, cache_dir, progress=progress))


if __name__ == "__main__":
    sys.exit(_worker_main())
