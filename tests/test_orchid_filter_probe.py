"""The input-dependence probe of Orchid's filter (seqzoo/eval/orchid_filter.py) against a per-sample recomputation
with explicit DFT sums, a filter made static by hand, and bad input."""

import pytest
import torch
from torch import nn

from seqzoo.errors import InputError
from seqzoo.eval.orchid_filter import orchid_filter_variation
from seqzoo.mixers.orchid import Orchid
from seqzoo.models import Encoder
from seqzoo.models.presets.orchid import orchid_ar_config


class _OneMixer(nn.Module):
    def __init__(self, mixer):
        super().__init__()
        self.mixer = mixer

    def forward(self, x):
        return self.mixer(x)[0]


def _mixer(conditioning="type1", **kw):
    torch.manual_seed(0)
    return Orchid(8, l_max=12, conditioning=conditioning, **kw).double()


@pytest.mark.parametrize("conditioning", ["type1", "type2"])
def test_matches_a_per_sample_recomputation_with_explicit_dft(conditioning):
    mixer = _mixer(conditioning)
    x = torch.randn(4, 12, 8, dtype=torch.float64)
    (row,) = orchid_filter_variation(_OneMixer(mixer), x)
    with torch.no_grad():
        H0 = mixer._static_spectrum(mixer.filter, 12, mixer.fft_size(12), "direct", torch.float64)
        Ht = [mixer.adaptive_spectrum(x[b : b + 1], mode="direct")[0] for b in range(4)]  # each (D, F)
    mean = sum(Ht) / 4
    spread = sum((h - mean).abs().pow(2).sum() for h in Ht) / 4
    total = sum((H0 + h).abs().pow(2).sum() for h in Ht) / 4
    assert row["input_share"] == pytest.approx(float(spread / total), rel=1e-9)
    assert row["adaptive_static"] == pytest.approx(
        float(sum(h.abs().pow(2).sum() for h in Ht) / 4 / H0.abs().pow(2).sum()), rel=1e-9
    )
    assert 0 < row["input_share"] < 1


def test_a_conditioning_network_blind_to_its_input_has_no_input_share():
    mixer = _mixer()
    with torch.no_grad():  # only the frequency conv's bias is left: the same spectrum for every input
        mixer.cond.time_conv.weight.zero_()
        mixer.cond.freq_conv.weight.zero_()
        mixer.cond.freq_conv.bias.normal_()
    (row,) = orchid_filter_variation(_OneMixer(mixer), torch.randn(3, 12, 8, dtype=torch.float64))
    assert row["input_share"] == pytest.approx(0.0, abs=1e-12)
    assert row["adaptive_static"] > 0


def test_one_row_per_orchid_layer_and_the_model_left_as_it_was():
    torch.manual_seed(0)
    model = Encoder(orchid_ar_config("orchid", vocab_size=10, seq_len=18, d_model=16, n_layers=2)).train()
    rows = orchid_filter_variation(model, torch.randint(0, 10, (5, 18)))
    assert len(rows) == 2 and all(0 < r["input_share"] < 1 for r in rows)
    assert model.training
    assert all(not m._forward_pre_hooks for m in model.modules())


def test_bad_input_is_refused():
    model = _OneMixer(_mixer())
    with pytest.raises(InputError, match="B >= 2"):
        orchid_filter_variation(model, torch.randn(1, 12, 8, dtype=torch.float64))
    torch.manual_seed(0)
    attention = Encoder(orchid_ar_config("attention", vocab_size=10, seq_len=18, d_model=16, n_layers=1))
    with pytest.raises(InputError, match="no Orchid layer"):
        orchid_filter_variation(attention, torch.randint(0, 10, (2, 18)))
    with pytest.raises(InputError, match="no Orchid layer"):
        orchid_filter_variation(_OneMixer(_mixer("none")), torch.randn(2, 12, 8, dtype=torch.float64))
