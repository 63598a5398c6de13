"""Autotune configs that cannot run well are never tried: drop those over the shared-memory limit or that spill.

``keep_mask`` is the one decision, used by the autotune hook on a GPU, by the dispatchers' shape check and by the
ahead-of-time table (``seqzoo kernels check``, ``bench/aot.py``) on any machine: a config is kept when it
compiled, its shared memory fits the target's per-block limit and ptxas reports no register spills (spills go to
local memory, i.e. DRAM). A spilling config is never launched: when no config of a launch is kept, the hook raises,
naming the kernel and the target. Nor is a config in ``KNOWN_FAULTS``: one that compiled cleanly but faulted or
computed wrongly on a real GPU (a compiler bug only a GPU shows), dropped on that architecture for 16-bit operands.

The dispatchers (``ops/mlstm``, ``ops/gateloop``: ``choose_implementation``) ask before launching anything:
``launch_unfit`` runs the same rule for every kernel an op would launch at these head dims / chunk / dtype on this GPU
(``kernels/_common.py: probe_launches`` records the launches of the op's real entry point on tiny inputs), and the
op takes its PyTorch path when one kernel has no kept config (``seqzoo.kernels.kernel_verdict``, logged once).

``autotune(configs, key)`` replaces ``triton.autotune`` in ``ops/<op>/triton.py``: the hook it installs compiles
each config for the current device (``JITFunction.warmup``: the same compile the autotuner would do next, kept in
triton's cache) and reads the resources from the compiled kernel. Nothing here imports triton at module import.

``SEQZOO_AUTOTUNE=first`` (environment, read at each hook call; default ``all``) keeps only the first config that
passes the rule, so nothing else is compiled or benchmarked: a correctness run on a GPU (``tools/gpu_check.sh``'s
test phases) then spends its minutes on tests, not on tuning (one test took up to 186 s of autotuning on an H200).
Speed measurements keep ``all``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from .. import settings

log = logging.getLogger("seqzoo.kernels")

AUTOTUNE_ENV = "SEQZOO_AUTOTUNE"
AUTOTUNE_MODES = settings.AUTOTUNE_CHOICES


def autotune_mode() -> str:
    """``all`` (tune over every kept config) or ``first`` (the first kept config alone), from ``SEQZOO_AUTOTUNE``."""
    return settings.autotune()


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


@dataclass(frozen=True)
class KnownFault:
    """A config that compiles without spills but fails on a real GPU of compute capability ``cc`` with 16-bit
    (bf16 / fp16) operands; ``seen``: where, with what, and what happened."""

    kernel: str
    config: str  # ``config_label`` form, e.g. "BV=16,w8,s1"
    cc: int
    seen: str


KNOWN_FAULTS = (
    # tools/gpu_config_sweep.py on an H200 (torch 2.11.0+cu130, triton 3.6.0), 2026-11-26: at head dims K = 20
    # (BK = 32), V = 16, chunk 64, T = 9 this config alone of the 11 faulted in bf16 (illegal memory access, which
    # also poisons every later CUDA call of the process) and gave h with relative error 0.62 in fp16; fp32 and the
    # other 10 configs were correct, and the interpreter's bounds check (tests/kernel_bounds.py) finds no
    # out-of-bounds access at any config: a miscompile, as in triton-lang/triton#10573 and #11366 (sm_90, 3.6+).
    KnownFault(
        "_mlstm_fwd_kernel",
        "BV=16,w8,s1",
        90,
        "H200, triton 3.6.0: illegal memory access (bf16), wrong h (fp16) at K=20, V=16, chunk 64",
    ),
)
_HALF = ("float16", "bfloat16")


def config_label(config) -> str:
    """``"BV=16,w8,s1"``: a ``triton.Config``'s meta-parameters, warps and stages (also the compile table's column)."""
    kw = ",".join(f"{k}={v}" for k, v in config.kwargs.items())
    return f"{kw},w{config.num_warps},s{config.num_stages}"


def known_fault(kernel: str, config: str, cc: int, dtype: str) -> KnownFault | None:
    """The ``KNOWN_FAULTS`` entry of ``kernel``'s ``config`` (``config_label``) on ``cc`` for tensors of ``dtype``
    (e.g. "bfloat16"), or None."""
    if dtype.removeprefix("torch.") not in _HALF:
        return None
    return next((f for f in KNOWN_FAULTS if (f.kernel, f.config, f.cc) == (kernel, config, cc)), None)


def fits(u: Usage | None, limit: int) -> bool:
    return u is not None and u.shared <= limit


def keep_mask(usages: Sequence[Usage | None], limit: int) -> list[bool]:
    """Which configs to try: compiled (not None), shared memory within ``limit``, no spills. Pure: tested with
    fabricated numbers and with the ahead-of-time table's."""
    return [fits(u, limit) and u.spill_bytes == 0 for u in usages]


def why_none_kept(usages: Sequence[Usage | None], limit: int) -> str:
    """One sentence on why ``keep_mask`` keeps no config (the log line and the dispatchers' fallback reason)."""
    ok = [u for u in usages if u is not None]
    if not ok:
        return "no autotune config compiles"
    fitting = [u for u in ok if fits(u, limit)]
    if not fitting:
        return f"every config needs more than {limit} bytes of shared memory (least {min(u.shared for u in ok)})"
    return f"every config that fits in shared memory spills registers (least {min(u.spill_bytes for u in fitting)} B)"


class ResourcePrune:
    """``early_config_prune`` hook of one kernel (``autotune`` below sets ``kernel`` to its JITFunction)."""

    def __init__(self) -> None:
        self.kernel = None

    def usage(self, config, nargs: dict, kwargs: dict) -> Usage | None:
        # the autotuner hands the hook the launch's own keywords, ``grid`` and ``warmup`` among them: a compile-only
        # warmup takes its own grid, and the config's meta-parameters win over any launch keyword of the same name
        meta = config.all_kwargs()
        launch = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup") and k not in meta}
        try:
            ck = self.kernel.warmup(*nargs.values(), grid=(1,), **launch, **meta)
            ck._init_handles()  # loads the module: n_regs / n_spills come from the driver
        except Exception as e:  # an out-of-resources compile is a config to drop, not a crash
            log.info("seqzoo.kernels: %s %s does not compile here: %s", self.kernel.__name__, config, e)
            return None
        return Usage(int(ck.n_regs), int(ck.n_spills), int(ck.metadata.shared))

    def verdict(self, configs, nargs: dict, kwargs: dict, cc: int) -> tuple[list, str | None]:
        """(kept configs, None) on compute capability ``cc`` (e.g. 90), or ([], why) when none is kept."""
        name = getattr(self.kernel, "__name__", "kernel")
        dtype = next((str(t.dtype) for t in nargs.values() if hasattr(t, "dtype")), "")
        faulty = [known_fault(name, config_label(c), cc, dtype) is not None for c in configs]
        if any(faulty):
            log.info("seqzoo.kernels: %s drops %d config(s) known to fail on sm_%d", name, sum(faulty), cc)
        configs = [c for c, f in zip(configs, faulty) if not f]
        limit = smem_limit(cc)
        first = autotune_mode() == "first"
        usages, kept = [], []
        for c in configs:  # compiled one at a time: with "first" nothing after the first kept config is compiled
            usages.append(self.usage(c, nargs, kwargs))
            if keep_mask(usages[-1:], limit)[0]:
                kept.append(c)
                if first:
                    break
        return kept, None if kept else why_none_kept(usages, limit)

    def __call__(self, configs, nargs: dict, **kwargs):
        import torch

        dev = next(t.device for t in nargs.values() if isinstance(t, torch.Tensor))
        major, minor = torch.cuda.get_device_capability(dev)
        kept, why = self.verdict(configs, nargs, kwargs, 10 * major + minor)
        name = getattr(self.kernel, "__name__", "kernel")
        if not kept:  # the dispatchers' shape check (launch_unfit) sends such shapes to torch before any launch
            raise RuntimeError(
                f"{name}: no autotune config can run on sm_{major}{minor} at these sizes: {why}; "
                f"run with SEQZOO_KERNELS=torch"
            )
        log.info(
            "seqzoo.kernels: %s keeps %d of %d autotune configs on sm_%d%d", name, len(kept), len(configs), major, minor
        )
        return kept


_verdicts: dict[tuple, str | None] = {}  # launch_unfit answers per (kernel, autotune key, dtypes, cc)


def launch_unfit(tuned, args: tuple, kwargs: dict, cc: int) -> str | None:
    """Why no autotune config of ``tuned`` (an ``autotune``-wrapped kernel) can run with these launch arguments on
    compute capability ``cc``: the hook's own rule (``keep_mask``), asked before launching. None when one can.
    Remembered per autotune key, tensor dtypes and ``cc``, as the autotuner remembers its choice."""
    nargs = dict(zip(tuned.arg_names, args))
    every = {**nargs, **kwargs}
    key = (
        tuned.fn.__name__,
        cc,
        *(every.get(k) for k in tuned.keys),
        *(str(v.dtype) for v in every.values() if hasattr(v, "dtype")),
    )
    if key not in _verdicts:
        _, why = tuned.early_config_prune.verdict(tuned.configs, nargs, kwargs, cc)
        _verdicts[key] = None if why is None else f"{tuned.fn.__name__} on sm_{cc}: {why}"
    return _verdicts[key]


def autotune(configs: list, key: list[str]):
    """``triton.autotune(configs, key)`` with the ``ResourcePrune`` hook of the decorated kernel."""
    import triton

    def wrap(fn):
        hook = ResourcePrune()
        tuned = triton.autotune(configs=configs, key=key, prune_configs_by={"early_config_prune": hook})(fn)
        hook.kernel = fn
        return tuned

    return wrap


__all__ = [
    "AUTOTUNE_ENV",
    "KNOWN_FAULTS",
    "SMEM_LIMIT",
    "KnownFault",
    "ResourcePrune",
    "Usage",
    "autotune",
    "config_label",
    "keep_mask",
    "known_fault",
    "launch_unfit",
    "smem_limit",
    "why_none_kept",
]
