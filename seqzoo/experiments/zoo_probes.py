"""The zoo's probes and suites: each probe is a task (with an optional difficulty axis), a budget, and the claim it
tests. A probe counts as evidence only where the attention reference learns it (accuracy ≥ 0.95 or the best loss).

Probes: ``mqar`` (multi-query associative recall at growing numbers of pairs against a fixed width: recall capacity
of a fixed-size state; Arora et al. 2023 "Zoology", arXiv:2312.04927; Griffin arXiv:2402.19427 §6),
``memory_horizon`` (GateLoop arXiv:2311.01927 App. A: forget at resets, remember between them), ``text`` (byte-level
LM trained at T and evaluated at up to 8T with the loss per position: xLSTM arXiv:2405.04517 §4.3, Griffin §6.1).
New probes (tasks in ``seqzoo/tasks/``) are one more :class:`Probe` in ``SUITES``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Probe:
    name: str
    claim: str
    task: dict[str, Any]
    axis: str | None = None  # task argument that sets the difficulty
    values: tuple = ()  # its values, easy to hard
    metric: str = "valid_accuracy"  # the summary metric (accuracy: higher is better; loss: lower)
    train: dict[str, Any] = field(default_factory=dict)  # overrides of the suite budget
    eval: dict[str, Any] | None = None
    needs_text: bool = False  # task gets path= from --data / $SEQZOO_DATA, skipped without
    models: tuple | None = None  # None: the suite's models

    def settings(self) -> list[Any]:
        return list(self.values) if self.axis else [None]

    def task_args(self, value: Any) -> dict[str, Any]:
        return {**self.task, **({self.axis: value} if self.axis else {})}


MQAR_CLAIM = "recall capacity of a fixed-size state (Zoology; Griffin §6: Hawk below MQA and Griffin)"
MH_CLAIM = "data-controlled forgetting: reset at markers, remember between them (GateLoop App. A, Figs. 5-7)"
TEXT_CLAIM = "byte-level LM; loss per position past the training length (xLSTM §4.3, Griffin §6.1 extrapolation)"

SUITES: dict[str, dict[str, Any]] = {
    "quick": {
        "seeds": [0],
        "d_model": 64,
        "n_layers": 2,
        "train": {
            "steps": 200,
            "batch_size": 32,
            "lr": 3e-3,
            "warmup_steps": 20,
            "eval_every": 50,
            "eval_samples": 256,
            "log_every": 10,
            "device": "cpu",
            "precision": "fp32",
        },
        "probes": [
            Probe("mqar", MQAR_CLAIM, {"name": "mqar", "vocab_size": 16, "seq_len": 64}, "num_pairs", (2, 4)),
            Probe(
                "memory_horizon",
                MH_CLAIM,
                {"name": "memory_horizon", "seq_len": 64, "n_resets": 3, "train_size": 2000, "test_size": 200},
            ),
            Probe(
                "text",
                TEXT_CLAIM,
                {"name": "text", "seq_len": 64, "tokenizer": "byte"},
                metric="valid_loss",
                eval={"lengths": [64, 128, 256, 512], "tokens": 4096, "bins": 16},
                needs_text=True,
            ),
        ],
    },
    "full": {
        "seeds": [0, 1],
        "d_model": 64,
        "n_layers": 2,
        "train": {
            "steps": 1500,
            "batch_size": 64,
            "lr": 3e-3,
            "warmup_steps": 100,
            "eval_every": 250,
            "eval_samples": 512,
            "log_every": 25,
            "device": "cpu",
            "precision": "fp32",
        },
        "probes": [
            Probe("mqar", MQAR_CLAIM, {"name": "mqar", "vocab_size": 32, "seq_len": 64}, "num_pairs", (2, 4, 8, 12)),
            Probe(
                "memory_horizon",
                MH_CLAIM,
                {"name": "memory_horizon", "seq_len": 128, "n_resets": 3, "train_size": 4000, "test_size": 500},
            ),
            Probe(
                "text",
                TEXT_CLAIM,
                {"name": "text", "seq_len": 128, "tokenizer": "byte"},
                metric="valid_loss",
                eval={"lengths": [128, 256, 512, 1024], "tokens": 16384, "bins": 16},
                needs_text=True,
            ),
        ],
    },
}
