"""Next-token choice from logits: greedy, temperature, top-k and top-p (nucleus) sampling."""

from __future__ import annotations

import torch

from ..errors import InputError


def filter_logits(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """Set logits outside the top-k / top-p set to -inf. ``logits (B, V)``."""
    if top_k is not None:
        if top_k <= 0:
            raise InputError(f"top_k must be a positive int, got {top_k}")
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        if not 0.0 < top_p <= 1.0:
            raise InputError(f"top_p must be in (0, 1], got {top_p}")
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = sorted_logits.softmax(-1)
        # drop a token when the mass strictly before it already reaches top_p (the top token always stays)
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Refuse sampling parameters out of range, whether or not this step samples (a bad value is never ignored)."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0:
        raise InputError(f"temperature must be a number >= 0 (0: greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise InputError(f"top_k must be an int >= 1 (or None), got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise InputError(f"top_p must be in (0, 1] (or None), got {top_p!r}")


def sample_next(
    logits: torch.Tensor,
    do_sample: bool,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``logits (B, V)`` -> next token ids ``(B,)``."""
    check_sampling(temperature, top_k, top_p)
    logits = logits.float()
    if not do_sample or temperature == 0:
        return logits.argmax(-1)
    probs = filter_logits(logits / temperature, top_k, top_p).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def append_token(
    ids: torch.Tensor, nxt: torch.Tensor, finished: torch.Tensor, eos_token_id: int | None
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Append ``nxt (B,)`` to ``ids (B, T)``. Rows that already ended get ``eos_token_id`` again (``finished`` is
    updated in place). Returns the new ids, the tokens appended (to feed the model next) and whether every row
    has ended."""
    if eos_token_id is not None:
        nxt = torch.where(finished, torch.full_like(nxt, eos_token_id), nxt)
        finished |= nxt == eos_token_id
    ids = torch.cat([ids, nxt[:, None]], dim=1)
    return ids, nxt, eos_token_id is not None and bool(finished.all())
