"""``seqzoo bench --doc-length N``: every point also on packed rows, with the ratio to the same point unpacked.

A smoke test only (tiny sizes, a hundredth of a second per figure): the rows, ratios and files are there and bad
options are refused before anything is measured. No timing is asserted.
"""

import csv
import subprocess
import sys

import pytest

from seqzoo.bench import format_table, run_mixer_bench
from seqzoo.errors import InputError


def test_packed_rows_beside_unpacked_with_ratios(tmp_path):
    rows = run_mixer_bench(
        ["slstm"], [16], d_model=8, doc_length=5, out_dir=tmp_path, min_run_time=0.01, progress=False, timeout=600
    )
    assert [(r["mixer"], r["packed"]) for r in rows] == [("attention", 0), ("attention", 5), ("slstm", 0), ("slstm", 5)]
    for r in rows:
        assert "error" not in r, r
        if r["packed"]:
            assert r["fwdbwd_ms_vs_unpacked"] > 0 and r["fwd_ms_vs_unpacked"] > 0
        else:
            assert "fwdbwd_ms_vs_unpacked" not in r
    assert all(r["fwdbwd_ms_ratio"] == 1.0 for r in rows if r["mixer"] == "attention")  # packed vs packed baseline
    with open(tmp_path / "bench.csv") as f:
        assert [row["packed"] for row in csv.DictReader(f)] == ["0", "5", "0", "5"]
    assert "packed docs" in format_table(rows) and "time / unpacked" in format_table(rows)


@pytest.mark.parametrize(
    "mixers, doc_length, match",
    [(["slstm"], 0, "doc_length must be a positive int"), (["orchid"], 4, r"\['orchid'\] do not take segment_pos")],
)
def test_bad_doc_length_or_unpackable_mixer_is_refused_before_measuring(tmp_path, mixers, doc_length, match):
    with pytest.raises(InputError, match=match):
        run_mixer_bench(mixers, [8], doc_length=doc_length, out_dir=tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_cli_flag_reaches_the_bench(tmp_path):
    args = ["bench", "--mixers", "local_attention", "--lengths", "8", "--d-model", "8", "--doc-length", "3"]
    args += ["--out", str(tmp_path), "--no-progress", "--timeout", "600"]
    res = subprocess.run([sys.executable, "-m", "seqzoo", *args], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "time / unpacked" in res.stdout
    bad_args = [*args[:8], "0", "--out", str(tmp_path / "bad"), "--no-progress"]  # --doc-length 0
    bad = subprocess.run([sys.executable, "-m", "seqzoo", *bad_args], capture_output=True, text=True)
    assert bad.returncode == 2 and "doc_length must be a positive int" in bad.stderr


def test_the_packed_point_hands_segment_pos_to_the_mixer(monkeypatch):
    """What a packed point times: the mixer called with ``segment_pos`` restarting every ``doc_length`` tokens."""
    from seqzoo.bench import measure

    seen = []
    real = measure.build_mixer

    def spy(*args, **kwargs):
        m = real(*args, **kwargs)
        forward = m.forward

        def recording(x, state=None, mode=None, segment_pos=None):
            seen.append(segment_pos)
            return forward(x, state=state, mode=mode, segment_pos=segment_pos)

        m.forward = recording
        return m

    monkeypatch.setattr(measure, "build_mixer", spy)
    measure.measure_point("slstm", None, T=7, d_model=8, batch=2, doc_length=3, min_run_time=0.001)
    assert seen and all(s is not None and s.tolist() == [[0, 1, 2, 0, 1, 2, 0]] * 2 for s in seen)


TINY = {"d_model": 16, "n_layers": 1, "vocab_size": 32, "window": 8}


def test_model_suite_times_packed_training_beside_unpacked(tmp_path):
    from seqzoo.bench import format_model_table, run_model_bench

    rows = run_model_bench(
        families="hawk", lengths=[16], tokens=32, steps=1, warmup=0, decode=False, isolate=False, shape=TINY,
        doc_length=5, out_dir=tmp_path, progress=False,
    )  # fmt: skip
    assert sorted((r["family"], r["packed"]) for r in rows) == [
        ("hawk", 0),
        ("hawk", 5),
        ("transformer", 0),
        ("transformer", 5),
    ]
    for r in rows:
        assert "error" not in r, r
        assert (r["tokens_per_s_vs_unpacked"] > 0) if r["packed"] else ("tokens_per_s_vs_unpacked" not in r)
    assert "tokens/s ÷ unpacked" in format_model_table(rows)
    with open(tmp_path / "models.csv") as f:
        assert sorted(row["packed"] for row in csv.DictReader(f)) == ["0", "0", "5", "5"]


def test_the_packed_training_point_hands_segment_pos_to_the_model(monkeypatch):
    import importlib

    from seqzoo.bench import models

    evaluate_mod = importlib.import_module("seqzoo.eval.evaluate")  # the module (the package exports the function)

    seen = []
    real = evaluate_mod.forward_logits

    def spy(model, inputs, kind="lm", segment_pos=None):
        seen.append(segment_pos)
        return real(model, inputs, kind, segment_pos)

    monkeypatch.setattr(evaluate_mod, "forward_logits", spy)
    config = models.family_config("hawk", "small", **TINY).to_dict()
    models.train_point(config, T=6, batch=2, steps=1, warmup=0, doc_length=4, measure_memory=False)
    assert seen and all(s.tolist() == [[0, 1, 2, 3, 0, 1]] * 2 for s in seen)
