"""seqzoo.hf.SeqzooByteTokenizer: the byte models' id layout, AutoTokenizer registration, pipelines from a folder."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers import AutoTokenizer, pipeline

import seqzoo.hf as H
from seqzoo import LanguageModel, ModelConfig
from seqzoo.errors import InputError
from seqzoo.models import Encoder
from seqzoo.tasks.tokenizers import ByteTokenizer

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

TEXTS = ["Once upon a time", "héllo wörld ✓\n\ttabs", "", "[MASK] is text for a causal byte model"]


def tiny(cls, vocab: int):
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=vocab, d_model=16, n_layers=2, pattern=["attention"], mixer_kwargs={"attention": {"n_heads": 2}}
    )
    return cls(cfg).eval()


@pytest.mark.parametrize("text", TEXTS)
def test_encodes_and_decodes_as_seqzoos_byte_tokenizer(text):
    tok, ref = H.SeqzooByteTokenizer(), ByteTokenizer()
    enc = tok(text)
    assert enc.input_ids == ref.encode(text) and enc.attention_mask == [1] * len(ref.encode(text))
    assert tok.decode(enc.input_ids) == ref.decode(ref.encode(text)) == text
    assert len(tok) == tok.vocab_size == ref.vocab_size == 256
    assert tok.bos_token_id is None and tok.eos_token_id is None and tok.pad_token_id is None


def test_cut_characters_decode_as_seqzoo_does():
    tok, ref = H.SeqzooByteTokenizer(), ByteTokenizer()
    ids = list("é✓".encode())[1:] + [255, 104]  # a cut multi-byte character and an invalid byte
    assert tok.decode(ids) == ref.decode(ids)
    assert tok.convert_ids_to_tokens([104, 195]) == ["h", "\xc3"]
    with pytest.raises(InputError, match="outside the byte ids"):
        tok.convert_ids_to_tokens([256])


def test_mask_token_is_the_mlm_tasks_id_256():
    tok = H.SeqzooByteTokenizer(mask_token="[MASK]")
    assert len(tok) == 257 and tok.mask_token_id == 256  # seqzoo.tasks.mlm: mask = tokenizer.vocab_size
    ids = tok("a[MASK]é").input_ids
    assert ids == [97, 256, 195, 169] and tok.decode(ids) == "a[MASK]é"


def test_text_generation_pipeline_from_a_folder_runs_the_byte_model(tmp_path):
    model = tiny(LanguageModel, 256)
    model.save_pretrained(tmp_path)
    H.SeqzooByteTokenizer().save_pretrained(tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "SeqzooByteTokenizer"
    assert type(AutoTokenizer.from_pretrained(tmp_path)) is H.SeqzooByteTokenizer
    pipe = pipeline("text-generation", model=str(tmp_path))
    assert type(pipe.model) is H.SeqzooForCausalLM and type(pipe.tokenizer) is H.SeqzooByteTokenizer
    prompt = "Once upon"
    text = pipe(prompt, max_new_tokens=12, do_sample=False)[0]["generated_text"]
    ref = model.generate(torch.tensor([list(prompt.encode())]), max_new_tokens=12, temperature=0)
    assert text == ByteTokenizer().decode(ref[0].tolist())  # greedy: the pipeline produced seqzoo's own tokens


def test_folder_without_tokenizer_files_gets_the_byte_layout_of_its_model(tmp_path):
    tiny(LanguageModel, 256).save_pretrained(tmp_path / "lm")
    tiny(Encoder, 257).save_pretrained(tmp_path / "mlm")
    lm_tok, mlm_tok = AutoTokenizer.from_pretrained(tmp_path / "lm"), AutoTokenizer.from_pretrained(tmp_path / "mlm")
    assert type(lm_tok) is H.SeqzooByteTokenizer and len(lm_tok) == 256 and lm_tok.mask_token is None
    assert type(mlm_tok) is H.SeqzooByteTokenizer and mlm_tok.mask_token_id == 256
    filled = pipeline("fill-mask", model=str(tmp_path / "mlm"), top_k=2)("ab[MASK]d")
    assert len(filled) == 2 and all(0 <= f["token"] < 256 for f in filled)


def test_folder_of_another_vocabulary_without_tokenizer_is_refused(tmp_path):
    tiny(LanguageModel, 64).save_pretrained(tmp_path)
    with pytest.raises(InputError, match="vocab_size=64 is not seqzoo's byte vocabulary"):
        AutoTokenizer.from_pretrained(tmp_path)


def test_special_tokens_must_follow_the_bytes():
    with pytest.raises(InputError, match="must follow the 256 byte ids"):
        H.SeqzooByteTokenizer(mask_token="[MASK]", added_tokens_decoder={300: transformers.AddedToken("[MASK]")})
