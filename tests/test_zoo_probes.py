"""The zoo's probes beyond MQAR: state tracking and copying scored at longer lengths, RMT across segments,
Orchid on an encoder-side probe; tiny budgets (a smoke test of the grid, the run functions and the report)."""

import json

from seqzoo.experiments.zoo import OPTIONS, build_specs, run_zoo
from seqzoo.experiments.zoo_models import ZOO_ROPE_BASE, model_spec
from seqzoo.experiments.zoo_probes import SUITES
from seqzoo.sweep import resolve_options

TINY = dict(d_model=16, n_layers=1, steps=3, batch_size=4, progress=False)


def _specs(**kw):
    return build_specs(resolve_options(OPTIONS, {**TINY, **kw}, "zoo"))[0]


def test_probe_models_only_where_named_and_lm_models_everywhere_else():
    specs = _specs(probes="parity,rmt_mqar,orchid_recall", models="attention,hawk,rmt,orchid,attention_encoder")
    by_probe = {}
    for s in specs:
        by_probe.setdefault(s.labels["probe"], []).append(s.labels["model"])
    assert by_probe == {
        "parity": ["attention", "hawk"],
        "rmt_mqar": ["attention", "rmt"],
        "orchid_recall": ["attention_encoder", "orchid"],
    }
    rmt = next(s for s in specs if s.labels["model"] == "rmt")
    assert rmt.config["model"]["args"]["segment_size"] * 2 == rmt.config["task"]["seq_len"]  # pairs | queries
    parity = next(s for s in specs if s.labels["probe"] == "parity")
    assert parity.config["eval"]["task_lengths"][0] == parity.config["task"]["seq_len"]
    assert max(parity.config["eval"]["task_lengths"]) >= 2 * parity.config["task"]["seq_len"]


def test_zoo_attention_uses_the_zoo_rope_base():
    for name in ("attention", "local_attention", "griffin"):
        cfg = model_spec(name, 16, 32, 2, 32)["config"]
        mixer = "local_attention" if name != "attention" else "attention"
        assert cfg["mixer_kwargs"][mixer]["rope_base"] == ZOO_ROPE_BASE == 100.0
    assert all(p.name != "parity" or p.eval["task_lengths"] for s in SUITES.values() for p in s["probes"])


def test_tiny_zoo_on_the_new_probes_writes_length_tables(tmp_path):
    res = run_zoo(
        tmp_path,
        probes="parity,induction_heads,rmt_mqar,orchid_recall",
        models="attention,rmt,orchid,attention_encoder",
        **TINY,
    )
    assert res["errors"] == 0
    runs = [json.loads(p.read_text()) for p in (tmp_path / "runs").glob("*/done.json")]
    assert len(runs) == 6
    by_len = [r["metrics"]["acc_by_length"] for r in runs if "acc_by_length" in r["metrics"]]
    assert len(by_len) == 2 and all(0 <= acc <= 1 for rows in by_len for _, _, acc in rows)
    assert sorted(len(rows) for rows in by_len) == [2, 3]
    md = (tmp_path / "report.md").read_text()
    assert "parity: accuracy at longer lengths" in md and "T=64" in md and "induction_heads" in md
    assert (tmp_path / "figures" / "parity_by_length.png").is_file()
    assert all(r["metrics"]["params"] > 0 for r in runs)
