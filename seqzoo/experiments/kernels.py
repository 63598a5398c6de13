"""``seqzoo experiment kernels-bench`` (old name ``kernels``): kernel-level forward / forward+backward times and % of the roofline bound.

On CUDA: the shapes of NX-AI's mlstm_kernels TFLA benchmark (arXiv:2503.14376) against SDPA and installed peers; on CPU: torch reference
paths at small shapes, as ratios in one run. See seqzoo/bench/kernels.py and docs/benchmarks.md.
"""

from __future__ import annotations

from pathlib import Path

from . import register_experiment


@register_experiment(
    "kernels-bench",
    "kernel fwd / fwd+bwd time and % of roofline (CUDA); torch-path ratios on CPU",
    aliases=("kernels",),
    forwards="seqzoo.bench.kernels:run_kernel_bench",
)
def run(out_dir: str | Path = "results/kernels", **options):
    from ..bench.kernels import run_kernel_bench

    if "ops" in options and isinstance(options["ops"], str):
        options["ops"] = tuple(options["ops"].split(","))
    rows = run_kernel_bench(out_dir=out_dir, **options)
    return {"rows": len(rows), "out_dir": str(out_dir)}
