"""RMT around every registered seqzoo mixer stack (memory on top of attention, recurrence or convolution) and
around the Griffin preset: shapes, BPTT reaching the memory parameter, and streaming = one call (docs/rmt.md)."""

import pytest
import torch

from seqzoo.mixers import MIXERS
from seqzoo.models import Encoder, LanguageModel, ModelConfig, build_model
from seqzoo.models.rmt import RMT, RMTConfig

CAUSAL = sorted(n for n, c in MIXERS.items() if c.causal)
NONCAUSAL = sorted(n for n, c in MIXERS.items() if not c.causal)


def lm_for(mixer):
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=48,
        d_model=32,
        n_layers=1,
        pattern=[mixer],
        mixer_kwargs={mixer: dict(MIXERS[mixer].test_kwargs)},
        mlp="gelu",
        mlp_ratio=2.0,
    )
    return LanguageModel(cfg)


@pytest.mark.parametrize("mixer", CAUSAL)
def test_read_write_rmt_on_causal_mixer(mixer):
    r = RMT(lm_for(mixer), RMTConfig(num_mem_tokens=2, segment_size=6))
    assert r.config.placement == "read_write"
    x = torch.randint(0, 48, (2, 14), generator=torch.Generator().manual_seed(1))
    out = r(x, labels=x, shift_labels=True, return_memory=True)
    assert out.logits.shape == (2, 14, 48) and out.n_segments == 3 and out.memory.shape == (2, 2, 32)
    out.loss.backward()
    assert float(r.memory.grad.abs().sum()) > 0
    with torch.no_grad():
        first = r(x[:, :6], return_memory=True)
        second = r(x[:, 6:], memory=first.memory)
        full = r(x)
    assert torch.allclose(torch.cat([first.logits, second.logits], 1), full.logits, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("mixer", NONCAUSAL)
def test_encoder_rmt_on_noncausal_mixer(mixer):
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=48,
        d_model=32,
        n_layers=1,
        pattern=[mixer],
        mixer_kwargs={mixer: dict(MIXERS[mixer].test_kwargs)},
        mlp="gelu",
        mlp_ratio=2.0,
    )
    r = RMT(Encoder(cfg), RMTConfig(num_mem_tokens=2, segment_size=8, num_labels=6))
    assert r.config.placement == "encoder"
    x = torch.randint(0, 48, (2, 20))
    out = r(x, labels=torch.tensor([1, 4]))
    out.loss.backward()
    assert out.logits.shape == (2, 6) and float(r.memory.grad.abs().sum()) > 0


def test_rmt_around_griffin_preset():
    torch.manual_seed(0)
    lm = build_model("griffin-tiny", vocab_size=64)
    r = RMT(lm, RMTConfig(num_mem_tokens=2, segment_size=8))
    x = torch.randint(0, 64, (2, 20))
    out = r(x, labels=x, shift_labels=True)
    out.loss.backward()
    assert out.logits.shape == (2, 20, 64) and float(r.memory.grad.abs().sum()) > 0
    gen = r.generate(x[:, :5], max_new_tokens=6)
    assert torch.equal(r(gen).logits.argmax(-1)[:, 4:-1], gen[:, 5:])
