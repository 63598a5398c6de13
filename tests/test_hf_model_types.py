"""seqzoo's own ``model_type`` names ("seqzoo-lm", "seqzoo-encoder") with transformers' Auto classes, and folders
written before the prefix (bare "lm" / "encoder") loading in both libraries."""

import json

import pytest
import torch
from safetensors.torch import save_model

transformers = pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

import seqzoo.hf as H
from seqzoo import LanguageModel, ModelConfig
from seqzoo.errors import InputError
from seqzoo.models import Encoder, SeqzooModel

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

V = 48


def tiny_config(**kw) -> ModelConfig:
    return ModelConfig(
        vocab_size=V, d_model=16, n_layers=2, pattern=["attention"], mixer_kwargs={"attention": {"n_heads": 2}}, **kw
    )


def tiny_lm() -> LanguageModel:
    torch.manual_seed(0)
    return LanguageModel(tiny_config()).eval()


def tiny_encoder() -> Encoder:
    torch.manual_seed(0)
    return Encoder(tiny_config()).eval()


def write_legacy_folder(model, directory, model_type: str):
    """A folder as seqzoo wrote it before the "seqzoo-" prefix: bare kind in config.json, plain safetensors."""
    directory.mkdir(parents=True)
    meta = {"model_type": model_type, **model.config.to_dict()}
    (directory / "config.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    save_model(model, str(directory / "model.safetensors"), metadata={"format": "pt", "model_type": model_type})
    return directory


def ids(B=2, T=7):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(3))


def test_seqzoo_writes_its_own_model_type_registered_with_auto_config(tmp_path):
    tiny_lm().save_pretrained(tmp_path / "lm")
    tiny_encoder().save_pretrained(tmp_path / "enc")
    assert json.loads((tmp_path / "lm" / "config.json").read_text())["model_type"] == "seqzoo-lm"
    assert json.loads((tmp_path / "enc" / "config.json").read_text())["model_type"] == "seqzoo-encoder"
    assert H.SeqzooLMConfig.model_type == "seqzoo-lm" and H.SeqzooEncoderConfig.model_type == "seqzoo-encoder"
    assert isinstance(AutoConfig.from_pretrained(tmp_path / "lm"), H.SeqzooLMConfig)
    assert isinstance(AutoConfig.from_pretrained(tmp_path / "enc"), H.SeqzooEncoderConfig)
    assert isinstance(AutoConfig.for_model("seqzoo-lm", **tiny_config().to_dict()), H.SeqzooLMConfig)
    assert type(AutoModel.from_pretrained(tmp_path / "lm")) is H.SeqzooLMModel
    assert type(AutoModel.from_pretrained(tmp_path / "enc")) is H.SeqzooEncoderModel


def test_auto_causal_lm_round_trip_and_generate(tmp_path):
    model = tiny_lm()
    model.save_pretrained(tmp_path / "seqzoo")
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "seqzoo").eval()
    assert type(hf) is H.SeqzooForCausalLM and hf.config.model_type == "seqzoo-lm"
    x = ids()
    with torch.no_grad():
        ref = model(x).logits
        assert torch.equal(hf(x).logits, ref)
    hf.save_pretrained(tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "seqzoo-lm"
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    back = SeqzooModel.from_pretrained(tmp_path / "hf").eval()  # and seqzoo itself reads the wrapper's folder
    assert type(back) is LanguageModel
    with torch.no_grad():
        assert torch.equal(again(x).logits, ref) and torch.equal(back(x).logits, ref)
    out = again.generate(x, max_new_tokens=5, do_sample=False)
    assert torch.equal(out, model.generate(x, max_new_tokens=5, temperature=0))


LEGACY = {
    "lm": (tiny_lm, LanguageModel, AutoModelForCausalLM, H.SeqzooForCausalLM, H.SeqzooLMConfig),
    "encoder": (tiny_encoder, Encoder, AutoModelForMaskedLM, H.SeqzooForMaskedLM, H.SeqzooEncoderConfig),
}


@pytest.mark.parametrize("kind", sorted(LEGACY))
def test_legacy_folder_loads_in_both_libraries(tmp_path, kind):
    build, seqzoo_cls, auto_cls, hf_cls, config_cls = LEGACY[kind]
    model = build()
    folder = write_legacy_folder(model, tmp_path / "old", kind)
    x = ids()
    with torch.no_grad():
        ref = model(x).logits
        hf = auto_cls.from_pretrained(folder).eval()
        assert type(hf) is hf_cls and isinstance(hf.config, config_cls)
        assert torch.equal(hf(x).logits, ref)
        for reader in (seqzoo_cls, SeqzooModel):
            assert torch.equal(reader.from_pretrained(folder).eval()(x).logits, ref)
    # re-saved by the wrapper, the folder carries the new name
    hf.save_pretrained(tmp_path / "new")
    assert json.loads((tmp_path / "new" / "config.json").read_text())["model_type"] == f"seqzoo-{kind}"
    if kind == "lm":
        assert torch.equal(hf.generate(x, max_new_tokens=4, do_sample=False), model.generate(x, 4, temperature=0))


def test_wrong_or_unknown_model_type_is_refused(tmp_path):
    folder = write_legacy_folder(tiny_lm(), tmp_path / "old", "lm")
    with pytest.raises(InputError, match="holds a 'lm' model, not a 'encoder'"):
        Encoder.from_pretrained(folder)
    meta = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**meta, "model_type": "seqzoo-unknown"}))
    with pytest.raises(InputError, match="model_type must be one of .*'seqzoo-lm'.*got 'seqzoo-unknown'"):
        SeqzooModel.from_pretrained(folder)
    with pytest.raises(ValueError, match="model_type"):
        H.SeqzooLMConfig(model_type="seqzoo-encoder")
    assert H.SeqzooLMConfig(model_type="lm", **tiny_config().to_dict()).model_type == "seqzoo-lm"
