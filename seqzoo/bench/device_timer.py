"""Time one call on a GPU within a budget: warm-up, L2 flushed before every timed call, CUDA events, all times kept.

``triton.testing.do_bench`` spends a fixed warm-up and repeat time per call; the scoreboard (``scoreboard.py``) has
minutes for a dozen targets whose calls take from 0.1 ms (a copy) to seconds (a PyTorch step loop over 16K tokens),
so here the number of repeats follows a time budget instead: at least ``min_repeats``, then more until the budget
is spent or ``max_repeats`` is reached. The median of the kept times is the result (callers take it).

On a CPU (the scoreboard's ``--smoke`` mode) the same loop runs with ``time.perf_counter``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

# larger than the L2 of every current NVIDIA GPU (H100 / H200: 50 / 60 MB), as triton.testing.do_bench flushes
L2_FLUSH_BYTES = 256 * 2**20


def time_calls(
    fn: Callable[[], Any],
    device: torch.device,
    budget_s: float = 2.0,
    min_repeats: int = 3,
    max_repeats: int = 100,
    warmup: int = 1,
) -> list[float]:
    """Milliseconds of each timed call of ``fn`` after ``warmup`` untimed calls (compiles, autotuning, caches)."""
    for _ in range(warmup):
        fn()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times: list[float] = []
    t0 = time.perf_counter()
    while len(times) < max_repeats and (len(times) < min_repeats or time.perf_counter() - t0 < budget_s):
        if cuda:
            flush.zero_()  # the inputs come from HBM, not from the L2 the previous call filled
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(float(start.elapsed_time(end)))
        else:
            s = time.perf_counter()
            fn()
            times.append((time.perf_counter() - s) * 1e3)
    return times


def summary(times: list[float]) -> dict[str, Any]:
    """Median (the result), spread and count of a list of call times in ms."""
    return {
        "ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "repeats": len(times),
    }


def copy_closure(n_elements: int, dtype: torch.dtype, device: torch.device) -> tuple[Callable[[], Any], int]:
    """A plain device-to-device copy of ``n_elements`` (``torch.Tensor.copy_``) and the bytes it moves (read +
    written): the bandwidth a memory-bound kernel of that size can be held against in the same run."""
    src = torch.randn(n_elements, device=device).to(dtype)  # random, not zeros: a GPU can run faster on zeros
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), 2 * n_elements * src.element_size()
