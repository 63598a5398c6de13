"""LoRA (peft) on seqzoo models: seqzoo.hf.lora_target_modules names real nn.Linear layers of every mixer family,
adapters train alone, merging keeps the adapted function, and the merged model loads back into seqzoo."""

import pytest
import torch

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn

import seqzoo.hf as H
from seqzoo import LanguageModel, ModelConfig
from seqzoo.errors import InputError
from seqzoo.mixers import MIXERS
from seqzoo.models import Encoder

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
V = 32


def tiny(mixer: str, **mixer_kwargs):
    cls = MIXERS[mixer]
    kwargs = {**getattr(cls, "test_kwargs", {}), **mixer_kwargs}
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=V, d_model=16, n_layers=2, pattern=[mixer], mixer_kwargs={mixer: kwargs})
    return (LanguageModel if cls.causal else Encoder)(cfg).eval()


def ids():
    return torch.randint(0, V, (2, 8), generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize("mixer", sorted(MIXERS))
def test_targets_are_linear_layers_of_every_family(mixer):
    model = tiny(mixer)
    linear = {n for n, m in model.named_modules() if type(m) is nn.Linear}
    for mlp in (False, True):
        if mixer == "slstm" and not mlp:
            with pytest.raises(InputError, match="pass mlp=True"):
                H.lora_target_modules(model)
            continue
        targets = H.lora_target_modules(model, mlp=mlp)
        assert targets and all(any(n.endswith("." + t) for n in linear) for t in targets), targets
        assert all(t.startswith("mixer.") or (mlp and t.startswith("mlp.")) for t in targets)
    assert H.lora_target_modules(H.from_seqzoo(model), mlp=True) == H.lora_target_modules(model, mlp=True)


def test_mlstm_7b_variant_targets_its_own_projections():
    targets = H.lora_target_modules(tiny("mlstm", variant="7b"))
    assert {"mixer.q", "mixer.k", "mixer.v", "mixer.ogate", "mixer.out_proj"} <= set(targets)


@pytest.mark.parametrize("mixer", ["attention", "rglru", "mlstm", "gateloop"])
def test_lora_trains_adapters_only_and_merges_into_a_seqzoo_folder(mixer, tmp_path):
    model = tiny(mixer)
    x = ids()
    with torch.no_grad():
        ref = model(x).logits
    base_weights = {k: v.clone() for k, v in model.state_dict().items()}
    lora = get_peft_model(
        H.from_seqzoo(model), LoraConfig(r=2, lora_alpha=4, target_modules=H.lora_target_modules(model, mlp=True))
    )
    trainable = [n for n, p in lora.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    with torch.no_grad():
        assert torch.equal(lora(input_ids=x).logits, ref)  # B = 0 at init: the adapted model starts as the base
    opt = torch.optim.SGD([p for p in lora.parameters() if p.requires_grad], lr=0.5)
    for _ in range(2):  # B moves on the first step, A on the second
        opt.zero_grad()
        lora(input_ids=x, labels=x).loss.backward()
        opt.step()
    with torch.no_grad():
        adapted = lora(input_ids=x).logits
    assert not torch.allclose(adapted, ref)
    now = {k.replace(".base_layer", ""): v for k, v in model.state_dict().items() if "lora_" not in k}
    assert now.keys() == base_weights.keys() and all(torch.equal(base_weights[k], now[k]) for k in now)  # frozen
    lora.save_pretrained(tmp_path / "adapter")
    again = PeftModel.from_pretrained(H.from_seqzoo(tiny(mixer)), tmp_path / "adapter")
    merged = lora.merge_and_unload()
    merged.save_pretrained(tmp_path / "merged")
    back = LanguageModel.from_pretrained(tmp_path / "merged").eval()
    with torch.no_grad():
        assert torch.equal(again(input_ids=x).logits, adapted)
        torch.testing.assert_close(back(x).logits, adapted, rtol=1e-4, atol=1e-5)  # W + BA rounded once


def test_refuses_what_is_not_a_seqzoo_model():
    with pytest.raises(InputError, match="needs a seqzoo LanguageModel or Encoder"):
        H.lora_target_modules(nn.Linear(2, 2))
