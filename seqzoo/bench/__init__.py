"""Benchmarks: measured time and memory, always as ratios against a baseline from the same run."""

from .measure import measure_point
from .mixers import format_table, run_mixer_bench

__all__ = ["format_model_table", "format_table", "measure_point", "run_mixer_bench", "run_model_bench"]


def __getattr__(name: str):
    # imported on first use, so that ``python -m seqzoo.bench.models`` does not find itself already imported
    if name in ("run_model_bench", "format_model_table"):
        from . import models

        return getattr(models, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
