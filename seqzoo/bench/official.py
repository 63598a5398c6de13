"""seqzoo against the official packages' CPU paths: forward + backward, same shapes, same weights, same run.

    seqzoo bench --suite official --out results/bench-official        # T 2048, 1 thread, min of 5 interleaved

Pairs (fp32, CPU; shapes in ``SHAPES``):

* ``slstm``: our sLSTM layer (``mixers/slstm.py``: conv, gates, the hand-written BPTT loop, head norm) against
  NX-AI's ``xlstm.sLSTMLayer`` with ``backend="vanilla"`` (its pure-torch loop; the other backend is CUDA only),
  weights mapped by ``parity/xlstm.py: slstm_layer_state_dict`` (xLSTM, arXiv:2405.04517).
* ``rglru``: Griffin's recurrent block (``mixers/rglru.py``: chunked scan) against DeepMind's
  ``recurrentgemma.torch.RecurrentBlock`` (its per-token ``rnn_scan`` loop), weights by
  ``parity/recurrentgemma.py: recurrent_block_state_dict`` (arXiv:2402.19427). Both get ``segment_pos``.
* ``mlstm``: the mLSTM chunkwise cell (``ops/mlstm/chunkwise.py``) against ``mlstm_kernels``' native chunkwise
  kernel ``native_autograd`` (the package's default CPU chunkwise backend: autograd through their forward). Each
  side gets the inputs in its own layout (ours (B, T, H, K), theirs (B, H, T, K)), so no transpose is timed.
* ``mlstm_custbw`` (only on request, ``--pairs``): the same against ``native_custbw``, their hand-written
  backward. It is not the gradient of the forward: its q and k gradients are those with the normaliser
  max(|n|, e^-m) held constant (checked against an fp64 reference: 1e-6 relative to that, ~1 relative to the
  true gradient), and its i and f gradients differ too, so the check refuses it and the row carries the gaps.

Method: both sides are built with the same weights and inputs, and one forward + backward of each is compared
(output and every input gradient, max gap relative to the largest magnitude) before any timing; a pair that
disagrees is a row with the gaps and no time. Then ``repeats`` interleaved forward + backward runs (ours, theirs,
ours, theirs, ...) and the minimum of each side; ``ratio`` = official ms / our ms (> 1: seqzoo faster). A package
that does not import is a row with the reason, never a crash. ``status``: measured | not importable | outputs
differ | failed (the last two make the command exit 1).
"""

from __future__ import annotations

import csv
import importlib
import importlib.metadata
import json
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import InputError
from ..parity.recurrentgemma import import_recurrentgemma_torch
from .table import markdown_table

# per pair: batch and widths (T comes from --lengths)
SHAPES: dict[str, dict[str, int]] = {
    "slstm": {"B": 4, "D": 128, "H": 4},
    "rglru": {"B": 2, "D": 256, "D_rnn": 256, "H": 4},
    "mlstm": {"B": 1, "H": 4, "K": 64, "V": 64, "chunk": 64},
    "mlstm_custbw": {"B": 1, "H": 4, "K": 64, "V": 64, "chunk": 64},
}
# agreement bars (max gap / largest magnitude of the official tensor); fp32 recurrences over 2k steps, so the
# gradients (sums over T) get a looser bar than the outputs
Y_TOL, GRAD_TOL = 1e-4, 1e-3


@dataclass
class Side:
    """One implementation of a pair: ``fn(*inputs)`` -> output; ``inputs`` are leaves that take gradients,
    ``params`` the module weights (their gradients are reset and recomputed every run), ``cot`` the fixed
    output gradient; ``to_ours`` maps this side's layout of the output and input gradients to ours."""

    fn: Callable[..., torch.Tensor]
    inputs: list[torch.Tensor]
    params: list[torch.Tensor] = field(default_factory=list)
    cot: torch.Tensor | None = None
    to_ours: Callable[[torch.Tensor], torch.Tensor] = lambda t: t

    def run(self) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One forward + backward; returns the output and the input gradients (both in this side's layout)."""
        for t in (*self.inputs, *self.params):
            t.grad = None
        y = self.fn(*self.inputs)
        (y * self.cot).sum().backward()
        return y.detach(), [t.grad for t in self.inputs]


@dataclass(frozen=True)
class Pair:
    name: str
    ours: str
    official: str
    packages: tuple[str, ...]  # distributions whose versions the row reports
    build: Callable[[int], tuple[Side, Side, dict[str, int]]]  # T -> ours, theirs, the shapes used


# ------------------------------------------------------------------------------------------ official imports
def import_official(module: str) -> types.ModuleType:
    """Import an official package's module (an ImportError means: not installed / not importable)."""
    return importlib.import_module(module)


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# -------------------------------------------------------------------------------------------------- pairs
def _perturb(module: torch.nn.Module, g: torch.Generator) -> None:
    """Move every weight off its initial value (zero biases, unit norms) so that a wrong mapping cannot agree."""
    with torch.no_grad():
        for p in module.parameters():
            std = 0.1 * float(p.std()) if p.numel() > 1 and float(p.std()) > 0 else 0.1
            p.add_(std * torch.randn(p.shape, generator=g))


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().contiguous().requires_grad_(True)


def build_slstm(T: int) -> tuple[Side, Side, dict[str, int]]:
    xlstm = import_official("xlstm")
    from ..mixers import build_mixer
    from ..parity.xlstm import slstm_layer_state_dict

    s = SHAPES["slstm"]
    B, D, H = s["B"], s["D"], s["H"]
    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        off = xlstm.sLSTMLayer(
            xlstm.sLSTMLayerConfig(embedding_dim=D, num_heads=H, conv1d_kernel_size=4, backend="vanilla")
        )
    off.reset_parameters()
    _perturb(off, g)
    ours = build_mixer("slstm", d_model=D, n_heads=H)
    cell = off.slstm_cell  # R and bias through the cell's backend-independent views (ParameterProxy: .clone())
    ours.load_state_dict(
        slstm_layer_state_dict(
            off.state_dict(), H, R=cell.recurrent_kernel.clone().detach(), bias=cell.bias.clone().detach()
        )
    )
    x = torch.randn(B, T, D, generator=g)
    cot = torch.randn(B, T, D, generator=g)
    return (
        Side(lambda x: ours(x)[0], [_leaf(x)], list(ours.parameters()), cot),
        Side(off, [_leaf(x)], list(off.parameters()), cot),
        s,
    )


def build_rglru(T: int) -> tuple[Side, Side, dict[str, int]]:
    rg = import_recurrentgemma_torch(import_official)
    from ..mixers import build_mixer
    from ..parity.recurrentgemma import recurrent_block_state_dict

    s = SHAPES["rglru"]
    B, D, R, H = s["B"], s["D"], s["D_rnn"], s["H"]
    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        off = rg.RecurrentBlock(width=D, num_heads=H, lru_width=R)
    _perturb(off, g)
    ours = build_mixer("rglru", d_model=D, d_rnn=R, n_blocks=H)
    ours.load_state_dict(recurrent_block_state_dict(off.state_dict()))
    x = torch.randn(B, T, D, generator=g)
    cot = torch.randn(B, T, D, generator=g)
    pos = torch.arange(T).expand(B, T).contiguous()
    return (
        Side(lambda x: ours(x, segment_pos=pos)[0], [_leaf(x)], list(ours.parameters()), cot),
        Side(lambda x: off(x, pos, return_cache=False)[0], [_leaf(x)], list(off.parameters()), cot),
        s,
    )


def _build_mlstm(T: int, kernel: str, shapes: dict[str, int]) -> tuple[Side, Side, dict[str, int]]:
    native = import_official("mlstm_kernels.torch.chunkwise.native")
    off = getattr(native, f"mlstm_chunkwise__{kernel}")
    from ..ops.mlstm import mlstm_chunkwise

    B, H, K, V = shapes["B"], shapes["H"], shapes["K"], shapes["V"]
    L = min(shapes["chunk"], T)  # the official kernel needs T to be a multiple of the chunk
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(B, T, H, K, generator=g), torch.randn(B, T, H, K, generator=g)
    v = torch.randn(B, T, H, V, generator=g)
    i = torch.randn(B, T, H, generator=g)
    f = 3.0 + torch.randn(B, T, H, generator=g)  # forget pre-activations: mostly remembering, as trained cells do
    cot = torch.randn(B, T, H, V, generator=g)
    ours = [_leaf(t) for t in (q, k, v, i, f)]
    theirs = [_leaf(t.transpose(1, 2)) for t in (q, k, v, i, f)]  # (B, H, T, ...)
    return (
        Side(lambda *a: mlstm_chunkwise(*a, chunk_size=L)[0], ours, [], cot),
        Side(
            lambda *a: off(*a, chunk_size=L),
            theirs,
            [],
            cot.transpose(1, 2).contiguous(),
            lambda t: t.transpose(1, 2),
        ),
        {**shapes, "chunk": L},
    )


PAIRS: dict[str, Pair] = {
    p.name: p
    for p in (
        Pair("slstm", "mixer slstm (cell_mode fused)", "xlstm.sLSTMLayer backend=vanilla", ("xlstm",), build_slstm),
        Pair(
            "rglru",
            "mixer rglru (scan)",
            "recurrentgemma.torch.RecurrentBlock (rnn_scan loop)",
            ("recurrentgemma",),
            build_rglru,
        ),
        Pair(
            "mlstm",
            "ops.mlstm.mlstm_chunkwise",
            "mlstm_kernels chunkwise native_autograd",
            ("mlstm_kernels",),
            lambda T: _build_mlstm(T, "native_autograd", SHAPES["mlstm"]),
        ),
        Pair(
            "mlstm_custbw",
            "ops.mlstm.mlstm_chunkwise",
            "mlstm_kernels chunkwise native_custbw",
            ("mlstm_kernels",),
            lambda T: _build_mlstm(T, "native_custbw", SHAPES["mlstm_custbw"]),
        ),
    )
}

DEFAULT_PAIRS = ("slstm", "rglru", "mlstm")  # mlstm_custbw computes another gradient (module docstring)


# ---------------------------------------------------------------------------------------------- measuring
def _gap(a: torch.Tensor, ref: torch.Tensor) -> float:
    """max |a - ref| / max |ref| (inf when not finite)."""
    d = float((a.double() - ref.double()).abs().max())
    scale = float(ref.double().abs().max())
    return d / scale if scale > 0 else d


def agreement(ours: Side, theirs: Side) -> dict[str, Any]:
    """One forward + backward of each side (the warm-up); the output's and the worst input gradient's gaps."""
    y_o, g_o = ours.run()
    y_t, g_t = theirs.run()
    y_gap = _gap(y_o, theirs.to_ours(y_t))
    grad_gap = max(_gap(a, theirs.to_ours(b)) for a, b in zip(g_o, g_t))
    ok = y_gap <= Y_TOL and grad_gap <= GRAD_TOL  # NaN compares False: a non-finite gap never agrees
    return {"y_gap": y_gap, "grad_gap": grad_gap, "agree": ok}


def _seconds(side: Side) -> float:
    t0 = time.perf_counter()
    side.run()
    return time.perf_counter() - t0


def measure_pair(pair: Pair, T: int, repeats: int) -> dict[str, Any]:
    """One row: shapes, versions, the agreement check, then interleaved timings (min) and the ratio."""
    row: dict[str, Any] = {
        "pair": pair.name,
        "status": "measured",
        "T": T,
        **SHAPES[pair.name],
        "ours": pair.ours,
        "official": pair.official,
        "versions": " ".join(f"{d} {version(d)}" for d in pair.packages),
    }
    try:
        ours, theirs, shapes = pair.build(T)
    except ImportError as e:
        row.update(status="not importable", error=f"not importable: {type(e).__name__}: {e}")
        return row
    row.update(shapes)
    try:
        row.update(agreement(ours, theirs))
    except Exception as e:  # noqa: BLE001 - one failing pair (e.g. a shape the official kernel refuses) is a row
        row.update(status="failed", error=f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return row
    if not row["agree"]:
        row.update(
            status="outputs differ", error=f"outputs differ: y gap {row['y_gap']:.2e}, grad gap {row['grad_gap']:.2e}"
        )
        return row
    t_ours, t_theirs = [], []
    for _ in range(repeats):
        t_ours.append(_seconds(ours))
        t_theirs.append(_seconds(theirs))
    row["ours_ms"] = 1e3 * min(t_ours)
    row["official_ms"] = 1e3 * min(t_theirs)
    row["ratio"] = row["official_ms"] / row["ours_ms"]
    row["ours_all_ms"] = [1e3 * t for t in t_ours]
    row["official_all_ms"] = [1e3 * t for t in t_theirs]
    return row


def check_args(pairs: list[str], lengths: list[int], repeats: int, threads: int) -> None:
    unknown = [p for p in pairs if p not in PAIRS]
    if unknown or not pairs:
        raise InputError(f"--pairs: expected names from {list(PAIRS)}, got {pairs}")
    if any(not isinstance(t, int) or t < 1 for t in lengths) or not lengths:
        raise InputError(f"--lengths: expected positive integers, got {lengths}")
    if not isinstance(repeats, int) or repeats < 1:
        raise InputError(f"--repeats: expected an integer >= 1, got {repeats!r}")
    if not isinstance(threads, int) or threads < 1:
        raise InputError(f"--threads: expected an integer >= 1, got {threads!r}")


def run_official_bench(
    out_dir: str | Path | None = None,
    lengths: list[int] = (2048,),
    repeats: int = 5,
    threads: int = 1,
    pairs: list[str] | None = None,
) -> list[dict[str, Any]]:
    """All selected pairs at every length, in one process; writes official.json / .csv / .md when ``out_dir``."""
    pairs = list(DEFAULT_PAIRS) if pairs is None else list(pairs)
    lengths = list(lengths)
    check_args(pairs, lengths, repeats, threads)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rows = [measure_pair(PAIRS[p], T, repeats) for T in lengths for p in pairs]
    finally:
        torch.set_num_threads(before)
    if out_dir is not None:
        from .models import environment

        meta = {
            "suite": "official",
            "lengths": lengths,
            "repeats": repeats,
            "threads": threads,
            "dtype": "float32",
            "shapes": {p: SHAPES[p] for p in pairs},
            "tolerances": {"y": Y_TOL, "grad": GRAD_TOL},
            "versions": {d: version(d) for d in ("torch", "xlstm", "mlstm_kernels", "recurrentgemma")},
            "environment": environment(threads),
        }
        write_results(rows, Path(out_dir), meta)
    return rows


# ------------------------------------------------------------------------------------------------ results
COLUMNS = ("pair", "status", "T", "ours_ms", "official_ms", "ratio", "y_gap", "grad_gap", "agree", "versions", "error")


def format_official_table(rows: list[dict[str, Any]]) -> str:
    def shape(r: dict[str, Any]) -> str:
        return ", ".join(f"{k}={r[k]}" for k in SHAPES[r["pair"]])

    lines = markdown_table(
        rows,
        [
            ("pair", lambda r: r["pair"]),
            ("T", lambda r: r["T"]),
            ("shape", shape),
            ("official", lambda r: r["official"]),
        ],
        [
            ("ours ms", "ours_ms", "{:.1f}"),
            ("official ms", "official_ms", "{:.1f}"),
            ("official / ours", "ratio", "{:.2f}"),
            ("y gap", "y_gap", "{:.1e}"),
            ("grad gap", "grad_gap", "{:.1e}"),
            ("versions", "versions", "{}"),
        ],
    )
    return "\n".join(lines)


def write_results(rows: list[dict[str, Any]], out: Path, meta: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "official.json").write_text(json.dumps({"config": meta, "rows": rows}, indent=2, default=str) + "\n")
    with open(out / "official.csv", "w", newline="") as f:
        cols = [*COLUMNS[:3], *dict.fromkeys(k for p in meta["shapes"].values() for k in p), *COLUMNS[3:]]
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    head = (
        f"seqzoo vs the official CPU paths: forward + backward, fp32, {meta['threads']} thread(s), "
        f"min of {meta['repeats']} interleaved runs; ratio = official / ours (> 1: seqzoo faster)\n\n"
    )
    (out / "official.md").write_text(head + format_official_table(rows) + "\n")


def add_arguments(p) -> None:
    """The official-suite options of ``seqzoo bench`` (--lengths, --threads and --out are the command's own)."""
    p.add_argument("--repeats", type=int, default=5, help="interleaved forward+backward runs per side, min kept (5)")
    p.add_argument("--pairs", help=f"comma-separated, from {', '.join(PAIRS)} (default: {','.join(DEFAULT_PAIRS)})")


def run_from_args(args) -> list[dict[str, Any]]:
    """``seqzoo bench --suite official``: parses --lengths / --repeats / --threads / --pairs, prints the table."""
    from .models import _check_lengths, parse_list

    if getattr(args, "device", "cpu") != "cpu":
        raise InputError(f"--device: the official suite compares CPU paths, use cpu (got {args.device!r})")
    lengths = _check_lengths((args.lengths or "2048").split(","), "--lengths")
    pairs = parse_list(args.pairs, "--pairs") or None
    threads = 1 if args.threads is None else args.threads
    rows = run_official_bench(args.out, lengths, repeats=args.repeats, threads=threads, pairs=pairs)
    print(format_official_table(rows))
    print(f"\nresults: {args.out}/official.json, official.csv, official.md")
    return rows
