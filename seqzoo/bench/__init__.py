"""Benchmarks: measured time and memory, always as ratios against a baseline from the same run."""

from .measure import measure_point
from .mixers import format_table, run_mixer_bench

__all__ = ["format_table", "measure_point", "run_mixer_bench"]
