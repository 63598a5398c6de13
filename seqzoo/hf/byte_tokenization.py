"""seqzoo's byte-level tokenizer as a transformers ``PreTrainedTokenizer``, for the models trained on raw bytes.

The byte presets (``griffin-tiny``, ``attention-tiny``, ..., ``vocab_size=256``) are trained by the ``text`` task with
``tokenizer="byte"`` (``seqzoo.tasks.tokenizers.ByteTokenizer``): token id = UTF-8 byte value, 0..255, and no
special ids (documents are separated by text, not by an end-of-sequence id). The ``mlm`` task appends one id,
``[MASK]`` = 256 (``vocab_size=257``). This tokenizer has exactly that layout: ids 0..255 are the bytes and, with
``mask_token``, id 256 is the mask; it adds no BOS/EOS, so ``tok(text).input_ids == list(text.encode("utf-8"))``.

Registered with ``AutoTokenizer`` for the seqzoo configurations on ``import seqzoo.hf``; ``save_pretrained`` writes
only ``tokenizer_config.json`` (there is no vocabulary file to write), so
``transformers.pipeline("text-generation", model=folder)`` finds it beside the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizer

from ..errors import InputError

N_BYTES = 256
MASK_TOKEN = "[MASK]"


class SeqzooByteTokenizer(PreTrainedTokenizer):
    """UTF-8 bytes as ids 0..255 (as ``seqzoo.tasks.tokenizers.ByteTokenizer``); ``mask_token="[MASK]"`` adds id 256.

    A token's string is the character with the byte's code point (``chr(b)``), so every byte sequence - including a
    multi-byte character cut between tokens - has tokens, and decoding joins the bytes before reading them as
    UTF-8 (invalid sequences become U+FFFD, as in seqzoo's ``ByteTokenizer.decode``).
    """

    vocab_files_names: dict[str, str] = {}  # no vocabulary file: the ids are the bytes
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, mask_token: str | None = None, **kwargs: Any):
        kwargs.setdefault("clean_up_tokenization_spaces", False)  # bytes decode as they are, no space fix-ups
        super().__init__(mask_token=mask_token, **kwargs)
        extra = sorted(i for i in self.added_tokens_decoder if i >= N_BYTES)
        if extra != list(range(N_BYTES, N_BYTES + len(extra))):
            raise InputError(f"special tokens must follow the 256 byte ids (ids 256, 257, ...), got ids {extra}")

    @property
    def vocab_size(self) -> int:
        return N_BYTES

    def get_vocab(self) -> dict[str, int]:
        vocab = {chr(i): i for i in range(N_BYTES)}
        vocab.update(self.added_tokens_encoder)
        return vocab

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [chr(b) for b in text.encode("utf-8")]

    def _convert_token_to_id(self, token: str) -> int:
        if len(token) != 1 or ord(token) >= N_BYTES:
            raise InputError(f"{token!r} is neither a byte token (one character below U+0100) nor a special token")
        return ord(token)

    def _convert_id_to_token(self, index: int) -> str:
        if not 0 <= index < N_BYTES:
            raise InputError(f"token id {index} is outside the byte ids [0, {N_BYTES}) and is no special token")
        return chr(index)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        raw = bytearray()
        for token in tokens:
            if token in self.added_tokens_encoder:
                raw += token.encode("utf-8")  # a special token reads as its text
            else:
                raw.append(self._convert_token_to_id(token))
        return raw.decode("utf-8", errors="replace")

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        return ()  # the vocabulary is the 256 bytes: nothing to write besides tokenizer_config.json

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, *args: Any, **kwargs: Any):
        """Load from a folder; a folder with no tokenizer files gets the layout of its model's ``config.json``.

        ``AutoTokenizer`` falls back to this class for any seqzoo folder without ``tokenizer_config.json``: that is
        right for a byte model (``vocab_size`` 256, or 257 for an encoder, whose id 256 is ``[MASK]``) and is refused
        for any other vocabulary, which needs its own tokenizer saved beside the model.
        """
        folder = Path(pretrained_model_name_or_path)
        if folder.is_dir() and not (folder / "tokenizer_config.json").is_file():
            layout = byte_layout(folder / "config.json")
            if layout is not None:
                kwargs.setdefault("mask_token", layout)
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)


def byte_layout(config_path: Path) -> str | None:
    """The mask token a seqzoo model in ``config_path`` expects (``None``: plain bytes); refuses non-byte vocabularies."""
    if not config_path.is_file():
        return None
    meta = json.loads(config_path.read_text())
    vocab = meta.get("vocab_size")
    kind = str(meta.get("model_type", ""))
    if vocab == N_BYTES:
        return None
    if vocab == N_BYTES + 1 and kind.endswith("encoder"):
        return MASK_TOKEN
    raise InputError(
        f"{config_path.parent} has no tokenizer_config.json and its model's vocab_size={vocab} is not seqzoo's byte "
        f"vocabulary (256; 257 for a masked-LM encoder): save the tokenizer it was trained with beside it "
        f"(e.g. seqzoo.hf.gpt2_tokenizer(bpe_dir).save_pretrained(folder))"
    )


__all__ = ["MASK_TOKEN", "N_BYTES", "SeqzooByteTokenizer", "byte_layout"]
