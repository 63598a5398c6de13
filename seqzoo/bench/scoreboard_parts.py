"""The parts of the GPU scoreboard (``scoreboard.py``): which implementations each child process checks and times.

A *part* is what one child process runs (``python -m seqzoo.bench.scoreboard_parts --part NAME --records FILE``):
a compiler abort or a CUDA fault then costs that part alone, and a part that outlasts its time budget is killed
without losing the records it already wrote (one JSON line each, appended as soon as it is measured). How each
implementation is checked and timed: ``scoreboard_measure.py``; the ops: ``scoreboard_ops.py``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .scoreboard_measure import (
    GPU_SHAPES,
    GPU_TIMING,
    SMOKE_SHAPES,
    SMOKE_TIMING,
    Context,
    Family,
    Shapes,
    measure,
    measure_copy,
)
from .scoreboard_ops import gla_family, mlstm_family, rglru_family, scan_family, slstm_family


def _family_part(make_family: Callable[[Shapes], Family], keys: tuple[str, ...]) -> Callable[[Context], None]:
    def run(ctx: Context) -> None:
        fam = make_family(ctx.shapes)
        measure(ctx, fam, [i for i in fam.impls if i.key in keys])

    return run


def _rglru_part(ctx: Context) -> None:
    measure_copy(ctx)
    for make_family in (scan_family, rglru_family):
        fam = make_family(ctx.shapes)
        measure(ctx, fam, fam.impls)


def _gla_part(ctx: Context) -> None:
    _family_part(lambda s: gla_family(s, False), ("gla_real",))(ctx)
    _family_part(lambda s: gla_family(s, True), ("gateloop_complex",))(ctx)


# part -> (the implementation keys it records, its runner); peers in parts of their own
PARTS: dict[str, tuple[tuple[str, ...], Callable[[Context], None]]] = {
    "rglru": (("copy", "scan", "rglru_fused"), _rglru_part),
    "mlstm": (("mlstm",), _family_part(mlstm_family, ("mlstm",))),
    "mlstm_peer": (("mlstm_kernels",), _family_part(mlstm_family, ("mlstm_kernels",))),
    "gla": (("gla_real", "gateloop_complex"), _gla_part),
    "gla_peer": (("fla_chunk_gla",), _family_part(lambda s: gla_family(s, False), ("fla_chunk_gla",))),
    "slstm": (("slstm_triton", "slstm_loop"), _family_part(slstm_family, ("slstm_triton", "slstm_loop"))),
    "slstm_official": (("slstm_official",), _family_part(slstm_family, ("slstm_official",))),
}


def run_part(name: str, device: torch.device, smoke: bool, emit: Callable[[dict[str, Any]], None]) -> None:
    """Run part ``name`` on ``device`` (``smoke``: tiny shapes, one timed call), every record to ``emit``."""
    shapes, timing = (SMOKE_SHAPES, SMOKE_TIMING) if smoke else (GPU_SHAPES, GPU_TIMING)
    PARTS[name][1](Context(device, shapes, timing, emit))


def append_record(path: Path) -> Callable[[dict[str, Any]], None]:
    """An ``emit`` that appends each record to ``path`` as one JSON line, flushed (a killed part keeps them)."""

    def emit(rec: dict[str, Any]) -> None:
        with open(path, "a") as fh:
            fh.write(json.dumps(rec) + "\n")

    return emit


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m seqzoo.bench.scoreboard_parts", description=__doc__.splitlines()[0])
    p.add_argument("--part", required=True, choices=sorted(PARTS))
    p.add_argument("--records", required=True, help="JSON-lines file the records are appended to")
    p.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (Triton interpreter)")
    a = p.parse_args(argv)
    device = torch.device("cpu" if a.smoke else "cuda")
    run_part(a.part, device, a.smoke, append_record(Path(a.records)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
