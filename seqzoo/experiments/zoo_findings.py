"""The zoo report's findings table: each paper claim a probe tests, as a comparison of two models, against what the
runs measured.

A probe lists its claims as ``zoo_probes.Expectation`` (``Probe.expects``): model ``better`` above ``worse`` (relation
``">"``), or the two level (``"≈"``), on the probe's metric at the training length (``at="T"``) or at its longest
evaluated length (``at="longest"``). Each becomes one row per difficulty setting with the verdict the numbers give:

* ``reproduced``: the seed ranges are apart in the claimed direction (``">"``), or overlap / lie less than
  ``min_gap`` apart (``"≈"``);
* ``reversed`` (``">"``: apart the other way) / ``not reproduced`` (``"≈"``: apart);
* ``not separated``: the ranges overlap (``">"``);
* ``inconclusive``: the probe's reference (attention) does not learn the setting (worst seed below 0.95 accuracy), so
  no comparison on it counts; ``one seed``: no spread was measured; ``not run``: a model of the pair has no result.

No zoo probe is measured the way a published table is (its sizes and budgets are the zoo's own), so every row says
so in its ``calibrated`` column; docs/calibration.md holds the comparisons set beside published tables.
"""

from __future__ import annotations

from typing import Any

from ..sweep.merge import spread
from .zoo_probes import Expectation

LEARNED = 0.95  # the reference's worst seed must reach this accuracy for a comparison on the setting to count
NOT_CALIBRATED = "no: the zoo's own sizes and budget (docs/calibration.md)"


def _ranges_apart(a: dict, b: dict, m: str, higher: bool, min_gap: float) -> int:
    """+1 where a's seed range lies beyond b's in the better direction by ≥ min_gap, -1 the other way, 0 otherwise."""
    lo_a, hi_a, lo_b, hi_b = a[f"{m}_min"], a[f"{m}_max"], b[f"{m}_min"], b[f"{m}_max"]
    if not higher:  # a loss: lower is better; mirror it so the same test applies
        lo_a, hi_a, lo_b, hi_b = -hi_a, -lo_a, -hi_b, -lo_b
    if lo_a - hi_b >= min_gap:
        return 1
    if lo_b - hi_a >= min_gap:
        return -1
    return 0


def verdict(
    exp: Expectation, a: dict | None, b: dict | None, m: str, higher: bool, learned: bool | None, min_gap: float
) -> str:
    """The verdict of one expectation from the seed-merged rows ``a`` (better) and ``b`` (worse) on metric ``m``."""
    if a is None or b is None or a.get(f"{m}_mean") is None or b.get(f"{m}_mean") is None:
        return "not run"
    if learned is False:
        return "inconclusive: the reference does not learn this setting"
    if a["n"] < 2 or b["n"] < 2:
        return "one seed: no spread measured"
    apart = _ranges_apart(a, b, m, higher, 0.0 if exp.relation == ">" else min_gap)
    if exp.relation == ">":
        return {1: "reproduced", -1: "reversed", 0: "not separated (seed ranges overlap)"}[apart]
    return "reproduced (within the seed spread)" if apart == 0 else "not reproduced (seed ranges apart)"


def findings(rows: list[dict[str, Any]], probes: dict[str, Any], longest_metric: str, min_gap: float) -> list[dict]:
    """One row per (probe, setting, expectation): claim, measured (both models, mean (min–max)), verdict, calibrated.

    ``rows``: the seed-merged rows (``sweep.merge.aggregate``) with the probe's metric and ``longest_metric`` (the
    metric at the longest evaluated length); ``probes``: name -> Probe.
    """
    out = []
    for name, p in probes.items():
        higher = "acc" in p.metric
        for setting in sorted({r["setting"] for r in rows if r["probe"] == name}):
            here = {r["model"]: r for r in rows if r["probe"] == name and r["setting"] == setting}
            ref = here.get(p.reference)
            learned = None
            if higher and ref is not None and ref.get(f"{p.metric}_min") is not None:
                learned = ref[f"{p.metric}_min"] >= LEARNED
            for exp in p.expects:
                m = longest_metric if exp.at == "longest" else p.metric
                a, b = here.get(exp.better), here.get(exp.worse)
                out.append(
                    {
                        "probe": name,
                        "setting": setting,
                        "claim": exp.text(p.metric, p.longest_length()),
                        "measured": f"{exp.better} {_cell(a, m)} · {exp.worse} {_cell(b, m)}",
                        "verdict": verdict(exp, a, b, m, higher, learned, min_gap),
                        "calibrated": NOT_CALIBRATED,
                    }
                )
    return out


def _cell(row: dict | None, m: str) -> str:
    if row is None:
        return "-"
    s = spread(row, m)
    return s if row["n"] < 2 else f"{s}, {row['n']} seeds"
