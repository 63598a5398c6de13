"""``seqzoo kernels check``: compile every Triton kernel for NVIDIA targets on this machine (``bench/aot.py``);
``seqzoo kernels scoreboard`` (``scoreboard_cli.py``)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ..cli_options import add_hidden_alias


def _list(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def cmd_check(args: argparse.Namespace) -> int:
    from ..outputs import check_output_dir
    from . import aot

    check_output_dir(args.out, "--out")
    t0 = time.perf_counter()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "kernels_aot.partial.jsonl").unlink(missing_ok=True)
    rows = aot.check(
        targets=_list(args.targets),
        dtypes=_list(args.dtypes),
        modes=_list(args.modes),
        configs=args.configs,
        workers=args.procs,
        cache_dir=args.cache_dir,
        progress=Path(args.out) / "kernels_aot.partial.jsonl",
        ops=None if args.ops is None else _list(args.ops),
    )
    meta = {"targets": args.targets, "dtypes": args.dtypes, "modes": args.modes, "configs": args.configs}
    sizes = aot.preset_sizes()
    if args.ops is not None:
        meta["ops"] = args.ops
        sizes = {k: v for k, v in sizes.items() if k in _list(args.ops)}
    meta["not_launched"] = aot.not_launched(sizes)
    s = aot.write_outputs(rows, args.out, meta)
    print(json.dumps({k: v for k, v in s.items() if k != "launches_without_kept_config"}))
    for x in s["launches_without_kept_config"]:
        print(f"no spill-free config that fits: {x}")
    print(f"wrote {args.out}/kernels_aot.md, .csv, .json, kernels_aot_summary.md in {time.perf_counter() - t0:.0f} s")
    failed = s["errors"] or s["kept_with_spills"] or s["i32_offsets"]
    return 1 if failed else 0


def cmd_summary(args: argparse.Namespace) -> int:
    from ..outputs import check_output_file
    from .aot_summary import read_table, summary_markdown

    if args.out is not None:
        check_output_file(args.out, "--out")
    text = summary_markdown(read_table(args.table))
    if args.out is None:
        print(text, end="")
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from .aot_merge import merge, read_rows

    rows, meta = read_rows(args.rows)
    counts = merge(args.table, rows, meta)
    ops = ", ".join(sorted({r["op"] for r in rows}))
    print(json.dumps(counts))
    print(f"merged {len(rows)} rows of {ops} into {args.table} and {Path(args.table).with_suffix('.md')}")
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("kernels", help="Triton kernel tools (ahead-of-time compile check, GPU scoreboard)")
    sub = p.add_subparsers(dest="kernels_command", required=True)
    c = sub.add_parser(
        "check",
        help="compile every Triton kernel x autotune config x dtype for NVIDIA targets (no GPU needed)",
        description="Capture the kernel launches of the ops at the presets' sizes, compile every autotune config "
        "for each target with triton + ptxas, and write a table of registers, spill bytes and shared memory "
        "(kept / pruned by the autotune hook's rule). Exit 1 on a compile error, a kept config that spills or a "
        "32-bit pointer offset from a program id and a runtime size.",
    )
    c.add_argument("--targets", default="sm_80,sm_90,sm_100", help="comma list (default sm_80,sm_90,sm_100)")
    c.add_argument("--dtypes", default="float32,bfloat16,float16", help="comma list of input dtypes")
    c.add_argument("--modes", default="train,state", help="train: forward + backward; state: forward with a state")
    c.add_argument(
        "--configs", choices=("all", "ends", "first"), default="all", help="every autotune config, first+last, or first"
    )
    procs = c.add_argument("--procs", type=int, default=1, help="compile processes in parallel")
    add_hidden_alias(c, "--jobs", of=procs)  # its name before --procs, the zoo's name for the same idea
    c.add_argument(
        "--cache-dir", default=None, help="triton cache for the compiled kernels, reruns are quick (default: triton's)"
    )
    c.add_argument(
        "--ops",
        default=None,
        help="comma list of ops to compile (mlstm, gateloop, rglru, conv, slstm; default: all), e.g. to recompile one "
        "op's rows and merge them into the committed table with `seqzoo kernels merge`",
    )
    c.add_argument("--out", default="results/kernels", help="output folder")
    c.set_defaults(fn=cmd_check)
    m = sub.add_parser(
        "summary",
        help="one row per kernel x target of a compile table: registers, shared memory, occupancy, spills",
        description="Read the CSV that `seqzoo kernels check` wrote and print (or write) one markdown row per kernel "
        "and target: compiles, kept configs, and over the kept ones the range of registers per thread, shared "
        "memory and theoretical occupancy, with the largest spill (bench/aot_summary.py).",
    )
    m.add_argument(
        "--table",
        default="benchmarks/aot/compile_table.csv",
        help="the kernels_aot.csv of a check (default: the committed table, benchmarks/aot/compile_table.csv)",
    )
    m.add_argument("--out", default=None, help="write the markdown here (default: none, print it)")
    m.set_defaults(fn=cmd_summary)
    g = sub.add_parser(
        "merge",
        help="replace one op's rows of the committed compile table by those of a `kernels check --ops` run",
        description="Read the kernels_aot.json of `seqzoo kernels check --ops OP` and replace the rows of its ops in "
        "the compile table CSV and in the markdown beside it (summary counts, launches without a kept config, "
        "per-launch rows), so that one op's kernels are recompiled without the hours of a full check "
        "(bench/aot_merge.py).",
    )
    g.add_argument("--rows", required=True, help="the kernels_aot.json of a `seqzoo kernels check --ops ...` run")
    g.add_argument(
        "--table",
        default="benchmarks/aot/compile_table.csv",
        help="the compile table CSV to update, with its .md beside it (default: benchmarks/aot/compile_table.csv)",
    )
    g.set_defaults(fn=cmd_merge)
    from .scoreboard_cli import add_parser as add_scoreboard_parser

    add_scoreboard_parser(sub)
