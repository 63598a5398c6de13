"""How much of each Orchid layer's filter depends on the input, for sweep runs (docs/orchid.md, recall grid).

    python tools/orchid_filter_probe.py RUN_DIR [RUN_DIR ...] [--at final|checkpoint|init] [--samples 512] [--seed 7]

RUN_DIR is one run of a sweep (``<out>/runs/<key>``, e.g. of ``seqzoo experiment orchid-ar``). ``--at final`` reads
the trained model (``train/model``), ``checkpoint`` the last checkpoint of a run still going (``train/checkpoint.pt``),
``init`` the model as the run's seed initialised it. For each run it prints one markdown row: the run's labels, the
step, held-out accuracy on ``--samples`` fresh samples of the run's task (split "valid", ``--seed``), and per Orchid
layer ``input_share`` / ``adaptive_static`` (seqzoo/eval/orchid_filter.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from seqzoo.eval import evaluate
from seqzoo.eval.orchid_filter import orchid_filter_variation
from seqzoo.models.base import SeqzooModel
from seqzoo.sweep.train_run import build
from seqzoo.tasks import build_task
from seqzoo.train.checkpoint import CHECKPOINT_NAME


def load(run: Path, at: str):
    """(model, task, step, labels) of one sweep run at ``at``."""
    record = json.loads((run / "config.json").read_text())
    config, labels = record["config"], record.get("labels", {})
    if at == "final":
        if not (run / "train" / "model").is_dir():
            raise SystemExit(f"{run}: no train/model (the run has not finished); use --at checkpoint")
        task_args = dict(config["task"])
        task = build_task(task_args.pop("name"), **task_args)
        return SeqzooModel.from_pretrained(run / "train" / "model"), task, int(config["train"]["steps"]), labels
    model, task = build(config)  # the run's seed gives its initial weights
    if at == "checkpoint":
        path = run / "train" / CHECKPOINT_NAME
        if not path.is_file():
            raise SystemExit(f"{run}: no train/{CHECKPOINT_NAME}")
        state = torch.load(path, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        return model, task, int(state["step"]), labels
    return model, task, 0, labels


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--at", choices=("final", "checkpoint", "init"), default="final")
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print("| run | labels | step | held-out accuracy | input_share per layer | adaptive_static per layer |")
    print("|---|---|---|---|---|---|")
    for run in args.runs:
        model, task, step, labels = load(run, args.at)
        inputs, targets = task.build(args.samples, args.seed, "valid")
        acc = evaluate(model.eval(), inputs, targets)["accuracy"]
        rows = orchid_filter_variation(model, inputs)
        label = ", ".join(f"{k}={v}" for k, v in labels.items())
        share = " / ".join(f"{r['input_share']:.3f}" for r in rows)
        ratio = " / ".join(f"{r['adaptive_static']:.2f}" for r in rows)
        print(f"| {run.name} | {label} | {step} | {acc:.3f} | {share} | {ratio} |")


if __name__ == "__main__":
    main()
