"""Packed documents through whole causal LMs (issue #43), float64, one tiny preset per family.

A batch of 2 rows, each packing several documents (different starts per row, one-token documents included),
run once with ``segment_pos`` gives every document the logits it gets alone, and the gradient of every parameter
equals the sum over the documents run alone. Every family's mixers declare ``supports_segment_pos`` (asserted, so a
family that loses it fails here rather than being skipped). The trunk test checks that
``segment_pos`` reaches every layer of every family, whatever block kind holds the mixer.
"""

import pytest
import torch

import seqzoo
from seqzoo.models.lm import LanguageModel
from seqzoo.models.presets import PRESETS
from seqzoo.models.presets.xlstm import xlstm_config

VOCAB = 40
ROWS = [[5, 1, 7, 3], [9, 2, 1, 1, 3]]  # document lengths per row; each row is T = 16 tokens


def xlstm01_tiny() -> LanguageModel:
    """xLSTM[0:1]: sLSTM blocks only (the sLSTM block with its gated FFN, without mLSTM layers)."""
    config = xlstm_config(d_model=32, n_layers=2, slstm_at=(0, 1), vocab_size=VOCAB, slstm_n_heads=2)
    return LanguageModel(config)


FAMILIES = {
    "attention": lambda: seqzoo.build_model("attention-tiny", vocab_size=VOCAB),
    "local_attention": lambda: seqzoo.build_model("local-attention-tiny", vocab_size=VOCAB),
    "mqa": lambda: seqzoo.build_model("mqa-tiny", vocab_size=VOCAB),
    "hawk": lambda: seqzoo.build_model("hawk-tiny", vocab_size=VOCAB),
    "griffin": lambda: seqzoo.build_model("griffin-tiny", vocab_size=VOCAB),
    "xlstm10": lambda: seqzoo.build_model("xlstm10-tiny", vocab_size=VOCAB),
    "xlstm_slstm": lambda: seqzoo.build_model("xlstm-tiny", vocab_size=VOCAB),
    "xlstm01": xlstm01_tiny,
    "gateloop": lambda: seqzoo.build_model("gateloop-tiny", vocab_size=VOCAB),
    "gateloop_heads": lambda: seqzoo.build_model("gateloop-tiny-heads", vocab_size=VOCAB),
}


def positions(rows=ROWS) -> torch.Tensor:
    return torch.stack([torch.cat([torch.arange(n) for n in row]) for row in rows])


def build(family: str) -> LanguageModel:
    torch.manual_seed(0)
    model = FAMILIES[family]().double().eval()  # eval: no dropout
    with torch.no_grad():  # recurrent matrices start at 0 in some recipes (sLSTM R): give them weight to test
        for name, p in model.named_parameters():
            if name.endswith("mixer.R"):
                p.normal_(0, 0.3)
    return model


def unsupported(model: LanguageModel) -> list[str]:
    return sorted({b.mixer.name for b in model.blocks if not b.mixer.supports_segment_pos})


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_packed_rows_equal_documents_alone(family):
    model = build(family)
    assert not unsupported(model), f"{family}: mixer(s) {unsupported(model)} do not take segment_pos"
    g = torch.Generator().manual_seed(1)
    T = sum(ROWS[0])
    ids = torch.randint(0, VOCAB, (2, T), generator=g)
    w = torch.randn(2, T, VOCAB, generator=g, dtype=torch.float64)
    params = [p for p in model.parameters() if p.requires_grad]

    logits = model(ids, segment_pos=positions()).logits
    grads = torch.autograd.grad((logits * w).sum(), params)

    alone, loss = [], 0.0
    for b, row in enumerate(ROWS):
        lo, parts = 0, []
        for n in row:
            part = model(ids[b : b + 1, lo : lo + n]).logits
            loss = loss + (part * w[b : b + 1, lo : lo + n]).sum()
            parts.append(part)
            lo += n
        alone.append(torch.cat(parts, 1))
    ref_grads = torch.autograd.grad(loss, params)

    torch.testing.assert_close(logits, torch.cat(alone), rtol=0, atol=1e-10)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    for name, a, r in zip(names, grads, ref_grads):
        scale = max(1.0, float(r.abs().max()))
        assert float((a - r).abs().max()) <= 1e-10 * scale, f"{family}: gradient of {name}"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_trunk_passes_segment_pos_to_every_layer(family):
    """Every layer's mixer receives the model's segment_pos (mixers replaced by recorders: any block kind)."""
    model = build(family)
    seen = []

    def recorder(block_index):
        def forward(x, state=None, mode=None, segment_pos=None):
            seen.append((block_index, segment_pos))
            return x, state

        return forward

    for i, block in enumerate(model.blocks):
        block.mixer.forward = recorder(i)
    pos = positions()
    model(torch.zeros(2, pos.shape[1], dtype=torch.long), segment_pos=pos)
    assert [i for i, _ in seen] == list(range(len(model.blocks)))
    assert all(sp is pos for _, sp in seen)


def test_families_cover_every_block_kind_and_mixer_of_the_lm_presets():
    """Every block kind and every mixer the LM presets are built from appears in one of the families above
    (RMT presets reuse these stacks as backbones), so the tests above reach all of them."""
    covered_blocks, covered_mixers = set(), set()
    for family in FAMILIES:
        config = build(family).config
        covered_blocks.add(config.block)
        covered_mixers.update(config.pattern)
    for name, preset in PRESETS.items():
        if preset.kind != "lm":
            continue
        config = preset.config()
        assert config.block in covered_blocks, f"{name}: block {config.block!r}"
        assert set(config.pattern) <= covered_mixers, f"{name}: mixers {set(config.pattern) - covered_mixers}"
