"""``seqzoo zoo``: train several mixers on one task with the same budget; table, results files and a plot.

Every mixer gets the same model shape (width, depth, MLP), task, steps, batch and learning rate. A mixer
class may declare ``zoo_kwargs`` (its constructor arguments at this scale) and ``zoo_block_kwargs`` (block
overrides, e.g. ``{"mlp": "none"}`` for a layer that carries its own MLP).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from ..mixers import MIXERS
from ..models import LanguageModel, ModelConfig
from ..plots import plot_zoo
from ..tasks import build_task
from ..train import TrainConfig, train
from . import register_experiment

DEFAULT_TASK = {"name": "mqar", "vocab_size": 16, "num_pairs": 4, "seq_len": 64}


def default_mixers() -> list[str]:
    """Every causal mixer, except those that declare ``in_zoo_default = False`` (too slow for the default run)."""
    return sorted(n for n, cls in MIXERS.items() if cls.causal and getattr(cls, "in_zoo_default", True))


def zoo_config(mixer: str, vocab_size: int, d_model: int, n_layers: int) -> ModelConfig:
    cls = MIXERS[mixer]
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        pattern=[mixer],
        mixer_kwargs={mixer: dict(getattr(cls, "zoo_kwargs", {}))},
        block_kwargs={mixer: dict(getattr(cls, "zoo_block_kwargs", {}))},
        mlp="swiglu",
        mlp_ratio=2.0,
    )


def format_zoo_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| mixer | params | valid accuracy | valid loss | train time (s) |", "|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['mixer']} | - | error: {r['error']} | - | - |")
        else:
            lines.append(
                f"| {r['mixer']} | {r['params']:,} | {r['valid_accuracy']:.3f} | {r['valid_loss']:.4f} | "
                f"{r['time_s']:.1f} |"
            )
    return "\n".join(lines)


@register_experiment("zoo", "train several mixers on one task with the same budget (default: MQAR, every causal mixer)")
def run_zoo(
    out_dir: str | Path = "results/zoo",
    mixers: list[str] | str | None = None,
    task: dict | None = None,
    d_model: int = 64,
    n_layers: int = 2,
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 3e-3,
    warmup_steps: int = 40,
    seed: int = 0,
    device: str = "cpu",
    progress: bool = True,
    eval_samples: int = 512,
) -> dict[str, Any]:
    if isinstance(mixers, str):
        mixers = [m for m in mixers.split(",") if m]
    mixers = mixers or default_mixers()
    unknown = [m for m in mixers if m not in MIXERS]
    if unknown:
        raise ValueError(f"unknown mixer(s) {unknown}; registered mixers: {sorted(MIXERS)}")
    task_spec = dict(task or DEFAULT_TASK)
    task_obj = build_task(task_spec.pop("name"), **task_spec)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    budget = {
        "steps": steps,
        "batch_size": batch_size,
        "lr": lr,
        "warmup_steps": warmup_steps,
        "seed": seed,
        "d_model": d_model,
        "n_layers": n_layers,
    }
    (out / "zoo_config.json").write_text(
        json.dumps({"task": {"name": task_obj.name, **task_obj.config()}, "mixers": mixers, **budget}, indent=2) + "\n"
    )
    rows, curves = [], {}
    for name in mixers:
        print(f"[zoo] {name}: training {steps} steps on {task_obj.describe()}", flush=True)
        model = LanguageModel(zoo_config(name, task_obj.vocab_size, d_model, n_layers))
        cfg = TrainConfig(
            steps=steps,
            batch_size=batch_size,
            lr=lr,
            warmup_steps=warmup_steps,
            seed=seed,
            device=device,
            out_dir=str(out / name),
            eval_every=0,
            eval_samples=eval_samples,
            log_every=max(1, steps // 50),
            progress=progress,
            resume=False,
        )
        try:
            res = train(model, task_obj, cfg)
        except Exception as e:  # one mixer failing must not lose the others' results
            rows.append({"mixer": name, "error": f"{type(e).__name__}: {e}"})
            continue
        rows.append(
            {
                "mixer": name,
                "params": res["params"],
                "valid_accuracy": res["valid_accuracy"],
                "valid_loss": res["valid_loss"],
                "time_s": res["time_s"],
            }
        )
        metrics = [json.loads(l) for l in (out / name / "metrics.jsonl").read_text().splitlines() if l]
        curves[name] = [(m["step"], m["loss"]) for m in metrics if m.get("split") == "train"]
    (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(
            f, fieldnames=["mixer", "params", "valid_accuracy", "valid_loss", "time_s", "error"], extrasaction="ignore"
        )
        w.writeheader()
        w.writerows(rows)
    table = format_zoo_table(rows)
    (out / "results.md").write_text(table + "\n")
    ok = [r for r in rows if "error" not in r]
    plot_zoo(ok, curves, out / "zoo.png", title=f"{task_obj.describe()} | {steps} steps, d={d_model}, L={n_layers}")
    return {"rows": rows, "table": table, "out_dir": str(out)}
