"""Language modelling over local text files, through a memory-mapped token array.

The corpus (a file, a directory of ``*.txt``/``*.raw`` files, or a list of paths) is tokenised once into
``<cache_dir>/<hash>.tokens`` (uint16 or uint32, written in chunks, so a corpus larger than RAM works) and
then read through ``numpy.memmap``. The first ``1 - valid_fraction`` of the tokens is the train split, the
rest the valid split (``test`` reads the valid tokens too unless a separate ``test_path`` is given).
``build(n, seed, split)`` returns ``n`` windows at seeded random offsets: ``inputs = tok[o:o+T]``,
``targets = tok[o+1:o+T+1]``. ``windows(split)`` gives the non-overlapping windows for exact evaluation.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import InputError, MissingFileError
from .base import Task, register_task, split_seed
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
    return Path(os.environ.get("SEQZOO_CACHE", Path.home() / ".cache" / "seqzoo")) / "tokens"


def tokenize_to_memmap(paths: list[Path], tokenizer, cache_dir: str | Path | None = None) -> np.memmap:
    """Tokenise ``paths`` once (cached by content hash and tokenizer) and return the token array."""
    h = hashlib.sha256(json.dumps(tokenizer.spec(), sort_keys=True).encode())
    for p in paths:
        st = p.stat()
        h.update(f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    dtype = np.uint16 if tokenizer.vocab_size <= 65536 else np.uint32
    out = cache / f"{h.hexdigest()[:24]}.{np.dtype(dtype).name}.tokens"
    if not out.exists():
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            for p in paths:
                with open(p, encoding="utf-8", errors="replace") as src:
                    while chunk := src.read(CHUNK_CHARS):
                        np.asarray(tokenizer.encode(chunk), dtype=dtype).tofile(f)
        os.replace(tmp, out)  # atomic: a half-written cache is never read
    return np.memmap(out, dtype=dtype, mode="r")


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
    ):
        if not path:
            raise InputError("task 'text' needs path=: a text file, a directory of .txt files, or a list of them")
        if not 0.0 < valid_fraction < 1.0:
            raise InputError(f"valid_fraction must be in (0, 1), got {valid_fraction}")
        if seq_len < 1:
            raise InputError(f"seq_len must be >= 1, got {seq_len}")
        self.path, self.seq_len, self.valid_fraction = path, seq_len, valid_fraction
        self.tokenizer_name, self.bpe_dir, self.test_path, self.cache_dir = tokenizer, bpe_dir, test_path, cache_dir
        self.tokenizer = make_tokenizer(tokenizer, bpe_dir)
        self.vocab_size = self.tokenizer.vocab_size
        tokens = tokenize_to_memmap(resolve_paths(path), self.tokenizer, cache_dir)
        cut = int(len(tokens) * (1 - valid_fraction))
        self._splits = {"train": tokens[:cut], "valid": tokens[cut:]}
        self._splits["test"] = (
            tokenize_to_memmap(resolve_paths(test_path), self.tokenizer, cache_dir)
            if test_path
            else self._splits["valid"]
        )
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
        }

    def tokens(self, split: str) -> np.ndarray:
        split_seed(0, split)  # validates the name
        return self._splits[split]

    def _windows_at(self, toks: np.ndarray, offsets: np.ndarray, T: int):
        idx = offsets[:, None] + np.arange(T + 1)[None, :]  # (n, T+1)
        block = torch.from_numpy(np.asarray(toks[idx], dtype=np.int64))
        return block[:, :-1].contiguous(), block[:, 1:].contiguous()

    def build(self, n: int, seed: int, split: str = "train", seq_len: int | None = None):
        T = seq_len or self.seq_len
        toks = self.tokens(split)
        rng = np.random.default_rng(split_seed(seed, split))
        offsets = rng.integers(0, len(toks) - T, size=n)
        return self._windows_at(toks, offsets, T)

    def windows(self, split: str = "valid", seq_len: int | None = None, max_windows: int | None = None):
        """Consecutive non-overlapping windows covering the split (for exact held-out loss)."""
        T = seq_len or self.seq_len
        toks = self.tokens(split)
        n = (len(toks) - 1) // T
        if max_windows is not None:
            n = min(n, max_windows)
        if n == 0:
            raise InputError(f"the {split} split ({len(toks)} tokens) is shorter than one window of {T + 1}")
        return self._windows_at(toks, np.arange(n) * T, T)
