"""Recurrent Memory Transformer: memory tokens + segment-level recurrence around any transformer backbone.

Bulatov, Kuratov, Burtsev, "Recurrent Memory Transformer" (arXiv:2207.06881) and "Scaling Transformer to
1M tokens and beyond with RMT" (arXiv:2304.11062). A long input is cut into segments; m memory vectors
are placed next to each segment's token embeddings and the backbone's final hidden states at the memory
(write) positions become the next segment's memory:

    encoder:     H_t = f([M_t ; E(x_t)])             M_{t+1} = H_t[0:m]
    read/write:  H_t = f([M_t ; E(x_t) ; M_t])       logits_t = head(H_t[m:m+L_t])   M_{t+1} = H_t[m+L_t:]

with M_0 = P a trainable (m, D) parameter. Gradients flow through the chain of segments (BPTT), truncated
to the last ``bptt_depth`` hand-overs (``bptt_keep_first`` also keeps the first one, as the authors' wrapper
does). See docs/rmt.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as torch_checkpoint

from ..errors import InputError, MissingFileError, require
from .rmt_backbone import SeqzooBackbone, as_backbone
from .sampling import append_token

IGNORE = -100
PLACEMENTS = ("encoder", "read_write")
ATTN_MASKS = ("causal", "rmt")
ALIGNMENTS = ("left", "right", "center")
CHECKPOINTS = ("none", "segment", "memory_replay")
TASKS = ("lm", "classification")
POOLS = ("cls", "mean_mem", "mean_tokens", "last_token")
RMT_CONFIG_NAME = "rmt_config.json"
RMT_WEIGHTS_NAME = "rmt.safetensors"


@dataclass
class RMTConfig:
    """How the wrapper cuts, lays out and trains over segments (docs/rmt.md). ``None`` = from the backbone."""

    num_mem_tokens: int = 10
    segment_size: int = 512
    placement: str | None = None  # "encoder" | "read_write"; default: read_write iff backbone.causal
    attn_mask: str = "causal"  # "causal" | "rmt" (bidirectional memory blocks; needs supports_custom_mask)
    memory_positions: str = "sequential"
    segment_alignment: str | None = None  # "left" | "right" | "center"; default left (read_write), right (encoder)
    bptt_depth: int = -1  # -1: full BPTT; k >= 0: only the last k hand-overs carry gradient
    bptt_keep_first: bool = False  # also keep hand-over 1 (segment 0 -> 1), as the authors' RecurrentWrapper does
    checkpoint: str = "none"  # "none" | "segment" | "memory_replay" (train with backward_mrbp)
    task: str | None = None  # "lm" | "classification"; default lm for read_write, classification for encoder
    num_labels: int | None = None
    pool: str | None = None  # classification pooling; default "cls" (encoder), "mean_mem" (read_write)
    loss_segments: str = "last"  # classification: "last" | "all"
    max_n_segments: int | None = None
    memory_slot_emb: bool = False  # add a learned (m, D) table to the incoming memory at every segment >= 1
    write_init: str = "memory"  # "memory": write slots get M_t as input; "learned": a second learned table
    carry_backbone_state: bool = False  # also pass the backbone's mixer states (detached) across segments
    reset_memory: bool = False  # ablation: every segment starts again from M_0 (memory carries nothing)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RMTConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise InputError(f"unknown RMTConfig field(s) {sorted(unknown)}; known fields: {sorted(known)}")
        return cls(**d)


@dataclass
class RMTOutput:
    loss: torch.Tensor | None  # token-weighted mean CE (LM) or the head's CE (classification)
    logits: torch.Tensor | None  # (B, T, vocab) for LM (if requested), (B, num_labels) for classification
    memory: torch.Tensor | None  # (B, m, D) memory after the last segment (if return_memory)
    segment_losses: torch.Tensor | None  # (N,) detached per-segment losses
    n_segments: int


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def segment_bounds(T: int, L: int, alignment: str) -> list[tuple[int, int]]:
    """``[(start, stop)]`` of the N = ceil(T / L) segments of a length-T input."""
    N = math.ceil(T / L)
    if alignment == "left":  # last segment may be short
        return [(i * L, min((i + 1) * L, T)) for i in range(N)]
    if alignment == "right":  # first segment may be short, the last is full
        first = T - (N - 1) * L
        return [(0, first)] + [(first + i * L, first + (i + 1) * L) for i in range(N - 1)]
    if alignment == "center":  # N balanced chunks, each at most ceil(T / N) <= L tokens
        base, extra = divmod(T, N)
        sizes = [base + (1 if i < extra else 0) for i in range(N)]
        starts = [sum(sizes[:i]) for i in range(N)]
        return [(s, s + n) for s, n in zip(starts, sizes)]
    raise InputError(f"segment_alignment must be one of {ALIGNMENTS}, got {alignment!r}")


def read_write_mask(m: int, L: int, kind: str, device=None) -> torch.Tensor:
    """Boolean ``(L + 2m, L + 2m)`` mask (True = may attend) of the read/write layout (Bulatov et al., arXiv:2207.06881, §3)."""
    n = L + 2 * m
    mask = torch.ones(n, n, dtype=torch.bool, device=device).tril()  # causal over [read ; segment ; write]
    if kind == "rmt":
        mask[:m, :m] = True  # read block bidirectional
        mask[m + L :, m + L :] = True  # write block bidirectional
    elif kind != "causal":
        raise InputError(f"attn_mask must be one of {ATTN_MASKS}, got {kind!r}")
    return mask


def _f32(x: torch.Tensor) -> torch.Tensor:
    """Losses in at least fp32 (float64 stays float64 for the exactness tests)."""
    return x if x.dtype == torch.float64 else x.float()


def _detach_tree(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach()
    if isinstance(x, (list, tuple)):
        return type(x)(_detach_tree(v) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: _detach_tree(getattr(x, f.name)) for f in dataclasses.fields(x)})
    return x


class RMT(nn.Module):
    """Wrap ``backbone`` (seqzoo model, Hugging Face model, or an ``RMTBackbone``) with recurrent memory."""

    def __init__(self, backbone: Any, config: RMTConfig | None = None, **overrides: Any):
        super().__init__()
        if config is None:
            config = RMTConfig(**overrides)
        elif overrides:
            config = dataclasses.replace(config, **overrides)
        if not isinstance(config, RMTConfig):
            raise InputError(f"config must be an RMTConfig, got {type(config).__name__}")
        self.backbone = as_backbone(backbone)
        self.config = self._resolve(config)
        c, bb = self.config, self.backbone
        D, m = int(bb.d_model), c.num_mem_tokens
        self.d_model = D
        std = float(bb.embed_std()) if hasattr(bb, "embed_std") else 0.02
        std = std if std > 0 and math.isfinite(std) else 0.02
        # every slot initialised independently: identical slots would stay identical (distinct slots)
        self.memory = nn.Parameter(torch.randn(m, D) * std) if m > 0 else None
        self.slot_emb = nn.Parameter(torch.randn(m, D) * std) if (c.memory_slot_emb and m > 0) else None
        self.write_table = nn.Parameter(torch.randn(m, D) * std) if (c.write_init == "learned" and m > 0) else None
        own_cls = c.placement == "encoder" and c.pool == "cls" and getattr(bb, "cls_embed", None) is None
        self.cls_token = nn.Parameter(torch.randn(D) * std) if own_cls else None
        self.head = nn.Linear(D, c.num_labels) if c.task == "classification" else None

    # ---------------------------------------------------------------- config
    def _resolve(self, c: RMTConfig) -> RMTConfig:
        bb = self.backbone
        causal = bool(bb.causal)
        m, L = c.num_mem_tokens, c.segment_size
        if not _is_int(m) or m < 0:
            raise InputError(f"num_mem_tokens must be an int >= 0, got {m!r}")
        if not _is_int(L) or L < 1:
            raise InputError(f"segment_size must be an int >= 1, got {L!r}")
        if L <= m:
            raise InputError(
                f"segment_size ({L}) must be larger than num_mem_tokens ({m}): memory must be smaller than a segment"
            )
        placement = c.placement or ("read_write" if causal else "encoder")
        if placement not in PLACEMENTS:
            raise InputError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        if placement == "encoder" and causal:
            raise InputError(
                "placement='encoder' needs a bidirectional backbone: with a causal backbone the memory "
                "slots, placed first, cannot see the segment; use placement='read_write'"
            )
        task = c.task or ("lm" if placement == "read_write" else "classification")
        if task not in TASKS:
            raise InputError(f"task must be one of {TASKS}, got {task!r}")
        if task == "lm" and not causal:
            raise InputError("task='lm' needs a causal backbone (backbone.causal is False)")
        if task == "lm" and placement == "encoder":
            raise InputError("task='lm' needs placement='read_write'")
        if task == "classification" and (not _is_int(c.num_labels) or c.num_labels < 2):
            raise InputError(f"num_labels must be an int >= 2 for task='classification', got {c.num_labels!r}")
        pool = c.pool or ("cls" if placement == "encoder" else "mean_mem")
        if task == "lm":
            pool = c.pool
        elif pool not in POOLS:
            raise InputError(f"pool must be one of {POOLS}, got {pool!r}")
        if task == "classification" and pool == "cls" and placement != "encoder":
            raise InputError(
                "pool='cls' exists only with placement='encoder'; use 'mean_mem', 'mean_tokens' or 'last_token'"
            )
        if task == "classification" and pool == "mean_mem" and m == 0:
            raise InputError("pool='mean_mem' needs num_mem_tokens >= 1")
        if c.loss_segments not in ("last", "all"):
            raise InputError(f"loss_segments must be 'last' or 'all', got {c.loss_segments!r}")
        if c.attn_mask not in ATTN_MASKS:
            raise InputError(f"attn_mask must be one of {ATTN_MASKS}, got {c.attn_mask!r}")
        if c.attn_mask == "rmt":
            if placement != "read_write":
                raise InputError("attn_mask='rmt' applies to placement='read_write' only")
            if not getattr(bb, "supports_custom_mask", False):
                raise InputError(
                    f"attn_mask='rmt' needs a backbone that accepts an explicit (T, T) mask; "
                    f"{type(bb).__name__} has supports_custom_mask=False (use attn_mask='causal')"
                )
        if c.memory_positions != "sequential":
            raise InputError(
                f"memory_positions must be 'sequential' (the only layout implemented), got {c.memory_positions!r}"
            )
        align = c.segment_alignment or ("left" if placement == "read_write" else "right")
        if align not in ALIGNMENTS:
            raise InputError(f"segment_alignment must be one of {ALIGNMENTS}, got {align!r}")
        if not _is_int(c.bptt_depth) or c.bptt_depth < -1:
            raise InputError(f"bptt_depth must be an int >= -1 (-1 = full BPTT), got {c.bptt_depth!r}")
        require(
            isinstance(c.bptt_keep_first, bool), f"bptt_keep_first must be True or False, got {c.bptt_keep_first!r}"
        )
        if c.checkpoint not in CHECKPOINTS:
            raise InputError(f"checkpoint must be one of {CHECKPOINTS}, got {c.checkpoint!r}")
        if c.carry_backbone_state and (c.checkpoint != "none" or placement != "read_write"):
            raise InputError("carry_backbone_state=True needs checkpoint='none' and placement='read_write'")
        if c.max_n_segments is not None and (not _is_int(c.max_n_segments) or c.max_n_segments < 1):
            raise InputError(f"max_n_segments must be None or an int >= 1, got {c.max_n_segments!r}")
        if c.write_init not in ("memory", "learned"):
            raise InputError(f"write_init must be 'memory' or 'learned', got {c.write_init!r}")
        d = bb.d_model
        if not _is_int(d) or d < 1:
            raise InputError(f"backbone.d_model must be a positive int, got {d!r}")
        n_special = self._n_special(placement, pool)
        need = L + 2 * m if placement == "read_write" else L + m + n_special
        max_pos = getattr(bb, "max_positions", None)
        if max_pos is not None and need > max_pos:
            what = (
                "segment_size + 2*num_mem_tokens"
                if placement == "read_write"
                else "segment_size + num_mem_tokens + specials"
            )
            raise InputError(
                f"{what} = {L} + {m} memory + specials = {need} exceeds the backbone's max_positions={max_pos}"
            )
        if isinstance(bb, SeqzooBackbone):
            windows = [getattr(b.mixer, "window", None) for b in bb.model.blocks]
            if all(w is not None for w in windows) and max(windows) < L + m:
                warnings.warn(
                    f"every layer is sliding-window attention with window {max(windows)} < segment_size + "
                    f"num_mem_tokens = {L + m}: far tokens cannot reach the read memory",
                    stacklevel=3,
                )
        if c.task == "lm" and not hasattr(bb, "lm_head"):
            raise InputError("task='lm' needs a backbone with lm_head")
        return dataclasses.replace(c, placement=placement, task=task, pool=pool, segment_alignment=align)

    def _n_special(self, placement: str, pool: str) -> int:
        if placement != "encoder":
            return 0
        bb = self.backbone
        n = 1 if (pool == "cls" or getattr(bb, "cls_embed", None) is not None) else 0  # [CLS] row
        n += 2 * int(getattr(bb, "sep_embed", None) is not None)
        return n

    # ------------------------------------------------------------ validation
    def _check_inputs(self, input_ids, labels, labels_mask, attention_mask, memory):
        c = self.config
        if (
            not isinstance(input_ids, torch.Tensor)
            or input_ids.is_floating_point()
            or input_ids.is_complex()
            or input_ids.dtype == torch.bool
        ):
            raise InputError(
                f"input_ids must be an integer tensor of shape (B, T), got {getattr(input_ids, 'dtype', type(input_ids))}"
            )
        if input_ids.dim() != 2:
            raise InputError(f"input_ids must have shape (B, T), got {tuple(input_ids.shape)}")
        B, T = input_ids.shape
        if T == 0:
            raise InputError("input_ids must hold at least one token (T = 0)")
        N = math.ceil(T / c.segment_size)
        if c.max_n_segments is not None and N > c.max_n_segments:
            raise InputError(
                f"input of T={T} tokens needs N={N} segments of segment_size={c.segment_size}, "
                f"more than max_n_segments={c.max_n_segments}"
            )
        if labels is not None:
            if not isinstance(labels, torch.Tensor) or labels.is_floating_point():
                raise InputError("labels must be an integer tensor")
            if c.task == "lm":
                if labels.shape != input_ids.shape:
                    raise InputError(
                        f"labels must have the shape of input_ids {tuple(input_ids.shape)} for task='lm', "
                        f"got {tuple(labels.shape)}"
                    )
            else:
                if labels.shape != (B,):
                    raise InputError(
                        f"labels must have shape (B,)=({B},) for task='classification', got {tuple(labels.shape)}"
                    )
                if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= c.num_labels):
                    raise InputError(
                        f"labels must lie in [0, num_labels={c.num_labels}), got range "
                        f"[{int(labels.min())}, {int(labels.max())}]"
                    )
        if labels_mask is not None and (labels_mask.shape != input_ids.shape or labels_mask.dtype != torch.bool):
            raise InputError(
                f"labels_mask must be a bool tensor of shape {tuple(input_ids.shape)}, got "
                f"{labels_mask.dtype} {tuple(labels_mask.shape)}"
            )
        if attention_mask is not None and attention_mask.shape != input_ids.shape:
            raise InputError(
                f"attention_mask must have shape {tuple(input_ids.shape)}, got {tuple(attention_mask.shape)}"
            )
        if memory is not None:
            m, D = c.num_mem_tokens, self.d_model
            if not isinstance(memory, torch.Tensor) or memory.shape not in ((B, m, D), (m, D)):
                raise InputError(
                    f"memory must have shape (B, m, D)=({B}, {m}, {D}) or (m, D)=({m}, {D}), got "
                    f"{tuple(getattr(memory, 'shape', ()))}"
                )
        return B, T

    # ---------------------------------------------------------------- pieces
    def initial_memory(self, B: int, dtype=None, device=None) -> torch.Tensor:
        """M_0 = P expanded over the batch ``(B, m, D)`` (expand: P's gradient sums over the batch)."""
        m, D = self.config.num_mem_tokens, self.d_model
        if self.memory is None:
            return torch.zeros(B, 0, D, dtype=dtype, device=device)
        mem = self.memory.expand(B, m, D)
        return mem.to(dtype) if dtype is not None else mem

    def _start_memory(self, memory, B, dtype, device):
        if memory is None:
            return self.initial_memory(B, dtype, device)
        mem = memory.expand(B, *memory.shape[-2:]) if memory.dim() == 2 else memory
        return mem.to(dtype)

    def _read_block(self, mem: torch.Tensor, tau: int) -> torch.Tensor:
        if self.slot_emb is not None and tau >= 1:
            return mem + self.slot_emb.to(mem.dtype)
        return mem

    def _build(self, mem: torch.Tensor, x: torch.Tensor, tau: int):
        """Concatenate the layout; return ``(inputs (B, T', D), token slice, memory slice, cls row or None)``."""
        B, Lt, D = x.shape
        m = mem.shape[1]
        read = self._read_block(mem, tau)
        if self.config.placement == "read_write":
            write = self.write_table.to(x.dtype).expand(B, m, D) if self.write_table is not None else mem
            inp = torch.cat([read, x, write], dim=1)  # (B, m + L_t + m, D)
            return inp, slice(m, m + Lt), slice(m + Lt, m + Lt + m), None
        bb = self.backbone
        parts, cls_row = [], None
        cls = getattr(bb, "cls_embed", None)
        cls = cls() if callable(cls) else self.cls_token
        if cls is not None:
            parts.append(cls.to(x.dtype).expand(B, 1, D))
            cls_row = 0
        mem_start = len(parts)  # 1 after a [CLS] row, else 0
        parts.append(read)
        sep = getattr(bb, "sep_embed", None)
        sep = sep() if callable(sep) else None
        if sep is not None:
            parts.append(sep.to(x.dtype).expand(B, 1, D))
        tok_start = mem_start + m + (sep is not None)
        parts.append(x)
        if sep is not None:
            parts.append(sep.to(x.dtype).expand(B, 1, D))
        inp = torch.cat(parts, dim=1)  # (B, [cls] + m + [sep] + L_t + [sep], D)
        return inp, slice(tok_start, tok_start + Lt), slice(mem_start, mem_start + m), cls_row

    def _padding_mask(self, kpm_seg: torch.Tensor | None, inp_len: int, tok: slice) -> torch.Tensor | None:
        if kpm_seg is None:
            return None
        B = kpm_seg.shape[0]
        full = torch.ones(B, inp_len, dtype=torch.bool, device=kpm_seg.device)  # memory/specials never masked
        full[:, tok] = kpm_seg.bool()
        return full

    def _cell(self, mem, ids_seg, tau, kpm_seg=None, states=None):
        """One segment: ``(token hidden (B, L_t, D), new memory (B, m, D), pooled (B, D) or None, states)``."""
        c = self.config
        x = self.backbone.embed(ids_seg)  # (B, L_t, D)
        mem = mem.to(x.dtype)
        inp, tok, mem_sl, cls_row = self._build(mem, x, tau)
        kpm = self._padding_mask(kpm_seg, inp.shape[1], tok)
        mask = None
        if c.attn_mask == "rmt":
            mask = read_write_mask(mem.shape[1], x.shape[1], "rmt", device=x.device)
        new_states = None
        if c.carry_backbone_state:
            hidden, new_states = self.backbone.forward_embeds(
                inp, attn_mask=mask, key_padding_mask=kpm, states=states, return_states=True
            )
        elif c.checkpoint == "segment" and torch.is_grad_enabled():
            hidden = torch_checkpoint(
                lambda z: self.backbone.forward_embeds(z, attn_mask=mask, key_padding_mask=kpm),
                inp,
                use_reentrant=False,
            )
        else:
            hidden = self.backbone.forward_embeds(inp, attn_mask=mask, key_padding_mask=kpm)
        tok_h = hidden[:, tok]  # (B, L_t, D)
        new_mem = hidden[:, mem_sl]  # (B, m, D): final hidden states at the memory (write) slots
        if kpm_seg is not None:  # a sample without a real token in this segment keeps its memory
            active = kpm_seg.bool().any(dim=1)[:, None, None]  # (B, 1, 1)
            new_mem = torch.where(active, new_mem, mem)
        pooled = None
        if c.task == "classification":
            if c.pool == "cls":
                pooled = hidden[:, cls_row]
            elif c.pool == "mean_mem":
                pooled = new_mem.mean(dim=1)
            elif c.pool == "mean_tokens":
                if kpm_seg is None:
                    pooled = tok_h.mean(dim=1)
                else:
                    w = kpm_seg.to(tok_h.dtype)[..., None]  # (B, L_t, 1)
                    pooled = (tok_h * w).sum(1) / w.sum(1).clamp_min(1)
            else:  # last_token
                pooled = tok_h[:, -1]
        return tok_h, new_mem, pooled, new_states

    def _segment_loss(self, tok_h, pooled, lab_seg, labels, count, tau, N, need_logits=True):
        """(weighted loss contribution or None, detached segment loss or None, logits)."""
        c = self.config
        if c.task == "lm":
            if lab_seg is None:
                return None, None, self.backbone.lm_head(tok_h)  # (B, L_t, V)
            scored = lab_seg != IGNORE  # (B, L_t)
            n_here = int(scored.sum())
            if need_logits:
                logits = self.backbone.lm_head(tok_h)  # (B, L_t, V)
                flat_logits, flat_labels = _f32(logits).flatten(0, 1), lab_seg.flatten().long()
            else:  # the head only on scored rows (answer-only losses): same loss, far less compute
                logits = None
                flat_logits, flat_labels = _f32(self.backbone.lm_head(tok_h[scored])), lab_seg[scored].long()
            ce = F.cross_entropy(flat_logits, flat_labels, ignore_index=IGNORE, reduction="sum")
            return ce / count, (ce.detach() / max(n_here, 1)), logits
        logits = self.head(pooled)  # (B, num_labels)
        if labels is None:
            return None, None, logits
        ce = F.cross_entropy(_f32(logits), labels.long())
        if c.loss_segments == "last":
            contrib = ce if tau == N - 1 else None
        else:
            contrib = ce / N
        return contrib, ce.detach(), logits

    def _prepare(self, input_ids, labels, labels_mask, attention_mask, memory, shift_labels):
        B, T = self._check_inputs(input_ids, labels, labels_mask, attention_mask, memory)
        c = self.config
        if labels is not None and c.task == "lm":
            labels = labels.long()
            if shift_labels:  # shift once over the whole sequence, then split (docs/rmt.md)
                labels = torch.cat([labels[:, 1:], labels.new_full((B, 1), IGNORE)], dim=1)
                if labels_mask is not None:
                    labels_mask = torch.cat([labels_mask[:, 1:], labels_mask.new_zeros(B, 1)], dim=1)
            if labels_mask is not None:
                labels = labels.masked_fill(~labels_mask, IGNORE)
            if attention_mask is not None:
                labels = labels.masked_fill(~attention_mask.bool(), IGNORE)
        bounds = segment_bounds(T, c.segment_size, c.segment_alignment)
        count = max(int((labels != IGNORE).sum()), 1) if (labels is not None and c.task == "lm") else 1
        return B, T, labels, bounds, count

    def handover_kept(self, tau: int, N: int) -> bool:
        """Hand-over tau (memory M_tau entering segment tau, tau >= 1) carries gradient iff tau >= N - k, or
        tau == 1 with ``bptt_keep_first`` (the authors' code never detaches after segment 0; docs/rmt.md)."""
        k = self.config.bptt_depth
        return k < 0 or tau >= N - k or (self.config.bptt_keep_first and tau == 1)

    # --------------------------------------------------------------- forward
    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        labels_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        return_memory: bool = False,
        return_logits: bool = True,
        shift_labels: bool = False,
        head: str | None = None,
    ) -> RMTOutput:
        """Run all segments. LM ``labels`` are aligned with positions (seqzoo convention: ``labels[:, t]`` is the
        target at t, -100 = unscored); ``shift_labels=True`` takes Hugging Face-style labels (= input_ids) instead."""
        c = self.config
        if head is not None and head != {"lm": "lm", "classification": "cls"}[c.task]:
            raise InputError(f"head={head!r} does not match this RMT's task={c.task!r} (use 'cls' for classification)")
        B, _, labels, bounds, count = self._prepare(
            input_ids, labels, labels_mask, attention_mask, memory, shift_labels
        )
        N = len(bounds)
        dtype = self.backbone.embed(input_ids[:, :1]).dtype
        mem0 = self._start_memory(memory, B, dtype, input_ids.device)
        mem = mem0
        # a last-segment-only loss gets no gradient from segments whose output memory is detached: run them
        # without a graph (docs/rmt.md "Truncated BPTT"); gradients are unchanged
        shortcut = (
            c.task == "classification"
            and c.loss_segments == "last"
            and c.bptt_depth >= 0
            and torch.is_grad_enabled()
            and getattr(self, "no_grad_shortcut", True)
        )
        loss, seg_losses, all_logits, states, cls_logits = None, [], [], None, None
        for tau, (a, b) in enumerate(bounds):
            if tau >= 1:
                if c.reset_memory:
                    mem = mem0
                elif not self.handover_kept(tau, N):
                    mem = mem.detach()
            kpm_seg = attention_mask[:, a:b] if attention_mask is not None else None
            lab_seg = labels[:, a:b] if (labels is not None and c.task == "lm") else None
            no_grad = shortcut and tau < N - 1 and not self.handover_kept(tau + 1, N)
            with torch.set_grad_enabled(torch.is_grad_enabled() and not no_grad):
                tok_h, new_mem, pooled, states = self._cell(mem, input_ids[:, a:b], tau, kpm_seg, states)
                contrib, seg_loss, logits = self._segment_loss(
                    tok_h, pooled, lab_seg, labels, count, tau, N, need_logits=return_logits
                )
            if states is not None:
                states = _detach_tree(states)
            if contrib is not None:
                loss = contrib if loss is None else loss + contrib
            if seg_loss is not None:
                seg_losses.append(seg_loss)
            if c.task == "lm":
                if return_logits:
                    all_logits.append(logits)
            else:
                cls_logits = logits
            mem = new_mem
        if c.task == "lm":
            out_logits = torch.cat(all_logits, dim=1) if return_logits else None  # (B, T, V)
        else:
            out_logits = cls_logits  # head on the last segment (B, num_labels)
        return RMTOutput(
            loss=loss,
            logits=out_logits,
            memory=mem if return_memory else None,
            segment_losses=torch.stack(seg_losses) if seg_losses else None,
            n_segments=N,
        )

    # ------------------------------------------------------ memory replay BPTT
    def backward_mrbp(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        labels_mask: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        memory: torch.Tensor | None = None,
        loss_scale: float = 1.0,
        shift_labels: bool = False,
    ) -> torch.Tensor:
        """Memory-replay backpropagation (Memformer, arXiv:2010.06891): peak activation memory of one segment.

        Leaves ``.grad`` as ``forward(...).loss * loss_scale`` followed by ``backward()`` would and returns the
        detached loss. Dropout masks are reproduced by restoring each segment's RNG state.
        """
        if labels is None:
            raise InputError("backward_mrbp needs labels")
        c = self.config
        if c.carry_backbone_state:
            raise InputError("backward_mrbp does not support carry_backbone_state=True")
        B, _, labels, bounds, count = self._prepare(
            input_ids, labels, labels_mask, attention_mask, memory, shift_labels
        )
        N = len(bounds)
        dtype = self.backbone.embed(input_ids[:, :1]).dtype
        cuda = input_ids.is_cuda
        mems, rngs = [], []
        with torch.no_grad():
            mem = self._start_memory(memory, B, dtype, input_ids.device)
            for tau, (a, b) in enumerate(bounds):
                if tau >= 1 and c.reset_memory:
                    mem = self._start_memory(memory, B, dtype, input_ids.device)
                mems.append(mem)
                rngs.append((torch.get_rng_state(), torch.cuda.get_rng_state() if cuda else None))
                kpm_seg = attention_mask[:, a:b] if attention_mask is not None else None
                _, mem, _, _ = self._cell(mem, input_ids[:, a:b], tau, kpm_seg)
        total = torch.zeros((), dtype=torch.float64, device=input_ids.device)
        g = None
        for tau in range(N - 1, -1, -1):
            a, b = bounds[tau]
            from_start = tau == 0 or c.reset_memory
            m_in = (
                self._start_memory(memory, B, dtype, input_ids.device)
                if from_start
                else mems[tau].detach().requires_grad_()
            )
            cpu_rng, cuda_rng = rngs[tau]
            torch.set_rng_state(cpu_rng)
            if cuda_rng is not None:
                torch.cuda.set_rng_state(cuda_rng)
            kpm_seg = attention_mask[:, a:b] if attention_mask is not None else None
            lab_seg = labels[:, a:b] if c.task == "lm" else None
            tok_h, new_mem, pooled, _ = self._cell(m_in, input_ids[:, a:b], tau, kpm_seg)
            contrib, _, _ = self._segment_loss(tok_h, pooled, lab_seg, labels, count, tau, N, need_logits=False)
            obj = None
            if contrib is not None:
                total += contrib.detach().double()
                obj = contrib * loss_scale
            if g is not None:
                inner = (new_mem * g.to(new_mem.dtype)).sum()
                obj = inner if obj is None else obj + inner
            if obj is not None and obj.requires_grad:
                obj.backward()
            keep = tau >= 1 and not from_start and self.handover_kept(tau, N)
            g = m_in.grad if keep else None
        return total

    # ------------------------------------------------------------ generation
    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        eos_token_id: int | None = None,
        memory: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Greedy decoding with left-aligned segments: the prompt's full segments build the memory, the tail is
        decoded with the backbone's incremental state; a full tail rolls over into a fresh segment."""
        c = self.config
        if c.task != "lm" or c.placement != "read_write":
            raise InputError("generate() needs task='lm' and placement='read_write'")
        if c.attn_mask != "causal" or c.carry_backbone_state:
            raise InputError("generate() supports attn_mask='causal' and carry_backbone_state=False")
        if not _is_int(max_new_tokens) or max_new_tokens < 0:
            raise InputError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        B, T = self._check_inputs(input_ids, None, None, None, memory)
        L = c.segment_size
        was_training = self.training
        self.eval()
        dtype = self.backbone.embed(input_ids[:, :1]).dtype
        mem0 = self._start_memory(memory, B, dtype, input_ids.device)
        mem = mem0
        n_pre = (T - 1) // L  # full segments before the tail (the tail holds 1..L tokens)
        for tau in range(n_pre):
            if tau >= 1 and c.reset_memory:
                mem = mem0
            _, mem, _, _ = self._cell(mem, input_ids[:, tau * L : (tau + 1) * L], tau)
        tau = n_pre
        if tau >= 1 and c.reset_memory:
            mem = mem0
        cur = input_ids[:, n_pre * L :]
        logits, st = self._prefill(mem, cur, tau)
        ids = input_ids
        finished = torch.zeros(B, dtype=torch.bool, device=ids.device)
        for _ in range(max_new_tokens):
            nxt = logits.argmax(-1)  # (B,)
            ids, nxt, done = append_token(ids, nxt, finished, eos_token_id)
            if done:
                break
            if cur.shape[1] < L:  # continue the current segment with the backbone's cache
                cur = torch.cat([cur, nxt[:, None]], dim=1)
                h, st = self.backbone.forward_embeds(self.backbone.embed(nxt[:, None]), states=st, return_states=True)
                logits = self.backbone.lm_head(h[:, -1])
            else:  # segment full: write its memory, start a fresh segment with the new token
                _, mem, _, _ = self._cell(mem, cur, tau)
                tau += 1
                if c.reset_memory:
                    mem = mem0
                cur = nxt[:, None]
                logits, st = self._prefill(mem, cur, tau)
        self.train(was_training)
        return ids

    def _prefill(self, mem, cur, tau):
        x = self.backbone.embed(cur)  # (B, L_t, D)
        inp = torch.cat([self._read_block(mem.to(x.dtype), tau), x], dim=1)  # (B, m + L_t, D): no write block
        h, st = self.backbone.forward_embeds(inp, states=None, return_states=True)
        return self.backbone.lm_head(h[:, -1]), st

    # ------------------------------------------------------- parameter-efficient
    def freeze_backbone(self, keep: tuple[str, ...] = ("lora_",)) -> int:
        """Freeze the backbone except parameters whose name contains one of ``keep`` (LoRA adapters by default);
        memory, [CLS] and head stay trainable. Returns the number of trainable parameters."""
        for name, p in self.named_parameters():
            if name.startswith("backbone."):
                p.requires_grad_(any(k in name for k in keep))
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    # ----------------------------------------------------------- save / load
    def rmt_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.state_dict().items() if not k.startswith("backbone.")}

    def save_pretrained(self, directory: str | Path) -> Path:
        """``rmt_config.json`` + ``rmt.safetensors`` (memory, head, ...) + the backbone in ``backbone/``."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / RMT_CONFIG_NAME).write_text(json.dumps(self.config.to_dict(), indent=2, sort_keys=True) + "\n")
        save_file({k: v.contiguous() for k, v in self.rmt_state_dict().items()}, str(directory / RMT_WEIGHTS_NAME))
        inner = (
            self.backbone.model if isinstance(self.backbone, SeqzooBackbone) else getattr(self.backbone, "model", None)
        )
        if inner is None or not hasattr(inner, "save_pretrained"):
            raise InputError("save_pretrained needs a backbone with save_pretrained (seqzoo or Hugging Face model)")
        inner.save_pretrained(directory / "backbone")
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> RMT:
        """Restore an RMT around a seqzoo backbone saved by ``save_pretrained``."""
        from safetensors.torch import load_file

        from .base import SeqzooModel

        directory = Path(directory)
        cfg_path = directory / RMT_CONFIG_NAME
        if not cfg_path.is_file():
            raise MissingFileError(f"{cfg_path} not found")
        backbone = SeqzooModel.from_pretrained(directory / "backbone")
        model = cls(backbone, RMTConfig.from_dict(json.loads(cfg_path.read_text())))
        missing, unexpected = model.load_state_dict(load_file(str(directory / RMT_WEIGHTS_NAME)), strict=False)
        missing = [k for k in missing if not k.startswith("backbone.")]
        if missing or unexpected:
            raise InputError(f"RMT weights mismatch: missing {missing}, unexpected {unexpected}")
        return model
