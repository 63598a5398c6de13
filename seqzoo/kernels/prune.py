"""Autotune configs that cannot run well are never tried: drop those over the shared-memory limit or that spill.

``keep_mask`` is the one decision, used by the autotune hook on a GPU and by the ahead-of-time table
(``seqzoo kernels check``, ``kernels/aot.py``) on any machine: a config is kept when it compiled, its shared memory
fits the target's per-block limit and ptxas reports no register spills (spills go to local memory, i.e. DRAM).
When no config of a launch is spill-free, the hook keeps the fitting configs with the fewest spill bytes (a slow
kernel beats none) and logs it; when none fits in shared memory it raises, naming the kernel and the target.

``autotune(configs, key)`` replaces ``triton.autotune`` in ``ops/<op>/triton.py``: the hook it installs runs only
when more than one config is listed (on a GPU; the interpreter has one), compiles each config for the current
device (``JITFunction.warmup``: the same compile the autotuner would do next, kept in triton's cache) and reads
the resources from the compiled kernel. Nothing here imports triton at module import.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

log = logging.getLogger("seqzoo.kernels")

# Largest shared memory one thread block may opt into, bytes (CUDA C Programming Guide, "Technical Specifications
# per Compute Capability": 163 KB on 8.0, 99 KB on 8.6/8.9, 227 KB on 9.0 and 10.0)
SMEM_LIMIT = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448, 100: 232448, 120: 101376}


def smem_limit(cc: int) -> int:
    """Per-block shared-memory limit of compute capability ``cc`` (e.g. 90); unknown ones get the nearest lower."""
    known = [c for c in sorted(SMEM_LIMIT) if c <= cc]
    return SMEM_LIMIT[known[-1]] if known else 49152


@dataclass(frozen=True)
class Usage:
    """Resources of one compiled config: registers per thread, spill bytes (local memory), shared memory bytes."""

    registers: int
    spill_bytes: int
    shared: int


def fits(u: Usage | None, limit: int) -> bool:
    return u is not None and u.shared <= limit


def keep_mask(usages: Sequence[Usage | None], limit: int) -> list[bool]:
    """Which configs to try: compiled (not None), shared memory within ``limit``, no spills. Pure: tested with
    fabricated numbers and with the ahead-of-time table's."""
    return [fits(u, limit) and u.spill_bytes == 0 for u in usages]


def fallback_mask(usages: Sequence[Usage | None], limit: int) -> list[bool]:
    """``keep_mask`` when it keeps anything; otherwise the fitting configs with the fewest spill bytes (all False
    when none fits in shared memory)."""
    keep = keep_mask(usages, limit)
    if any(keep):
        return keep
    fitting = [u.spill_bytes for u in usages if fits(u, limit)]
    if not fitting:
        return keep
    least = min(fitting)
    return [fits(u, limit) and u.spill_bytes == least for u in usages]


class ResourcePrune:
    """``early_config_prune`` hook of one kernel (``autotune`` below sets ``kernel`` to its JITFunction)."""

    def __init__(self) -> None:
        self.kernel = None

    def usage(self, config, nargs: dict, kwargs: dict) -> Usage | None:
        try:
            ck = self.kernel.warmup(*nargs.values(), grid=(1,), **kwargs, **config.all_kwargs())
            ck._init_handles()  # loads the module: n_regs / n_spills come from the driver
        except Exception as e:  # an out-of-resources compile is a config to drop, not a crash
            log.info("seqzoo.kernels: %s %s does not compile here: %s", self.kernel.__name__, config, e)
            return None
        return Usage(int(ck.n_regs), int(ck.n_spills), int(ck.metadata.shared))

    def __call__(self, configs, nargs: dict, **kwargs):
        import torch

        dev = next(t.device for t in nargs.values() if isinstance(t, torch.Tensor))
        major, minor = torch.cuda.get_device_capability(dev)
        limit = smem_limit(10 * major + minor)
        usages = [self.usage(c, nargs, kwargs) for c in configs]
        mask = fallback_mask(usages, limit)
        name = getattr(self.kernel, "__name__", "kernel")
        if not any(mask):
            raise RuntimeError(
                f"{name}: no autotune config fits sm_{major}{minor} ({limit} bytes of shared memory per block) at "
                f"these sizes; run with SEQZOO_KERNELS=torch"
            )
        if not any(keep_mask(usages, limit)):
            log.warning(
                "seqzoo.kernels: every %s config spills registers on sm_%d%d; trying the least spilling",
                name,
                major,
                minor,
            )
        kept = [c for c, k in zip(configs, mask) if k]
        log.info(
            "seqzoo.kernels: %s keeps %d of %d autotune configs on sm_%d%d", name, len(kept), len(configs), major, minor
        )
        return kept


def autotune(configs: list, key: list[str]):
    """``triton.autotune(configs, key)`` with the ``ResourcePrune`` hook of the decorated kernel."""
    import triton

    def wrap(fn):
        hook = ResourcePrune()
        tuned = triton.autotune(configs=configs, key=key, prune_configs_by={"early_config_prune": hook})(fn)
        hook.kernel = fn
        return tuned

    return wrap


__all__ = ["SMEM_LIMIT", "ResourcePrune", "Usage", "autotune", "fallback_mask", "keep_mask", "smem_limit"]
