"""The published numbers of the calibration page (``seqzoo/experiments/published.py``): every entry names its source
and how it was read, no value without one, and every key is a setting the measuring experiment can run."""

from seqzoo.experiments.mad import SETTINGS
from seqzoo.experiments.published import ANCHORS, PUBLISHED, entries
from seqzoo.experiments.zoology_mqar import cells


def test_every_published_entry_names_its_source_and_kind():
    assert PUBLISHED
    for p in PUBLISHED:
        assert p.anchor in ANCHORS and p.source.startswith("arXiv:"), p
        assert p.kind in ("table", "plot", "not found"), p
        assert (p.value is None) == (p.kind == "not found"), p  # no number without a source that printed it
        if p.value is not None:
            assert 0 <= p.value <= 1, p
        assert (p.precision is not None) == (p.kind == "plot"), p  # a value read off a plot says how precisely
    for name, anchor in ANCHORS.items():
        assert any(p.model == anchor.reference for p in entries(name)), name


def test_published_keys_are_settings_the_experiments_can_run():
    from seqzoo.tasks import build_task

    for p in entries("zoology-mqar"):
        T, P, d = p.key
        assert cells([T], [P]) == [(T, P)]  # zoology-mqar keeps the cell (4·pairs <= T)
        build_task("mqar", protocol="zoology", vocab_size=8192, num_pairs=P, seq_len=T)  # Zoology's asserts hold
        assert isinstance(d, int) and d > 0 and d % 4 == 0  # the zoo's attention has 4 heads
    for p in entries("mad"):
        task, setting = p.key
        assert task in SETTINGS and setting == "all"  # a MAD score: the mean over every setting of the task
    assert all(p.key is None for p in entries("xlstm-mqar"))  # the figure's settings were not found
