"""A report is a list of blocks (headings, text, tables, figures) written twice: ``report.md`` (figures as PNG files
beside it) and ``report.html``, self-contained (figures embedded as base64 PNG, inline CSS), so it opens offline.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from .merge import fmt

CSS = (
    "body{font-family:system-ui,sans-serif;max-width:70em;margin:2em auto;padding:0 1em;line-height:1.4}"
    "table{border-collapse:collapse;margin:1em 0;font-size:.9em}td,th{border:1px solid #bbb;padding:.25em .6em}"
    "th{background:#eee}img{max-width:100%}pre{background:#f6f6f6;padding:.6em;overflow-x:auto}"
)


def plot_series(
    path: Path, series: dict[str, tuple[list, list]], xlabel: str, ylabel: str, title: str = "", logx=False, logy=False
) -> Path:
    """One line per label; bands ``{label: (xs, lo, hi)}`` may be given as ``series[label + " spread"]``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    for label, pts in series.items():
        if label.endswith(" spread"):
            continue
        (line,) = ax.plot(pts[0], pts[1], marker="o" if len(pts[0]) < 20 else None, ms=3, label=label)
        band = series.get(label + " spread")
        if band:
            ax.fill_between(band[0], band[1], band[2], color=line.get_color(), alpha=0.2)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a figure of runs not trained yet has no series to name
        ax.legend(fontsize=7, ncol=2)
    else:
        ax.text(0.5, 0.5, "no finished runs", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


class Report:
    def __init__(self, title: str):
        self.title = title
        self.blocks: list[tuple[str, Any]] = []

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append(("h", (level, text)))

    def text(self, text: str) -> None:
        self.blocks.append(("p", text))

    def code(self, text: str) -> None:
        self.blocks.append(("pre", text))

    def bullets(self, items: list[str]) -> None:
        self.blocks.append(("ul", items))

    def table(self, rows: list[dict[str, Any]], columns: list[str]) -> None:
        self.blocks.append(("table", (rows, columns)))

    def figure(self, path: Path, caption: str = "") -> None:
        self.blocks.append(("img", (Path(path), caption)))

    def markdown(self, base: Path) -> str:
        out = [f"# {self.title}", ""]
        for kind, v in self.blocks:
            if kind == "h":
                out += ["#" * v[0] + " " + v[1], ""]
            elif kind == "p":
                out += [v, ""]
            elif kind == "pre":
                out += ["```", v, "```", ""]
            elif kind == "ul":
                out += [f"- {item}" for item in v] + [""]
            elif kind == "table":
                rows, cols = v
                out += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                out += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows] + [""]
            elif kind == "img":
                rel = v[0].relative_to(base) if v[0].is_relative_to(base) else v[0]
                out += [f"![{v[1]}]({rel.as_posix()})", ""]
        return "\n".join(out)

    def html(self) -> str:
        e = html.escape
        out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(self.title)}</title>"]
        out += [f"<style>{CSS}</style></head><body><h1>{e(self.title)}</h1>"]
        for kind, v in self.blocks:
            if kind == "h":
                out.append(f"<h{v[0]}>{e(v[1])}</h{v[0]}>")
            elif kind == "p":
                out.append(f"<p>{e(v)}</p>")
            elif kind == "pre":
                out.append(f"<pre>{e(v)}</pre>")
            elif kind == "ul":
                out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in v) + "</ul>")
            elif kind == "table":
                rows, cols = v
                out.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in cols) + "</tr>")
                out += ["<tr>" + "".join(f"<td>{e(fmt(r.get(c)))}</td>" for c in cols) + "</tr>" for r in rows]
                out.append("</table>")
            elif kind == "img":
                data = base64.b64encode(v[0].read_bytes()).decode("ascii")
                out.append(f"<figure><img alt='{e(v[1])}' src='data:image/png;base64,{data}'>")
                out.append(f"<figcaption>{e(v[1])}</figcaption></figure>")
        out.append("</body></html>")
        return "\n".join(out)

    def write(self, out: str | Path) -> tuple[Path, Path]:
        """``report.md`` and ``report.html`` in ``out``; returns their paths."""
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        md, page = out / "report.md", out / "report.html"
        md.write_text(self.markdown(out) + "\n")
        page.write_text(self.html() + "\n")
        return md, page
