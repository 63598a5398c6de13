"""Language modelling over local text files, through a memory-mapped token array.

The corpus (a file, a directory of ``*.txt``/``*.raw`` files, or a list of paths) is tokenised once into
``<cache_dir>/<hash>.tokens`` (uint16 or uint32, written in chunks, so a corpus larger than RAM works) and
then read through ``numpy.memmap``. The first ``1 - valid_fraction`` of the tokens is the train split, the
rest the valid split (``test`` reads the valid tokens too unless a separate ``test_path`` is given).
``build(n, seed, split)`` returns ``n`` windows at seeded random offsets: ``inputs = tok[o:o+T]``,
``targets = tok[o+1:o+T+1]``. ``windows(split)`` gives the non-overlapping windows for exact evaluation.

Packed documents (the default where the corpus has documents: a folder or list of several files, one document
each, or a ``separator`` string that ends each document; ``packed=False`` turns it off): the cache also holds the
token offset where each document starts (``<hash>.starts`` beside the tokens), the rows stay full windows of the
concatenated stream, and ``build_batch`` gives each row its ``segment_pos`` (position inside the current document,
0 at a start). No target crosses a start: the token that starts a document is not scored from the one before it
(target -100). A separator stays in the text as the last tokens of the document it ends, so ending a document is
learned. Without documents nothing changes (same cache file, same rows, same ``config()``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import settings
from ..errors import InputError, MissingFileError
from .base import IGNORE_INDEX, Batch, Task, register_task, split_seed
from .tokenizers import make_tokenizer

TEXT_SUFFIXES = (".txt", ".raw", ".md")
CHUNK_CHARS = 1 << 22  # tokenise 4M characters at a time


def resolve_paths(path: str | Path | list) -> list[Path]:
    if isinstance(path, (list, tuple)):
        return [p for item in path for p in resolve_paths(item)]
    p = Path(path).expanduser()
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in TEXT_SUFFIXES and f.name.lower() != "readme.md")
        if not files:
            raise InputError(f"no text files ({', '.join(TEXT_SUFFIXES)}) in directory {p}")
        return files
    if p.is_file():
        return [p]
    raise MissingFileError(f"text path {p} does not exist")


def default_cache_dir() -> Path:
    return settings.cache_dir() / "tokens"


def tokenize_to_memmap(paths: list[Path], tokenizer, cache_dir: str | Path | None = None) -> np.memmap:
    """Tokenise ``paths`` once (cached by content hash and tokenizer) and return the token array."""
    return tokenize_corpus(paths, tokenizer, cache_dir, with_starts=False)[0]


def text_pieces(src, separator: str | None):
    """``(text, ends_document)`` pieces of an open text file, at most about ``CHUNK_CHARS`` each.

    Without a separator: the file's chunks as read (the tokenisation the cache always had). With one: each
    document up to and including its separator, found also where it straddles two reads; a document longer than a
    chunk comes in several pieces (its tail of len(separator) - 1 characters held back, as it may begin one).
    """
    if separator is None:
        while chunk := src.read(CHUNK_CHARS):
            yield chunk, False
        return
    buf, hold = "", len(separator) - 1
    while chunk := src.read(CHUNK_CHARS):
        *docs, buf = (buf + chunk).split(separator)
        for doc in docs:
            yield doc + separator, True
        if len(buf) > CHUNK_CHARS:
            cut = len(buf) - hold
            yield buf[:cut], False
            buf = buf[cut:]
    if buf:
        yield buf, False


def tokenize_corpus(
    paths: list[Path],
    tokenizer,
    cache_dir: str | Path | None = None,
    separator: str | None = None,
    with_starts: bool = True,
) -> tuple[np.memmap, np.ndarray]:
    """The token array of ``paths`` and the sorted int64 offsets where documents start (0 first).

    Every file starts a document and, with ``separator``, so does the token after each separator. Both are
    cached by content hash, tokenizer and separator; the starts (``.starts``, int64) are written before the tokens
    are renamed into place, so a tokens file of a corpus with documents always has them (an older cache without
    them is rebuilt). A single file without a separator is one document and keeps the cache it always had;
    ``with_starts=False`` (no packing) reads no starts and returns ``[0]``.
    """
    spec = tokenizer.spec() if separator is None else {**tokenizer.spec(), "separator": separator}
    h = hashlib.sha256(json.dumps(spec, sort_keys=True).encode())
    for p in paths:
        st = p.stat()
        h.update(f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    dtype = np.uint16 if tokenizer.vocab_size <= 65536 else np.uint32
    out = cache / f"{h.hexdigest()[:24]}.{np.dtype(dtype).name}.tokens"
    starts_path = out.with_suffix(".starts")
    documents = with_starts and (len(paths) > 1 or separator is not None)
    if not out.exists() or (documents and not starts_path.exists()):
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        starts, n = [], 0
        with open(tmp, "wb") as f:
            for p in paths:
                starts.append(n)
                with open(p, encoding="utf-8", errors="replace") as src:
                    for piece, ends_document in text_pieces(src, separator):
                        ids = np.asarray(tokenizer.encode(piece), dtype=dtype)
                        ids.tofile(f)
                        n += len(ids)
                        if ends_document:
                            starts.append(n)
        if documents:  # empty files and a separator closing a file give repeats; a start at the very end is none
            starts = np.unique(np.asarray(starts, dtype=np.int64))
            tmp_starts = out.with_suffix(f".starts-tmp{os.getpid()}")
            starts[starts < max(n, 1)].tofile(tmp_starts)
            os.replace(tmp_starts, starts_path)
        os.replace(tmp, out)  # atomic: a half-written cache is never read
    tokens = np.memmap(out, dtype=dtype, mode="r")
    starts = np.fromfile(starts_path, dtype=np.int64) if documents else np.zeros(1, dtype=np.int64)
    return tokens, starts


def split_starts(starts: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The document starts of the token range ``[lo, hi)`` relative to ``lo``: the first is the start of the
    document holding ``lo`` (<= 0: a split may begin inside a document, whose positions count from its start)."""
    first = int(np.searchsorted(starts, lo, side="right")) - 1
    inside = starts[first:]
    return inside[inside < hi] - lo


@register_task("text")
class TextLM(Task):
    def __init__(
        self,
        path: str | list = "",
        seq_len: int = 256,
        tokenizer: str = "byte",
        bpe_dir: str | None = None,
        valid_fraction: float = 0.1,
        test_path: str | list | None = None,
        cache_dir: str | None = None,
        separator: str | None = None,
        packed: bool = True,
    ):
        if not path:
            raise InputError("task 'text' needs path=: a text file, a directory of .txt files, or a list of them")
        if separator is not None and (not isinstance(separator, str) or not separator):
            raise InputError(f"separator must be a non-empty string that ends each document, got {separator!r}")
        if not isinstance(packed, bool):
            raise InputError(f"packed must be true or false, got {packed!r}")
        if separator is not None and not packed:
            raise InputError("separator splits the text into packed documents; it needs packed=true (the default)")
        if not 0.0 < valid_fraction < 1.0:
            raise InputError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
        if seq_len < 1:
            raise InputError(f"seq_len must be >= 1, got {seq_len}")
        self.path, self.seq_len, self.valid_fraction = path, seq_len, valid_fraction
        self.tokenizer_name, self.bpe_dir, self.test_path, self.cache_dir = tokenizer, bpe_dir, test_path, cache_dir
        self.tokenizer = make_tokenizer(tokenizer, bpe_dir)
        self.vocab_size = self.tokenizer.vocab_size
        paths = resolve_paths(path)
        test_paths = resolve_paths(test_path) if test_path else None
        self.separator = separator
        # packing where the corpus has documents; off, a folder trains as before (one stream, no segment_pos)
        self.packed = packed and (separator is not None or len(paths) > 1 or len(test_paths or ()) > 1)
        sep = separator if self.packed else None
        tokens, starts = tokenize_corpus(paths, self.tokenizer, cache_dir, sep, with_starts=self.packed)
        cut = int(len(tokens) * (1 - valid_fraction))
        self._splits = {"train": tokens[:cut], "valid": tokens[cut:]}
        self._starts = {"train": split_starts(starts, 0, cut), "valid": split_starts(starts, cut, len(tokens))}
        if test_paths:
            self._splits["test"], self._starts["test"] = tokenize_corpus(
                test_paths, self.tokenizer, cache_dir, sep, with_starts=self.packed
            )
        else:
            self._splits["test"], self._starts["test"] = self._splits["valid"], self._starts["valid"]
        for name, toks in self._splits.items():
            if len(toks) < seq_len + 1:
                raise InputError(
                    f"the {name} split has {len(toks)} tokens, fewer than seq_len+1={seq_len + 1}; "
                    f"use a shorter seq_len or more text"
                )

    def config(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "seq_len": self.seq_len,
            "tokenizer": self.tokenizer_name,
            "bpe_dir": self.bpe_dir,
            "valid_fraction": self.valid_fraction,
            "test_path": self.test_path,
            # only where they change the rows, so a corpus without documents keeps its configuration (and run key)
            **({"separator": self.separator} if self.separator is not None else {}),
            **({"packed": True} if self.packed else {}),
        }

    def tokens(self, split: str) -> np.ndarray:
        split_seed(0, split)  # validates the name
        return self._splits[split]

    def _windows_at(self, split: str, offsets: np.ndarray, T: int) -> Batch:
        idx = offsets[:, None] + np.arange(T + 1)[None, :]  # (n, T+1)
        block = torch.from_numpy(np.asarray(self.tokens(split)[idx], dtype=np.int64))
        inputs, targets = block[:, :-1].contiguous(), block[:, 1:].contiguous()
        if not self.packed:
            return Batch(inputs, targets)
        starts = self._starts[split]
        pos = torch.from_numpy(idx - starts[np.searchsorted(starts, idx, side="right") - 1])  # (n, T+1)
        # the first token of a document is not predicted from the document before it
        targets = targets.masked_fill(pos[:, 1:] == 0, IGNORE_INDEX)
        return Batch(inputs, targets, pos[:, :-1].contiguous())

    def _sample(self, n: int, seed: int, split: str, seq_len: int | None) -> Batch:
        T = seq_len or self.seq_len
        toks = self.tokens(split)
        rng = np.random.default_rng(split_seed(seed, split))
        offsets = rng.integers(0, len(toks) - T, size=n)
        return self._windows_at(split, offsets, T)

    def build(self, n: int, seed: int, split: str = "train", seq_len: int | None = None):
        inputs, targets, _ = self._sample(n, seed, split, seq_len)
        return inputs, targets

    def build_batch(self, n: int, seed: int, split: str = "train", seq_len: int | None = None) -> Batch:
        """``build``'s rows with ``segment_pos`` when documents are packed."""
        if not self.packed:  # a subclass that re-maps build (MaskedLM) stays in charge of its rows
            return Batch(*self.build(n, seed, split, seq_len))
        return self._sample(n, seed, split, seq_len)

    def _windows(self, split: str, seq_len: int | None, max_windows: int | None) -> Batch:
        T = seq_len or self.seq_len
        toks = self.tokens(split)
        n = (len(toks) - 1) // T
        if max_windows is not None:
            n = min(n, max_windows)
        if n == 0:
            raise InputError(f"the {split} split ({len(toks)} tokens) is shorter than one window of {T + 1}")
        return self._windows_at(split, np.arange(n) * T, T)

    def windows(self, split: str = "valid", seq_len: int | None = None, max_windows: int | None = None):
        """Consecutive non-overlapping windows covering the split (for exact held-out loss)."""
        inputs, targets, _ = self._windows(split, seq_len, max_windows)
        return inputs, targets

    def windows_batch(self, split: str = "valid", seq_len: int | None = None, max_windows: int | None = None) -> Batch:
        """``windows``' rows with ``segment_pos`` when documents are packed."""
        if not self.packed:  # as in build_batch: a subclass that re-maps windows (MaskedLM) stays in charge
            return Batch(*self.windows(split, seq_len, max_windows))
        return self._windows(split, seq_len, max_windows)
