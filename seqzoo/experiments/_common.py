"""Small helpers every experiment uses: option parsing from ``--set`` and results tables as files."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any


def as_list(v: Any) -> list[str]:
    """``"a,b"`` or ``["a", "b"]`` -> ``["a", "b"]`` (``--set`` passes comma lists as strings)."""
    if isinstance(v, (list, tuple)):
        return list(v)
    return [s.strip() for s in str(v).split(",") if s.strip()]


def as_ints(v: Any) -> list[int]:
    return [int(s) for s in as_list(v)]


def write_rows(out: Path, rows: list[dict[str, Any]], stem: str = "results") -> None:
    """``<stem>.json`` (everything) and ``<stem>.csv`` (the scalar columns, in first-seen order)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=2) + "\n")
    if rows:
        keys = list(dict.fromkeys(k for r in rows for k in r if not isinstance(r[k], (list, dict))))
        with open(out / f"{stem}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)


def train_then_eval_lengths(model, task, train_config, lengths: list[int], eval_tokens: int, eval_batch: int):
    """Train ``model`` on ``task``, then its held-out loss at each evaluation length: the same valid tokens cut
    into windows of L (length extrapolation). Returns the train result, the train wall time and one row per L."""
    import time

    import torch

    from ..eval import evaluate
    from ..train import train

    t0 = time.time()
    res = train(model, task, train_config)
    train_s = round(time.time() - t0, 1)
    model.eval()
    rows = []
    for L in lengths:
        xs, ys = task.windows("valid", seq_len=L, max_windows=max(1, int(eval_tokens) // L))
        with torch.no_grad():
            m = evaluate(model, xs, ys, batch_size=eval_batch)
        rows.append(
            {
                "eval_len": L,
                "loss": m["loss"],
                "bits_per_byte": m["loss"] / 0.6931471805599453,
                "accuracy": m["accuracy"],
                "params_non_emb": model.num_parameters(exclude_embeddings=True),
                "train_loss": res.get("train_loss"),
                "train_s": train_s,
            }
        )
    return res, rows
