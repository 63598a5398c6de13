"""The run function of ``zoology-mqar``: the standard sweep run (``sweep/train_run.py: train_run``), except that a
run whose loss diverges is a result, not a failure. Zoology's Fig. 2 sweep takes the best of four learning rates up
to 1e-2, and the highest one may diverge for some models; such a run scores accuracy 0 and is marked ``diverged``
(the trainer's message), so the sweep goes on, the cell's best rate is chosen among the others, and the run is not
retrained on the next call. Kept apart from ``zoology_mqar.py`` because a run's key hashes the file of its run
function: editing the experiment's tables or plots does not retrain anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import TrainingDivergedError
from ..sweep.train_run import train_run

FN = "seqzoo.experiments.zoology_mqar_run:train_or_diverged"


def train_or_diverged(config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    try:
        return {**train_run(config, run_dir), "diverged": None}
    except TrainingDivergedError as e:
        return {"valid_accuracy": 0.0, "valid_loss": None, "diverged": str(e)}
