"""Loss / accuracy of a model on ``(inputs, targets)``; ``-100`` targets are not scored.

Accuracy counts argmax predictions equal to the target over scored positions (for MQAR: query accuracy);
for classification tasks (targets ``(N,)``) it is the usual sequence accuracy. ``scored_logits`` runs a language
model's head at the scored positions only (``scored_forward``). Rows that pack documents come with their
``segment_pos (N, T)`` (``tasks/base.py: Batch``), which reaches the model so no document sees another.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F

from ..errors import InputError
from ..tasks.base import IGNORE_INDEX


def forward_logits(model, inputs: torch.Tensor, kind: str = "lm", segment_pos: torch.Tensor | None = None):
    """Logits of a LanguageModel / Encoder: ``(B, T, V)`` for "lm", ``(B, C)`` for "cls". ``segment_pos`` (packed
    documents) is passed only when given, so models without the argument (RMT) keep working on other tasks."""
    extra = {} if segment_pos is None else {"segment_pos": segment_pos}
    if kind == "cls":
        return model(inputs, head="cls", **extra).logits
    return model(inputs, **extra).logits


def segment_pos_refusal(model) -> str | None:
    """Why ``model`` cannot take packed rows (``segment_pos``), or None: its forward has no such argument (RMT, the
    encoder), or one of its mixers does not declare ``supports_segment_pos``. Checked before training starts."""
    from ..mixers.base import Mixer

    params = inspect.signature(model.forward).parameters
    if "segment_pos" not in params and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return f"{type(model).__name__}.forward takes no segment_pos"
    unsupported = sorted({m.name for m in model.modules() if isinstance(m, Mixer) and not m.supports_segment_pos})
    return f"mixer(s) {unsupported} do not take segment_pos" if unsupported else None


def scored_forward(
    model,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    kind: str = "lm",
    scored_logits: bool = False,
    segment_pos: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, targets)`` for the loss and the accuracy: the full logits with ``targets`` or, with
    ``scored_logits`` (language models, ``LanguageModel(logits_mask=)``), the head run at the scored positions only:
    ``(N, V)`` logits and their ``(N,)`` targets, the same numbers at a head cost of N rows instead of B·T."""
    if scored_logits and kind == "lm":
        mask = targets != IGNORE_INDEX
        extra = {} if segment_pos is None else {"segment_pos": segment_pos}
        return model(inputs, logits_mask=mask, **extra).logits, targets[mask]
    return forward_logits(model, inputs, kind, segment_pos), targets


def check_scored_logits(model, kind: str) -> None:
    """``scored_logits`` needs a language-model task and a model whose forward takes ``logits_mask``."""
    import inspect

    if kind != "lm":
        raise InputError(f"scored_logits applies to language-model tasks (per-position targets), not kind {kind!r}")
    inner = getattr(model, "module", model)  # DDP / FSDP wrappers
    if "logits_mask" not in inspect.signature(inner.forward).parameters:
        raise InputError(
            f"scored_logits needs a model whose forward takes logits_mask (LanguageModel); {type(inner).__name__} "
            "does not"
        )


def scored_loss_sum(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Sum of cross-entropy over scored positions, and their count."""
    loss = F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )
    return loss, int((targets != IGNORE_INDEX).sum())


@torch.no_grad()
def evaluate(
    model,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    batch_size: int = 64,
    kind: str = "lm",
    device: torch.device | str | None = None,
    autocast_dtype: torch.dtype | None = None,
    scored_logits: bool = False,
    segment_pos: torch.Tensor | None = None,
) -> dict[str, float]:
    if inputs.shape[0] != targets.shape[0]:
        raise InputError(
            f"inputs and targets must have the same number of rows, got {inputs.shape[0]} and {targets.shape[0]}"
        )
    if segment_pos is not None and segment_pos.shape != inputs.shape:
        raise InputError(
            f"segment_pos must have the shape of inputs {tuple(inputs.shape)}, got {tuple(segment_pos.shape)}"
        )
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss_sum, count, correct = 0.0, 0, 0
    for i in range(0, inputs.shape[0], batch_size):
        x, y = inputs[i : i + batch_size].to(device), targets[i : i + batch_size].to(device)
        sp = None if segment_pos is None else segment_pos[i : i + batch_size].to(device)
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            logits, y = scored_forward(model, x, y, kind, scored_logits, sp)
        s, n = scored_loss_sum(logits, y)
        loss_sum += float(s)
        count += n
        mask = y != IGNORE_INDEX
        correct += int(((logits.argmax(-1) == y) & mask).sum())
    model.train(was_training)
    if count == 0:
        raise InputError("no scored positions in targets (all -100)")
    return {"loss": loss_sum / count, "accuracy": correct / count, "scored": count}


@torch.no_grad()
def per_position_loss(
    model, inputs: torch.Tensor, targets: torch.Tensor, batch_size: int = 8, segment_pos: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean loss at each position ``(T,)`` over the rows: how loss changes with context length (``segment_pos``:
    packed documents, passed to the model; unscored targets count 0)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total = torch.zeros(inputs.shape[1], dtype=torch.float64)
    for i in range(0, inputs.shape[0], batch_size):
        x, y = inputs[i : i + batch_size].to(device), targets[i : i + batch_size].to(device)
        sp = None if segment_pos is None else segment_pos[i : i + batch_size].to(device)
        logits = forward_logits(model, x, "lm", sp).float()
        ce = F.cross_entropy(logits.transpose(1, 2), y, reduction="none", ignore_index=IGNORE_INDEX)  # (B, T)
        total += ce.sum(0).double().cpu()
    model.train(was_training)
    return total / inputs.shape[0]
