"""CPU cost of one training step of ``seqzoo experiment zoology-mqar`` cells (one process, one thread).

For each model and cell (d_model, T, pairs) the zoo's model is trained by the trainer on Zoology's MQAR exactly as
the experiment does (``scored_logits`` unless ``--full-head``); the cost per step is the process time of an
``--steps``-step run minus that of a 3-step run, divided by the difference, after a 2-step warm-up run that pays the
one-time costs (imports, native builds). Process time, not wall time, so that a machine shared with other jobs
still gives what one free core would take. Also the process time of evaluating ``--eval-samples`` held-out samples,
and what one experiment run (``--run-steps`` steps and ``--run-evals`` evaluations) would take.

    python tools/zoology_mqar_step_cost.py --models attention,hawk --cells 64:64:4,256:128:16
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch

from seqzoo.eval import evaluate
from seqzoo.experiments.zoo_models import model_spec
from seqzoo.sweep.train_run import build
from seqzoo.train import TrainConfig, train

WARMUP_STEPS, BASE_STEPS = 2, 3


def task_config(vocab_size: int, seq_len: int, pairs: int) -> dict:
    """The experiment's task (its defaults: power_a 0.01, zero filler)."""
    return {
        "name": "mqar",
        "protocol": "zoology",
        "vocab_size": vocab_size,
        "num_pairs": pairs,
        "seq_len": seq_len,
        "power_a": 0.01,
        "random_filler": False,
    }


def step_cost(name: str, d: int, T: int, P: int, args) -> dict:
    task = task_config(args.vocab_size, T, P)
    cpu = {}
    for n in (WARMUP_STEPS, BASE_STEPS, args.steps):
        model, t = build({"seed": 0, "model": model_spec(name, args.vocab_size, d, args.n_layers, T), "task": task})
        with tempfile.TemporaryDirectory() as out:
            cfg = TrainConfig(
                steps=n, batch_size=args.batch_size, lr=1e-3, warmup_steps=1, eval_every=0, eval_samples=8,
                device="cpu", precision="fp32", weight_decay=0.1, progress=False,
                scored_logits=not args.full_head, out_dir=out,
            )  # fmt: skip
            start = time.process_time()
            train(model, t, cfg)
            cpu[n] = time.process_time() - start
    x, y = t.build(args.eval_samples, 0, "valid")
    start = time.process_time()
    evaluate(model, x, y, batch_size=128, scored_logits=not args.full_head)
    ev = time.process_time() - start
    per_step = (cpu[args.steps] - cpu[BASE_STEPS]) / (args.steps - BASE_STEPS)
    run_s = args.run_steps * per_step + args.run_evals * ev
    return {"model": name, "d_model": d, "seq_len": T, "num_pairs": P, "batch_size": args.batch_size,
            "scored_logits": not args.full_head, "cpu_s_per_step": round(per_step, 4),
            "eval_cpu_s": round(ev, 3), "run_min": round(run_s / 60, 1)}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="attention,mlstm,xlstm,gateloop,hawk,griffin")
    p.add_argument("--cells", default="64:64:4,256:128:16", help="d_model:T:pairs, comma-separated")
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=13, help="the longer timed run (> 3)")
    p.add_argument("--eval-samples", type=int, default=1000)
    p.add_argument("--run-steps", type=int, default=2000, help="steps of one experiment run, for run_min")
    p.add_argument("--run-evals", type=int, default=4, help="evaluations in one experiment run, for run_min")
    p.add_argument("--full-head", action="store_true", help="the head at every position (no scored_logits)")
    p.add_argument("--json", default="", help="also write every row to this JSON file")
    args = p.parse_args()
    if args.steps <= BASE_STEPS:
        p.error(f"--steps must be > {BASE_STEPS}")
    torch.set_num_threads(1)
    cells = [tuple(int(v) for v in c.split(":")) for c in args.cells.split(",")]
    print("| model | d_model | T | pairs | CPU s/step | eval CPU s | one run, min |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for name in args.models.split(","):
        for d, T, P in cells:
            r = step_cost(name, d, T, P, args)
            rows.append(r)
            print(
                f"| {name} | {d} | {T} | {P} | {r['cpu_s_per_step']} | {r['eval_cpu_s']} | {r['run_min']} |", flush=True
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
