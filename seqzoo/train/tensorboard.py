"""Optional TensorBoard logging beside ``metrics.jsonl`` (``TrainConfig.tensorboard`` / ``seqzoo train --tensorboard``).

Every record the trainer writes to ``metrics.jsonl`` is also written as TensorBoard scalars into
``<out_dir>/tensorboard/``: each number of the record becomes the scalar ``<split>/<key>`` at ``global_step =
record["step"]`` (``train/loss``, ``train/lr``, ``train/grad_norm``, ``valid/loss``, ``valid/accuracy``, and any
field a record gains later). Only rank 0 writes, as for the JSONL. ``torch.utils.tensorboard`` needs the
``tensorboard`` package; it is imported only when the option is on, and its absence is refused before a run writes
anything.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..errors import InputError

TENSORBOARD_DIR = "tensorboard"
INSTALL_HINT = "pip install tensorboard (or pip install 'seqzoo[tensorboard]')"


def check_tensorboard(out_dir: str | None) -> None:
    """Refuse ``tensorboard=True`` without a run folder or without the ``tensorboard`` package (no file written)."""
    if not out_dir:
        raise InputError("TrainConfig.tensorboard writes into <out_dir>/tensorboard/: set out_dir (--out) with it")
    try:
        import tensorboard  # noqa: F401 - torch.utils.tensorboard needs it
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise InputError(
            f"TrainConfig.tensorboard (--tensorboard) needs the tensorboard package: {INSTALL_HINT}"
        ) from None


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The TensorBoard scalars of one metrics record: ``<split>/<key>`` for every finite number but the step."""
    split = record.get("split", "train")
    out = {}
    for key, value in record.items():
        if key in ("step", "split") or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[f"{split}/{key}"] = float(value)
    return out


class TensorBoardLog:
    """A ``MetricsLog`` that also writes each record to a ``SummaryWriter`` in ``<out>/tensorboard``.

    On resume from step s the writer is opened with ``purge_step = s + 1``: the events a killed run wrote after its
    checkpoint are hidden, as those lines are dropped from ``metrics.jsonl``; a fresh run deletes the old event files.
    """

    def __init__(self, log, directory: Path, resume_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        self.log = log
        if resume_step is None:  # a fresh run replaces the folder's old events, as it replaces metrics.jsonl
            for old in directory.glob("events.out.tfevents.*"):
                old.unlink()
        self.writer = SummaryWriter(str(directory), purge_step=None if resume_step is None else resume_step + 1)

    def write(self, record: dict[str, Any]) -> None:
        self.log.write(record)
        for tag, value in scalars(record).items():
            self.writer.add_scalar(tag, value, global_step=int(record["step"]))
        self.writer.flush()  # a run killed later keeps what it logged, as the JSONL does

    def close(self) -> None:
        self.writer.close()


__all__ = ["INSTALL_HINT", "TENSORBOARD_DIR", "TensorBoardLog", "check_tensorboard", "scalars"]
