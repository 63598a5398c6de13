"""Parity with the RMT authors' decoder wrapper around a tiny Hugging Face GPT-2.

    python -m seqzoo.parity.rmt /path/to/fixtures/rmt

The reference is ``MemoryCell`` inside ``RecurrentWrapper`` of the authors' repository
(booydar/recurrent-memory-transformer, ``modeling_rmt/language_modeling.py``; Bulatov et al., arXiv:2207.06881
§3 and arXiv:2304.11062). A fixture case is ``<case>.safetensors`` + ``<case>.json``: the GPT-2 state dict
(``gpt2.*``, head tied to ``wte``), the memory parameter (``memory``), ``input:input_ids``, the wrapper's
``output:logits`` / ``output:loss``, the memory written by every segment (``state:after_segment_s``) and the
gradients of that loss w.r.t. the memory and the token embeddings (``grad:memory``, ``grad:wte``).

seqzoo's ``RMT`` with ``placement="read_write"``, ``segment_alignment="left"`` and ``shift_labels=True`` is the
authors' layout as is: ``[M ; E(x) ; M]`` as ``inputs_embeds`` (GPT-2 positions 0.. in every segment, plain
causal mask), logits from the middle rows, the new memory = final hidden states (after ``ln_f``) at the last m
rows, one mean cross-entropy over the shifted whole sequence. Only truncated BPTT differs (docs/rmt.md):

* at the fixture's commit 9d0ebe1 (the default branch) ``manage_gradients`` detaches a local variable and the
  caller ignores its return value, so ``k2`` has no effect: the stored ``gpt2_k2_1`` gradients are full-BPTT
  gradients (rule ``"as_stored"``: ``bptt_depth=-1``);
* the authors fixed this in commit 9e94a1d ("fix truncation of bptt", babilong branches); that rule keeps the
  first hand-over always (rule ``"authors"``: :func:`authors_truncation`, ``bptt_keep_first=True``);
* the papers' "last k hand-overs" is seqzoo's ``bptt_depth=k2`` (rule ``"last_k"``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from ..errors import require
from ..models.rmt import RMT, RMTConfig
from .fixtures import load_fixture

CASES = ("gpt2_full_bptt", "gpt2_k2_1")
RULES = ("as_stored", "authors", "last_k")


def authors_kept_handovers(k2: int | None, max_n_segments: int | None, n_segments: int) -> list[int]:
    """Hand-overs tau (memory entering segment tau, 1 <= tau < N) that carry gradient in the authors' wrapper.

    ``RecurrentWrapper.manage_gradients(memory, seg_num)`` runs after segment ``seg_num`` and keeps the graph iff
    ``seg_num == 0 or k2 in {-1, None} or seg_num + k2 > max_n_segments``; hand-over tau follows segment tau - 1.
    This is the rule as fixed in commit 9e94a1d; at 9d0ebe1 the detach is lost and every hand-over is kept.
    """
    full = k2 in (-1, None)
    kept = []
    for tau in range(1, n_segments):
        s = tau - 1
        if s == 0 or full or s + k2 > max_n_segments:
            kept.append(tau)
    return kept


def authors_truncation(k2: int | None, max_n_segments: int | None, n_segments: int) -> dict[str, Any]:
    """``RMTConfig`` fields (``bptt_depth``, ``bptt_keep_first``) that keep the authors' hand-overs at N segments.

    The authors keep hand-over 1 always and hand-over tau >= 2 iff ``tau - 1 + k2 > max_n_segments``; seqzoo keeps
    tau iff ``tau >= N - bptt_depth``. So at N segments the authors' ``k2`` is
    ``bptt_depth = max(N - max_n_segments + k2 - 2, 0)`` with ``bptt_keep_first=True`` (``k2 = 1`` or ``2`` at
    N = max_n_segments: only the first hand-over). The map depends on N because the authors count from
    ``max_n_segments``, not from the input's segment count.
    """
    require(isinstance(n_segments, int) and n_segments >= 1, f"n_segments must be an int >= 1, got {n_segments!r}")
    if k2 in (-1, None):
        return {"bptt_depth": -1, "bptt_keep_first": False}
    require(
        isinstance(max_n_segments, int) and max_n_segments >= n_segments,
        f"max_n_segments must be an int >= n_segments={n_segments} when k2={k2} (the authors' rule compares "
        f"with it), got {max_n_segments!r}",
    )
    return {"bptt_depth": max(n_segments - max_n_segments + k2 - 2, 0), "bptt_keep_first": True}


def load_case(directory: str | Path, case: str) -> dict[str, Any]:
    """The fixture of one case (``seqzoo.parity.fixtures.load_fixture`` layout, plus the ``grad`` kind)."""
    path = Path(directory) / f"{case}.safetensors"
    require(path.is_file(), f"RMT fixture {path} not found (cases: {CASES})")
    return load_fixture(path, extra_kinds=("grad",))


def truncation(rule: str, k2: int | None, max_n_segments: int | None, n_segments: int) -> dict[str, Any]:
    """``RMTConfig`` truncation fields for the fixture's ``k2`` under one of ``RULES`` (module docstring)."""
    require(rule in RULES, f"rule must be one of {RULES}, got {rule!r}")
    if rule == "as_stored" or k2 in (-1, None):
        return {"bptt_depth": -1, "bptt_keep_first": False}
    if rule == "authors":
        return authors_truncation(k2, max_n_segments, n_segments)
    return {"bptt_depth": k2, "bptt_keep_first": False}


def build_from_case(fx: dict[str, Any], dtype: torch.dtype = torch.float32, rule: str = "as_stored") -> RMT:
    """seqzoo ``RMT`` around a ``transformers`` GPT-2 with the fixture's weights and memory; ``rule`` picks how
    the fixture's ``k2`` becomes seqzoo's truncation (:func:`truncation`)."""
    require(rule in RULES, f"rule must be one of {RULES}, got {rule!r}")
    import transformers  # optional dependency: only the parity check needs it

    meta = fx["meta"]
    cfg = transformers.GPT2Config(**meta["backbone"]["config"])
    gpt2 = transformers.GPT2LMHeadModel(cfg)
    sd = {k.removeprefix("gpt2."): v for k, v in fx["official"].items() if k.startswith("gpt2.")}
    sd["lm_head.weight"] = sd["transformer.wte.weight"]  # tied head, stored once
    gpt2.load_state_dict(sd, strict=True)
    gpt2 = gpt2.eval().to(dtype)

    r = meta["rmt"]
    n_segments = len(meta["segments"])
    trunc = truncation(rule, r["k2"], r["max_n_segments"], n_segments)
    config = RMTConfig(
        num_mem_tokens=r["num_mem_tokens"],
        segment_size=r["segment_size"],
        placement="read_write",
        segment_alignment=r["segment_alignment"],
        max_n_segments=r["max_n_segments"],
        task="lm",
        **trunc,
    )
    model = RMT(gpt2, config).to(dtype)
    with torch.no_grad():
        model.memory.copy_(fx["official"]["memory"].to(dtype))
    return model


def run_case(model: RMT, fx: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The fixture's quantities computed by seqzoo: logits, loss, gradients, memory after every segment."""
    ids = fx["input"]["input_ids"]
    wte = model.backbone.model.get_input_embeddings().weight
    model.zero_grad(set_to_none=True)
    out = model(ids, labels=ids, shift_labels=True)  # Hugging Face-style labels, shifted once (authors' loss)
    out.loss.backward()
    got = {
        "output:logits": out.logits.detach(),
        "output:loss": out.loss.detach().reshape(1),
        "grad:memory": model.memory.grad.detach().clone(),
        "grad:wte": wte.grad.detach().clone(),  # embedding + tied head, as in the authors' GPT-2
    }
    L = model.config.segment_size
    with torch.no_grad():  # left-aligned segments: the memory after segment s is the final memory of a prefix
        for s in range(out.n_segments):
            prefix = ids[:, : min((s + 1) * L, ids.shape[1])]
            got[f"state:after_segment_{s}"] = model(prefix, return_memory=True, return_logits=False).memory
    return got


def compare_case(directory: str | Path, case: str, dtype: torch.dtype = torch.float32, rule: str = "as_stored"):
    """``{fixture key: max |seqzoo - fixture|}`` over logits, loss, per-segment memories and gradients."""
    fx = load_case(directory, case)
    got = run_case(build_from_case(fx, dtype, rule), fx)
    ref = {f"{kind}:{name}": v for kind in ("output", "state", "grad") for name, v in fx[kind].items()}
    require(set(ref) == set(got), f"fixture keys {sorted(ref)} differ from the computed {sorted(got)}")
    return {k: float((got[k].double() - ref[k].double()).abs().max()) for k in sorted(ref)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    require(len(argv) == 1, "usage: python -m seqzoo.parity.rmt FIXTURE_DIR (the folder holding gpt2_*.safetensors)")
    for case in CASES:
        for dtype in (torch.float32, torch.float64):
            for rule in RULES:
                gaps = compare_case(argv[0], case, dtype, rule)
                worst = ", ".join(f"{k} {v:.1e}" for k, v in gaps.items())
                print(f"{case} {str(dtype).removeprefix('torch.')} rule={rule}: {worst}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
