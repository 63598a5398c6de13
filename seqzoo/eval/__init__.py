"""Evaluation: loss and accuracy over scored positions, per-position loss curves."""

from .evaluate import evaluate, forward_logits, per_position_loss, scored_loss_sum

__all__ = ["evaluate", "forward_logits", "per_position_loss", "scored_loss_sum"]
