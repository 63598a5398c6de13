"""Causal language model over a per-layer mixer pattern, with generation through carried mixer states.

``labels`` are aligned with positions: ``labels[:, t]`` is the token the model should predict at
position t (the tasks build them that way); ``-100`` marks positions that are not scored.

``logits_mask`` (B, T) bool runs the LM head only at the positions it marks and returns their logits flat,
``(N, vocab)`` in row-major order of the mask: the head's cost (and the logits' memory) scales with the N scored
positions instead of B·T, which is most of a step when few positions are scored and the vocabulary is large
(Zoology's MQAR: a few queries per 64 tokens, 8,192 classes). Every row is the one the full head computes there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InputError
from .base import MODEL_TYPES, SeqzooModel
from .config import ModelConfig
from .sampling import append_token, sample_next


@dataclass
class LMOutput:
    logits: torch.Tensor  # (B, T, vocab); (N, vocab) at the N positions of a logits_mask
    loss: torch.Tensor | None = None
    states: list[Any] | None = None  # one mixer state per layer, to continue the stream
    hidden: torch.Tensor | None = None  # (B, T, d_model) final-normed hidden states


def lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over positions whose label is not -100 (computed in fp32)."""
    if labels.shape != logits.shape[:-1]:
        raise InputError(
            f"labels must have shape {tuple(logits.shape[:-1])} (aligned with input_ids), got {tuple(labels.shape)}"
        )
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.flatten().long(), ignore_index=-100)


class LanguageModel(SeqzooModel):
    """token embedding -> N residual blocks (mixer per layer from ``config.pattern``) -> norm -> LM head."""

    model_type = "lm"
    causal_stack = True

    def __init__(self, config: ModelConfig):
        super().__init__(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight
        else:
            nn.init.normal_(self.lm_head.weight, std=config.d_model**-0.5)

    def forward(
        self,
        input_ids=None,
        labels=None,
        states=None,
        inputs_embeds=None,
        mode=None,
        output_hidden: bool = False,
        segment_pos=None,
        logits_mask=None,
        context_parallel=None,
        return_states: bool = True,
    ) -> LMOutput:
        """``context_parallel``: a process group over which each sequence is split along time; ``input_ids`` (and
        ``segment_pos``, ``labels``) are this rank's block, rank order = time order; ``states`` enter the whole
        sequence (rank 0's are used) and the returned ones leave it, on every rank (docs/context-parallel.md).
        ``loss`` is then the mean over this rank's scored tokens. ``return_states=False`` (training): ``states`` of
        the output is None, and a split skips the all-gather of each recurrent layer's final state."""
        hidden, new_states = self.trunk(
            input_ids,
            inputs_embeds,
            states,
            mode,
            segment_pos,
            context_parallel=context_parallel,
            return_states=return_states,
        )
        if logits_mask is not None:
            if logits_mask.shape != hidden.shape[:-1] or logits_mask.dtype != torch.bool:
                raise InputError(
                    f"logits_mask must be a bool tensor of shape {tuple(hidden.shape[:-1])}, got "
                    f"{logits_mask.dtype} {tuple(logits_mask.shape)}"
                )
            logits = self.lm_head(hidden[logits_mask])  # (N, vocab)
            if labels is not None and labels.shape == logits_mask.shape:  # other shapes: lm_loss names the error
                labels = labels[logits_mask]
        else:
            logits = self.lm_head(hidden)
        cap = self.config.logit_softcap
        if cap is not None:
            logits = cap * torch.tanh(logits / cap)
        loss = lm_loss(logits, labels) if labels is not None else None
        return LMOutput(logits=logits, loss=loss, states=new_states, hidden=hidden if output_hidden else None)

    @property
    def is_causal(self) -> bool:
        return all(b.mixer.causal for b in self.blocks)

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        do_sample: bool | None = None,
        eos_token_id: int | None = None,
        generator: torch.Generator | None = None,
        states: list[Any] | None = None,
    ) -> torch.Tensor:
        """Prefill the prompt in one call, then decode one token per call with the carried states.

        Greedy when ``do_sample`` is False or ``temperature == 0``; otherwise samples after
        temperature scaling and optional top-k / top-p (nucleus) filtering. Returns ``(B, T + new)``.
        """
        if not self.is_causal:
            raise InputError("generate() needs every layer's mixer to be causal; this model has a non-causal mixer")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise InputError(f"max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
        if do_sample is None:
            do_sample = temperature > 0
        was_training = self.training
        self.eval()
        out = self(input_ids, states=states)
        ids = input_ids
        finished = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
        for _ in range(max_new_tokens):
            nxt = sample_next(out.logits[:, -1], do_sample, temperature, top_k, top_p, generator)  # (B,)
            ids, nxt, done = append_token(ids, nxt, finished, eos_token_id)
            if done:
                break
            out = self(nxt[:, None], states=out.states)
        self.train(was_training)
        return ids


MODEL_TYPES["lm"] = LanguageModel
