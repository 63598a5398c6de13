"""The zoo's probes beyond MQAR: state tracking and copying scored at longer lengths, RMT across segments,
Orchid on an encoder-side probe; tiny budgets (a smoke test of the grid, the run functions and the report)."""

import json

from seqzoo.experiments.zoo import OPTIONS, build_specs, run_zoo
from seqzoo.experiments.zoo_models import ZOO_ROPE_BASE, model_spec
from seqzoo.experiments.zoo_probes import SUITES
from seqzoo.sweep import resolve_options

TINY = dict(d_model=16, n_layers=1, steps=3, batch_size=4, seeds="0", progress=False)  # one seed: these test the grid


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


def _record(probe, model, seed, acc, acc_far):
    labels = {"probe": probe, "setting": "-", "model": model, "seed": seed}
    lengths = [[32, 0.1, acc], [128, 0.5, acc_far]]
    metrics = {"valid_accuracy": acc, "valid_loss": 0.1, "params": 10, "acc_by_length": lengths}
    return {"key": f"{probe}{model}{seed}", "labels": labels, "status": "ran", "run_dir": "x", "metrics": metrics}


def test_report_checks_each_probes_own_reference_and_separates_at_the_longest_length(tmp_path):
    from seqzoo.experiments.zoo_probes import Probe
    from seqzoo.experiments.zoo_report import write_zoo_report

    copy = Probe("copy", "c", {"name": "induction_heads", "seq_len": 32}, eval={"task_lengths": [32, 128]})
    enc = Probe("enc", "e", {"name": "associative_recall", "seq_len": 32}, reference="attention_encoder")
    records = [
        # equal at the training length (overlapping ranges), apart at 4x: only the longest length separates them
        *(_record("copy", "attention", s, a, f) for s, a, f in [(0, 0.99, 0.10), (1, 1.0, 0.20)]),
        *(_record("copy", "hawk", s, a, f) for s, a, f in [(0, 0.995, 0.97), (1, 0.98, 0.99)]),
        # the encoder probe: its reference learns it, plain "attention" is not in it
        *(_record("enc", "attention_encoder", s, 1.0, 1.0) for s in (0, 1)),
        *(_record("enc", "orchid", s, 0.5, 0.5) for s in (0, 1)),
    ]
    settings = {
        "suite": "t", "models": ["attention", "hawk"], "d_model": 8, "n_layers": 1, "seeds": [0, 1], "skipped": [],
        "probes": [{"probe": p, "train": {}, "task": p.task} for p in (copy, enc)],
    }  # fmt: skip
    res = write_zoo_report(tmp_path, records, settings)
    md = (tmp_path / "report.md").read_text()
    assert "enc -: attention_encoder worst seed valid_accuracy 1 — learned" in md
    assert "copy -: attention worst seed valid_accuracy 0.99 — learned" in md
    assert "- copy, valid_accuracy at length 128: hawk [0.97, 0.99] beats attention [0.1, 0.2]" in md
    assert sum("- copy, " in line for line in md.splitlines()) == 1  # nothing separates them at the training length
    assert "- enc, valid_accuracy: attention_encoder [1, 1] beats orchid [0.5, 0.5]" in md
    seps = json.loads((tmp_path / "separations.json").read_text())
    assert {(s["better"], s["worse"], s["metric"]) for s in seps} == {
        ("hawk", "attention", "valid_accuracy at length 128"),
        ("attention_encoder", "orchid", "valid_accuracy"),
    }  # the encoder probe is scored at its training length only
    copy_hawk = next(r for r in res["summary"] if r["probe"] == "copy" and r["model"] == "hawk")
    assert copy_hawk["at longest length"] == "0.98 (0.97–0.99) at 128"
    assert all(r["metrics"].get("at_longest") is None for r in records)  # the run records are left as they were


def test_the_suites_attention_head_count_reaches_attention_local_attention_and_rmts_backbone():
    import torch

    from seqzoo.experiments.zoo_builders import ZOO_HEADS, rmt_model
    from seqzoo.tasks import build_task

    full = _specs(suite="full", probes="mqar,rmt_mqar", models="attention,local_attention,rmt,hawk")
    quick = _specs(probes="mqar,rmt_mqar", models="attention,local_attention,rmt,hawk")
    for specs, heads in ((full, SUITES["full"]["attention_heads"]), (quick, ZOO_HEADS)):
        for s in specs:
            model = s.config["model"]
            if s.labels["model"] in ("attention", "local_attention"):
                assert model["config"]["mixer_kwargs"][s.labels["model"]]["n_heads"] == heads
            elif s.labels["model"] == "rmt":
                assert model["args"].get("n_heads", ZOO_HEADS) == heads
                torch.manual_seed(0)
                rmt = rmt_model(build_task(**s.config["task"]), **model["args"])
                assert rmt.backbone.model.blocks[0].mixer.n_heads == heads
    assert SUITES["full"]["attention_heads"] != ZOO_HEADS  # else this test checks nothing
    assert all("n_heads" not in s.config["model"].get("args", {}) for s in quick)  # default runs keep their keys
