"""CPU cost of ``seqzoo experiment mad`` runs (one process, one thread), measured on a few steps and extrapolated.

For each model and MAD task (its baseline setting, or that setting changed by ``--task-args``), the run the
experiment would make is built and trained by the trainer exactly as the experiment does (``experiments/mad.py:
model_entry, train_config``); the cost per step is the process time of an ``--steps``-step run minus that of a
3-step run, divided by the difference, after a 2-step warm-up run that pays the one-time costs (imports, native
builds, building the fixed training set). Process time, not wall time, so that a machine shared with other jobs
still gives what one free core would take. Also the process time of scoring the test samples, and what one run of
the protocol (``--epochs`` epochs of the fixed training set, one evaluation) would take.

    python tools/mad_step_cost.py --models attention,hawk --tasks recall,memorization
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from seqzoo.eval import evaluate
from seqzoo.experiments.mad import SETTINGS, model_entry, parse_overrides, task_settings, train_config
from seqzoo.sweep.train_run import build
from seqzoo.tasks import build_task
from seqzoo.train import TrainConfig, train

WARMUP_STEPS, BASE_STEPS = 2, 3


def step_cost(kind: str, label: str, task_args: dict, args) -> dict:
    (_, task_cfg), *_ = task_settings(label, "baseline", task_args)
    cpu = {}
    for n in (WARMUP_STEPS, BASE_STEPS, args.steps):
        task_args = dict(task_cfg)
        task = build_task(task_args.pop("name"), **task_args)
        spec = model_entry(kind, task, args.d_model, args.n_layers, args.attention_heads)
        model, task = build({"seed": 0, "model": spec, "task": task_cfg})
        full = train_config(task, 1e-3, 0.0, args.epochs, args.batch_size, 1e-6, 8, "cpu")
        with tempfile.TemporaryDirectory() as out:
            cfg = TrainConfig.from_dict({**full, "steps": n, "progress": False, "out_dir": out})
            start = time.process_time()
            train(model, task, cfg)
            cpu[n] = time.process_time() - start
    x, y = task.build(args.test_samples, 0, "valid")
    start = time.process_time()
    evaluate(model, x, y, batch_size=128)
    ev = time.process_time() - start
    per_step = (cpu[args.steps] - cpu[BASE_STEPS]) / (args.steps - BASE_STEPS)
    steps = full["steps"]
    return {"model": kind, "task": label, **{k: v for k, v in task_cfg.items() if k != "name"},
            "cpu_s_per_step": round(per_step, 4), "eval_cpu_s": round(ev, 3), "run_steps": steps,
            "run_h": round((steps * per_step + ev) / 3600, 2)}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="attention,mlstm,xlstm,gateloop,hawk,griffin")
    p.add_argument("--tasks", default=",".join(SETTINGS))
    p.add_argument("--task-args", default="", help="as the experiment's task_args, e.g. seq_len=1024")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--attention-heads", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epochs", type=int, default=200, help="epochs of one run, for run_h")
    p.add_argument("--steps", type=int, default=8, help="the longer timed run (> 3)")
    p.add_argument("--test-samples", type=int, default=1280)
    p.add_argument("--json", default="", help="also write every row to this JSON file")
    args = p.parse_args()
    if args.steps <= BASE_STEPS:
        p.error(f"--steps must be > {BASE_STEPS}")
    torch.set_num_threads(1)
    labels = args.tasks.split(",")
    extra = parse_overrides(args.task_args, labels)
    print("| model | task | CPU s/step | test CPU s | steps of one run | one run, CPU h |")
    print("|---|---|---|---|---|---|")
    rows = []
    for label in labels:
        for kind in args.models.split(","):
            r = step_cost(kind, label, extra[label], args)
            rows.append(r)
            print(f"| {kind} | {label} | {r['cpu_s_per_step']} | {r['eval_cpu_s']} | {r['run_steps']} | {r['run_h']} |",
                  flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
