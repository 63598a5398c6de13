"""Where one training step's CPU time goes: ``torch.profiler`` over forward + backward, the top ops by self CPU time.

    python tools/profile_step.py --model hawk-tiny --batch 2 --T 512 [--threads 1] [--steps 3] [--top 8]
    python tools/profile_step.py --mixer gateloop_softmax --d-model 64 --mixer-arg n_heads=4 --batch 8 --T 1024

``--model`` profiles a preset language model (cross-entropy on random ids, vocabulary ``--vocab-size``);
``--mixer`` one registered mixer on random inputs (loss: the sum of its output). One untimed step first (it
compiles the C sources and fills caches), then ``--steps`` profiled steps. Prints one markdown row per op: its self
CPU time per step and its share of all self CPU time. A profile is one run on one machine: its shares move with the
load, so it says where time goes, not how fast anything is (benchmarks: ``seqzoo bench``).
"""

from __future__ import annotations

import argparse
import ast

import torch

import seqzoo
from seqzoo.errors import require


def mixer_kwargs(items: list[str]) -> dict:
    """``--mixer-arg key=value`` pairs; a value is read as a Python literal where it is one (4, 0.5, True)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        require(bool(sep) and key.isidentifier(), f"--mixer-arg must be key=value, got {item!r}")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def build_step(args):
    """A closure running one forward + backward, built before anything is profiled."""
    require(args.batch >= 1 and args.T >= 1, f"--batch and --T must be >= 1, got {args.batch} and {args.T}")
    if args.model is not None:
        require(
            args.model in seqzoo.PRESETS, f"--model must be a preset ({sorted(seqzoo.PRESETS)}), got {args.model!r}"
        )
        model = seqzoo.build_model(args.model, vocab_size=args.vocab_size)
        ids = torch.randint(0, args.vocab_size, (args.batch, args.T))
        return lambda: model(ids, labels=ids).loss.backward()
    require(
        args.mixer in seqzoo.MIXERS, f"--mixer must be a registered mixer ({sorted(seqzoo.MIXERS)}), got {args.mixer!r}"
    )
    mixer = seqzoo.build_mixer(args.mixer, d_model=args.d_model, **mixer_kwargs(args.mixer_arg))
    x = torch.randn(args.batch, args.T, args.d_model, requires_grad=True)
    return lambda: mixer(x)[0].sum().backward()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="a preset (seqzoo list presets)")
    what.add_argument("--mixer", help="a registered mixer (seqzoo list)")
    ap.add_argument("--d-model", type=int, default=64, help="the mixer's width (--mixer)")
    ap.add_argument("--mixer-arg", action="append", default=[], help="key=value for the mixer (repeatable)")
    ap.add_argument("--vocab-size", type=int, default=256, help="the model's vocabulary (--model)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="profiled steps, after one untimed step")
    ap.add_argument("--top", type=int, default=8, help="rows to print")
    args = ap.parse_args(argv)
    require(args.threads >= 1 and args.steps >= 1 and args.top >= 1, "--threads, --steps and --top must be >= 1")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    step = build_step(args)
    step()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            step()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    print(f"self CPU time per step: {total / args.steps / 1e3:.1f} ms ({args.steps} steps, {args.threads} thread(s))")
    print("| op | self CPU ms per step | share |\n|---|---|---|")
    for e in events[: args.top]:
        print(
            f"| `{e.key}` | {e.self_cpu_time_total / args.steps / 1e3:.2f} | {100 * e.self_cpu_time_total / total:.1f} % |"
        )


if __name__ == "__main__":
    from tool_errors import run_tool

    run_tool(main)
