"""Measure one (mixer, mode, length) point: forward and forward+backward time, peak memory.

CPU memory is the increase of the process's peak resident set (``ru_maxrss``) during one call, so each
point runs in a fresh subprocess (``python -m seqzoo.bench.measure '<json>'``). On CUDA the peak comes
from ``torch.cuda.max_memory_allocated`` in-process. Times are medians from ``torch.utils.benchmark``.
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

import torch
from torch.utils import benchmark

from ..mixers import build_mixer


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def measure_point(
    mixer: str,
    mode: str | None,
    T: int,
    d_model: int = 64,
    batch: int = 1,
    mixer_kwargs: dict[str, Any] | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    backward: bool = True,
    min_run_time: float = 0.3,
    threads: int | None = None,
    doc_length: int | None = None,
) -> dict[str, Any]:
    """``doc_length``: the rows pack documents of that many tokens (``segment_pos`` restarting every
    ``doc_length`` positions, passed to the mixer), the packed path's cost at the same length."""
    if threads:
        torch.set_num_threads(threads)
    dev = torch.device(device)
    torch.manual_seed(0)
    m = build_mixer(mixer, d_model=d_model, **(mixer_kwargs or {})).to(dev, getattr(torch, dtype))
    x = torch.randn(batch, T, d_model, device=dev, dtype=getattr(torch, dtype))
    cuda = dev.type == "cuda"
    extra = {}
    if doc_length:
        extra["segment_pos"] = (torch.arange(T, device=dev) % doc_length).expand(batch, T)

    def fwd():
        with torch.no_grad():
            return m(x, mode=mode, **extra)[0]

    def fwd_bwd():
        xg = x.detach().requires_grad_(True)
        m(xg, mode=mode, **extra)[0].float().square().mean().backward()

    out: dict[str, Any] = {}
    # memory first: the first calls set the peak (on CPU the high-water mark only grows, so forward goes
    # first and forward+backward is read against the same starting point)
    base = _rss_mb()
    for name, fn in (("fwd", fwd), ("fwdbwd", fwd_bwd)) if backward else (("fwd", fwd),):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            fn()
            torch.cuda.synchronize()
            out[f"{name}_mem_mb"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        else:
            fn()
            out[f"{name}_mem_mb"] = max(0.0, _rss_mb() - base)
        m.zero_grad(set_to_none=True)
    for name, fn in (("fwd", fwd), ("fwdbwd", fwd_bwd)) if backward else (("fwd", fwd),):
        t = benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time)
        out[f"{name}_ms"] = t.median * 1e3
    return out


if __name__ == "__main__":
    from ..host_memory import apply_malloc_setting

    apply_malloc_setting()  # as the parent command line did: mallopt does not pass to a child process
    print(json.dumps(measure_point(**json.loads(sys.argv[1]))))
