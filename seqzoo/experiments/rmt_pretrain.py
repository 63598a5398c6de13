"""Pre-training of the RMT curriculum backbone: masked-LM on the bAbI task's own book text (E4/E5, docs/rmt.md).

The memory-task curriculum of Bulatov et al. (arXiv:2304.11062 Fig. 11; arXiv:2207.06881) fine-tunes a
*pre-trained* BERT with a low learning rate. The CPU stand-in: the ``rmt-tiny`` encoder trained with BERT's
masked-LM objective (15 % of the positions, the 80/10/10 rule of seqzoo/tasks/mlm.py) on the *train* split of
the Gutenberg books the task draws its noise from (``<data_dir>/gutenberg-nltk``; valid/test noise is never
seen), in the task's own compact vocabulary plus one ``[MASK]`` id, so its weights load unchanged into the RMT
backbone. Windows are as long as one backbone call of the encoder RMT: [CLS] + m memory slots + L tokens.

One sweep run (seqzoo/sweep): ``runs/<key>/`` keyed by this configuration; the encoder is saved under
``runs/<key>/backbone`` (``save_pretrained``). The curriculum runs name ``<key>`` in their own configuration,
so a changed pre-training retrains them.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..errors import TrainingDivergedError

FN = "seqzoo.experiments.rmt_pretrain:pretrain_run"
BACKBONE_DIR = "backbone"  # inside the run folder


def pretrain_config(
    task: dict[str, Any], preset: str, seq_len: int, steps: int, batch_size: int, lr: float, mask_prob: float
) -> dict[str, Any]:
    """The run configuration (every key hashed). One pre-training (seed 0) serves every curriculum seed, as one
    BERT checkpoint served every run of the paper."""
    return {
        "task": task,
        "preset": preset,
        "seq_len": int(seq_len),
        "steps": int(steps),
        "optim": {"lr": float(lr), "batch_size": int(batch_size), "warmup_steps": min(100, int(steps) // 10)},
        "mask_prob": float(mask_prob),
        "valid_windows": 256,
        "seed": 0,
    }


def _windows(stream, n: int, seq_len: int, rng):
    """``n`` cyclic windows of ``seq_len`` tokens at random offsets of ``stream`` (a 1-D token array)."""
    import numpy as np
    import torch

    starts = rng.integers(0, len(stream), size=n)
    idx = (starts[:, None] + np.arange(seq_len)[None, :]) % len(stream)
    return torch.as_tensor(stream[idx], dtype=torch.long)


def _masked(masker, tokens, seed: int, split: str):
    from ..tasks.mlm import MaskedLM

    return MaskedLM.mask(masker, tokens, seed, split)  # the BERT rule, on this vocabulary (see ``masker``)


def mlm_loss(enc, inputs, targets):
    """Cross-entropy at the masked positions only: the (tied) vocabulary head runs on those rows alone, which is
    most of the cost of a full-vocabulary head at this model size."""
    import torch.nn.functional as F

    x, _ = enc.embed_inputs(inputs)
    hidden, _ = enc.trunk(inputs_embeds=x)
    keep = targets != -100
    logits = enc.mlm_head(hidden[keep])
    return F.cross_entropy(logits.float(), targets[keep]), logits, targets[keep]


def pretrain_run(config: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """Sweep run function: seed, build the encoder (vocabulary = the task's + [MASK]), AdamW with linear warm-up
    and decay, masked-LM on train-split windows; valid masked-LM loss/accuracy before and after; weights saved."""
    import numpy as np
    import torch

    from ..models.base import MODEL_TYPES
    from ..models.presets import PRESETS
    from ..sweep import seed_everything
    from ..tasks.babi import BabiMemory
    from ..train.curriculum import OptimConfig, lr_at

    task = BabiMemory(**config["task"])
    seed = int(config["seed"])
    seed_everything(seed)
    preset = PRESETS[config["preset"]]
    enc = MODEL_TYPES[preset.kind](preset.config(vocab_size=task.vocab_size + 1))
    masker = SimpleNamespace(
        mask_prob=float(config["mask_prob"]), n_text_tokens=task.vocab_size, mask_token=task.vocab_size
    )
    T, steps = int(config["seq_len"]), int(config["steps"])
    o = config["optim"]
    optim = OptimConfig(lr=float(o["lr"]), batch_size=int(o["batch_size"]), warmup_steps=int(o["warmup_steps"]))
    vx, vy = _masked(
        masker,
        _windows(task.noise["valid"], int(config["valid_windows"]), T, np.random.default_rng(seed)),
        seed,
        "valid",
    )

    @torch.no_grad()
    def valid() -> tuple[float, float]:
        enc.eval()
        loss, logits, target = mlm_loss(enc, vx, vy)
        enc.train()
        return float(loss), float((logits.argmax(-1) == target).float().mean())

    init_loss, init_acc = valid()
    params = [p for p in enc.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay)
    rng = np.random.default_rng([seed, 1])
    out = Path(run_dir) / "train"
    out.mkdir(parents=True, exist_ok=True)
    curve, t0 = [], time.time()
    with open(out / "pretrain.jsonl", "w") as log:
        for step in range(steps):
            for g in opt.param_groups:
                g["lr"] = lr_at(step, steps, optim)
            x, y = _masked(
                masker, _windows(task.noise["train"], optim.batch_size, T, rng), seed * 1_000_003 + step, "train"
            )
            loss = mlm_loss(enc, x, y)[0]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, optim.grad_clip)
            opt.step()
            value = float(loss.detach())
            if not math.isfinite(value):
                raise TrainingDivergedError(f"masked-LM loss became {value} at step {step + 1}")
            if (step + 1) % 10 == 0 or step + 1 == steps:
                curve.append([step + 1, round(value, 4)])
                log.write(json.dumps({"step": step + 1, "loss": value, "time_s": round(time.time() - t0, 2)}) + "\n")
    train_s = round(time.time() - t0, 2)
    valid_loss, valid_acc = valid()
    enc.save_pretrained(Path(run_dir) / BACKBONE_DIR)
    return {
        "params": sum(p.numel() for p in params),
        "steps": steps,
        "train_s": train_s,
        "valid_loss_init": round(init_loss, 4),
        "valid_accuracy_init": round(init_acc, 4),
        "valid_loss": round(valid_loss, 4),
        "valid_accuracy": round(valid_acc, 4),
        "curve": curve,
    }
