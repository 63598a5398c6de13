"""``seqzoo kernels scoreboard``: run the GPU scoreboard (``scoreboard.py``) or print / write its docs table."""

from __future__ import annotations

import argparse
import shlex

from ..errors import require


def _list(s: str | None) -> list[str] | None:
    return None if s is None else [x.strip() for x in s.split(",") if x.strip()]


def cmd_scoreboard(args: argparse.Namespace) -> int:
    from . import scoreboard_table as table

    if args.table or args.update_docs:
        if args.update_docs:
            changed = table.update_docs(args.update_docs, args.out)
            print(f"{args.update_docs}: scoreboard table {'rewritten' if changed else 'already current'}")
        else:
            print(table.docs_block(args.out))
        return 0
    from . import scoreboard

    require(args.time_limit is None or args.time_limit > 0, f"--time-limit must be > 0, got {args.time_limit}")
    path = scoreboard.run_scoreboard(
        out=args.out,
        smoke=args.smoke,
        time_limit_s=args.time_limit or scoreboard.DEFAULT_TIME_LIMIT_S,
        autotune=args.autotune,
        tune_parts=_list(args.tune_parts),
        isolate=not args.no_isolate,
        only=_list(args.parts),
        commit=args.commit,
        command=_command(args),
    )
    data = table.json.loads(path.read_text())
    print(table.render_table(data))
    print(f"wrote {path}")
    return 0


def _command(args: argparse.Namespace) -> str:
    """The command line of this run, as the result file records it."""
    words = ["seqzoo", "kernels", "scoreboard", "--out", args.out, "--autotune", args.autotune]
    words += ["--smoke"] * args.smoke + ["--no-isolate"] * args.no_isolate
    for flag, value in (("--time-limit", args.time_limit), ("--parts", args.parts), ("--tune-parts", args.tune_parts)):
        words += [flag, str(value)] if value is not None else []
    return " ".join(shlex.quote(w) for w in words)


def add_parser(sub) -> None:
    """The ``scoreboard`` subcommand of ``seqzoo kernels``."""
    s = sub.add_parser(
        "scoreboard",
        help="time every kernel target against its same-run yardstick on a GPU, write <out>/<date>-<gpu>.json",
        description="Each target (mLSTM vs TFLA, GateLoop vs fla chunk_gla, RG-LRU vs a copy's bandwidth, sLSTM "
        "Triton vs the PyTorch loop) at B*T = 65,536 tokens, T = 4096 and 16384, bf16; every implementation checked "
        "against the float64 PyTorch path before it is timed; each part in its own process with a time budget. "
        "--smoke runs it on the CPU at tiny shapes (Triton interpreter); --table prints the docs table of the "
        "newest file in --out.",
    )
    s.add_argument("--out", default="benchmarks/gpu", help="folder of the result files (default benchmarks/gpu)")
    s.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU under the Triton interpreter")
    s.add_argument("--time-limit", type=float, default=None, help="seconds for the whole run (default 440)")
    s.add_argument(
        "--autotune", choices=("first", "all"), default="first", help="the children's SEQZOO_AUTOTUNE (first)"
    )
    s.add_argument("--parts", default=None, help="comma-separated parts to run (default: all)")
    s.add_argument(
        "--tune-parts",
        default=None,
        help="comma-separated parts run with SEQZOO_AUTOTUNE=all, e.g. mlstm,gla (minutes each; default: none)",
    )
    s.add_argument("--no-isolate", action="store_true", help="run the parts in this process (no time budgets)")
    s.add_argument("--commit", default=None, help="the commit measured (default: git rev-parse HEAD)")
    s.add_argument("--table", action="store_true", help="print the docs table of the newest file in --out")
    s.add_argument(
        "--update-docs", default=None, metavar="MD", help="rewrite the scoreboard block of this file (default: none)"
    )
    s.set_defaults(fn=cmd_scoreboard)
