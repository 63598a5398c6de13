"""Plots drawn from results files (matplotlib, Agg backend: works headless)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_bench(rows: list[dict[str, Any]], path: Path, title: str = "") -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    series: dict[str, list] = {}
    for r in rows:
        if "error" not in r:
            packed = f", packed {r['packed']}" if r.get("packed") else ""
            series.setdefault(f"{r['mixer']} ({r['mode']}{packed})", []).append(r)
    for label, rs in sorted(series.items()):
        rs = sorted(rs, key=lambda r: r["T"])
        key = "fwdbwd_ms" if "fwdbwd_ms" in rs[0] else "fwd_ms"
        axes[0].plot([r["T"] for r in rs], [r[key] for r in rs], marker="o", label=label)
        mkey = "fwdbwd_mem_mb" if "fwdbwd_mem_mb" in rs[0] else "fwd_mem_mb"
        axes[1].plot([r["T"] for r in rs], [max(r[mkey], 1e-2) for r in rs], marker="o", label=label)
    for ax, ylabel in zip(axes, ("time per call, ms (fwd+bwd)", "peak memory, MB (fwd+bwd)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_zoo(
    results: list[dict[str, Any]], curves: dict[str, list[tuple[int, float]]], path: Path, title: str = ""
) -> None:
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    names = [r["mixer"] for r in results]
    accs = [r.get("valid_accuracy") or 0.0 for r in results]
    axes[0].barh(names, accs, color="tab:blue")
    axes[0].set_xlim(0, 1)
    axes[0].set_xlabel("validation accuracy (scored positions)")
    for i, a in enumerate(accs):
        axes[0].text(min(a + 0.01, 0.9), i, f"{a:.3f}", va="center", fontsize=8)
    for name, pts in curves.items():
        if pts:
            axes[1].plot([p[0] for p in pts], [p[1] for p in pts], label=name)
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("training loss")
    axes[1].set_yscale("log")
    axes[1].grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_lines(
    xs_by_label: dict[str, tuple[list, list]],
    path: Path,
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
) -> None:
    """Generic line plot: ``{label: (xs, ys)}``."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for label, (xs, ys) in xs_by_label.items():
        ax.plot(xs, ys, marker="o", label=label)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_models(rows: list[dict[str, Any]], path: Path, title: str = "", labels: dict[str, str] | None = None) -> None:
    """Model benchmark (``bench/models.py``): training tokens/s and peak memory vs T, decode ms/token and carried
    state vs context; one line per family. Rows with an error are left out."""
    plt = _plt()
    labels = labels or {}
    panels = [
        ("train", "tokens_per_s", "training tokens / s", "context length T (training)"),
        ("train", "peak_mem_mb", "peak memory above model + batch, MB", "context length T (training)"),
        ("decode", "ms_per_token", "decode ms / token (batch 1, median)", "context length (tokens before decoding)"),
        ("decode", "state_mb", "carried state, MB (batch 1)", "context length (tokens before decoding)"),
    ]
    panels = [p for p in panels if any(r.get("bench") == p[0] and r.get(p[1]) is not None for r in rows)]
    if not panels:
        return
    ncols = 2
    nrows = (len(panels) + 1) // 2
    fig, axes = plt.subplots(nrows, ncols, figsize=(11, 4.0 * nrows), squeeze=False)
    for ax, (bench, key, ylabel, xlabel) in zip(axes.flat, panels):
        for fam in dict.fromkeys(r["family"] for r in rows):
            rs = sorted(
                (r for r in rows if r["family"] == fam and r.get("bench") == bench and r.get(key) is not None),
                key=lambda r: r["T"],
            )
            if rs:
                ax.plot([r["T"] for r in rs], [max(r[key], 1e-4) for r in rs], marker="o", label=labels.get(fam, fam))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
