"""Packed-document test helpers: where a row of ``segment_pos`` cuts into documents."""

import itertools

import torch


def document_pieces(segment_row: torch.Tensor) -> list[tuple[int, int]]:
    """``segment_row (T,)`` -> the ``(t0, t1)`` spans between document starts (0 entries): the first span continues
    a carried state unless the row starts a document at t = 0, every later span is one whole document."""
    T = segment_row.shape[0]
    return list(itertools.pairwise(sorted({0, *(t for t in range(T) if segment_row[t] == 0), T})))


def segment_pos_from_starts(starts_per_row, T: int) -> torch.Tensor:
    """``(B, T)`` positions inside documents that start at the times of ``starts_per_row`` (one set per row)."""
    rows = []
    for starts in starts_per_row:
        pos, p = [], 0
        for t in range(T):
            p = 0 if t in starts else p + 1
            pos.append(p)
        rows.append(pos)
    return torch.tensor(rows)
