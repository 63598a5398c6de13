"""GPT-2 byte-level BPE as a transformers fast tokenizer, built offline from ``encoder.json`` + ``vocab.bpe``.

The files are passed by path (seqzoo ships none; pass the folder that holds GPT-2's originals, e.g. ``../shared/data/gpt2-bpe``), nothing
is downloaded. The result is a ``transformers.GPT2TokenizerFast`` usable with ``pipeline(...)``; it encodes text
exactly as seqzoo's own ``seqzoo.tasks.tokenizers.GPT2Tokenizer`` does.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import GPT2TokenizerFast

from ..errors import InputError, MissingFileError

ENCODER_NAME, MERGES_NAME = "encoder.json", "vocab.bpe"
EOS = "<|endoftext|>"


def read_merges(path: str | Path) -> list[tuple[str, str]]:
    """The merge rules of a GPT-2 ``vocab.bpe`` / ``merges.txt`` file (header and blank lines skipped)."""
    merges = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), start=1):
        if not line or line.startswith("#version"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise InputError(f"{path}:{n}: a merge rule is two space-separated symbols, got {line!r}")
        merges.append((parts[0], parts[1]))
    return merges


def gpt2_tokenizer(
    directory: str | Path | None = None,
    *,
    vocab_file: str | Path | None = None,
    merges_file: str | Path | None = None,
    pad_with_eos: bool = True,
) -> GPT2TokenizerFast:
    """A ``GPT2TokenizerFast`` from GPT-2's BPE files, offline.

    Pass the folder holding ``encoder.json`` and ``vocab.bpe`` (seqzoo's ``bpe_dir``), or both files by path
    (``vocab_file``: ``encoder.json`` / ``vocab.json``; ``merges_file``: ``vocab.bpe`` / ``merges.txt``).
    ``<|endoftext|>`` is BOS/EOS/UNK, as in GPT-2, and (``pad_with_eos``) the padding token.
    """
    if directory is not None:
        if vocab_file is not None or merges_file is not None:
            raise InputError("pass either directory or vocab_file + merges_file, not both")
        directory = Path(directory)
        vocab_file, merges_file = directory / ENCODER_NAME, directory / MERGES_NAME
    if vocab_file is None or merges_file is None:
        raise InputError(
            "gpt2_tokenizer needs the folder with encoder.json and vocab.bpe, or vocab_file and merges_file"
        )
    vocab_file, merges_file = Path(vocab_file), Path(merges_file)
    for p in (vocab_file, merges_file):
        if not p.is_file():
            raise MissingFileError(f"GPT-2 BPE file not found: {p}")
    vocab = json.loads(vocab_file.read_text(encoding="utf-8"))
    if not isinstance(vocab, dict) or EOS not in vocab:
        raise InputError(f"{vocab_file} must be a JSON object token -> id containing {EOS!r}")
    merges = read_merges(merges_file)
    tok = GPT2TokenizerFast(
        vocab=vocab,
        merges=merges,
        unk_token=EOS,
        bos_token=EOS,
        eos_token=EOS,
        pad_token=EOS if pad_with_eos else None,
        add_prefix_space=False,
    )
    return tok


__all__ = ["gpt2_tokenizer", "read_merges"]
