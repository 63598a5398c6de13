"""Tokenisers that work offline: raw bytes, and GPT-2 byte-level BPE from its vocab/merges files (passed by path).

The GPT-2 tokeniser follows the published algorithm (Radford et al. 2019): split text with GPT-2's
pre-tokenisation pattern, map each byte to a printable unicode character, then merge the adjacent pair
of lowest merge rank until none applies, and look the pieces up in ``encoder.json``.
"""

from __future__ import annotations

import itertools
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingFileError


class ByteTokenizer:
    """UTF-8 bytes as tokens; vocabulary 256."""

    kind = "byte"
    vocab_size = 256
    eos_token_id = None

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def spec(self) -> dict[str, Any]:
        return {"kind": "byte"}


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(keep, map(chr, chars)))


# GPT-2's pre-tokenisation pattern (contractions, letters, numbers, other symbols, whitespace)
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


class GPT2Tokenizer:
    """Byte-level BPE built from ``encoder.json`` and ``vocab.bpe`` in ``directory``."""

    kind = "gpt2"

    def __init__(self, directory: str | Path):
        import regex  # the \p{L} classes need the `regex` package

        directory = Path(directory)
        enc_path, merges_path = directory / "encoder.json", directory / "vocab.bpe"
        if not enc_path.is_file() or not merges_path.is_file():
            raise MissingFileError(f"{directory} must contain encoder.json and vocab.bpe (GPT-2 BPE files)")
        self.directory = directory
        self.encoder: dict[str, int] = json.loads(enc_path.read_text(encoding="utf-8"))
        self.decoder = {v: k for k, v in self.encoder.items()}
        lines = merges_path.read_text(encoding="utf-8").split("\n")
        merges = [tuple(line.split()) for line in lines[1:] if line and not line.startswith("#version")]
        self.ranks = {pair: i for i, pair in enumerate(merges)}
        self.byte_enc = bytes_to_unicode()
        self.byte_dec = {v: k for k, v in self.byte_enc.items()}
        self.pattern = regex.compile(GPT2_PATTERN)
        self.vocab_size = len(self.encoder)
        self.eos_token_id = self.encoder.get("<|endoftext|>")
        self._cache: dict[str, list[str]] = {}

    def _bpe(self, word: str) -> list[str]:
        if word in self._cache:
            return self._cache[word]
        parts = list(word)
        while len(parts) > 1:
            ranked = [(self.ranks.get(pair, float("inf")), i) for i, pair in enumerate(itertools.pairwise(parts))]
            rank, i = min(ranked)
            if rank == float("inf"):
                break
            first, second = parts[i], parts[i + 1]
            merged, j = [], 0
            while j < len(parts):  # merge every occurrence of the best pair, left to right
                if j < len(parts) - 1 and parts[j] == first and parts[j + 1] == second:
                    merged.append(first + second)
                    j += 2
                else:
                    merged.append(parts[j])
                    j += 1
            parts = merged
        if len(self._cache) < 100_000:
            self._cache[word] = parts
        return parts

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in self.pattern.findall(text):
            mapped = "".join(self.byte_enc[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[p] for p in self._bpe(mapped))
        return ids

    def decode(self, ids) -> str:
        text = "".join(self.decoder[int(i)] for i in ids)
        return bytes(self.byte_dec[c] for c in text).decode("utf-8", errors="replace")

    def spec(self) -> dict[str, Any]:
        return {"kind": "gpt2", "bpe_dir": str(self.directory)}


def make_tokenizer(kind: str = "byte", bpe_dir: str | Path | None = None):
    if kind == "byte":
        return ByteTokenizer()
    if kind == "gpt2":
        if bpe_dir is None:
            raise InputError("tokenizer='gpt2' needs bpe_dir: the folder holding encoder.json and vocab.bpe")
        return GPT2Tokenizer(bpe_dir)
    raise InputError(f"unknown tokenizer {kind!r}; expected 'byte' or 'gpt2'")


def tokenizer_from_spec(spec: dict[str, Any]):
    return make_tokenizer(spec.get("kind", "byte"), spec.get("bpe_dir"))
