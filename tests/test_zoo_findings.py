"""The zoo report's findings table: each probe's paper claims (``Probe.expects``) against the seed-merged numbers."""

import json

from seqzoo.experiments.zoo_findings import findings, verdict
from seqzoo.experiments.zoo_probes import SUITES, Expectation, Probe
from seqzoo.experiments.zoo_report import LONGEST, write_zoo_report
from seqzoo.sweep import aggregate


def _rec(probe, model, seed, acc, far=None, setting="-"):
    metrics = {"valid_accuracy": acc, "valid_loss": 0.1, "params": 10}
    if far is not None:
        metrics["acc_by_length"] = [[32, 0.1, acc], [128, 0.5, far]]
    labels = {"probe": probe, "setting": setting, "model": model, "seed": seed}
    return {
        "key": f"{probe}{model}{seed}{setting}",
        "labels": labels,
        "status": "ran",
        "run_dir": "x",
        "metrics": metrics,
    }


def _rows(records):
    return aggregate(records, ["valid_accuracy", LONGEST])


def _row(model, values):
    return {
        "model": model,
        "n": len(values),
        "m_mean": sum(values) / len(values),
        "m_min": min(values),
        "m_max": max(values),
    }


def test_verdicts_follow_the_seed_ranges():
    up = Expectation("a", "b", "paper")
    level = Expectation("a", "b", "paper", relation="≈")
    hi, lo, mid = _row("a", [0.9, 0.95]), _row("b", [0.3, 0.4]), _row("b", [0.85, 0.92])
    assert verdict(up, hi, lo, "m", True, True, 0.02) == "reproduced"
    assert verdict(up, lo, hi, "m", True, True, 0.02) == "reversed"
    assert verdict(up, hi, mid, "m", True, True, 0.02).startswith("not separated")
    assert verdict(up, hi, lo, "m", False, None, 0.02) == "reversed"  # a loss: lower is better
    assert verdict(level, hi, mid, "m", True, True, 0.02).startswith("reproduced")
    assert verdict(level, hi, lo, "m", True, True, 0.02).startswith("not reproduced")
    assert verdict(up, hi, lo, "m", True, False, 0.02).startswith("inconclusive")
    assert verdict(up, _row("a", [0.9]), lo, "m", True, True, 0.02).startswith("one seed")
    assert verdict(up, hi, None, "m", True, True, 0.02) == "not run"


def test_findings_read_the_longest_length_and_the_reference():
    copy = Probe(
        "copy",
        "c",
        {"name": "induction_heads", "seq_len": 32},
        eval={"task_lengths": [32, 128]},
        expects=(Expectation("hawk", "attention", "Griffin §6.2", at="longest"),),
    )
    recall = Probe(
        "recall", "r", {"name": "mqar"}, "num_pairs", (4, 8), expects=(Expectation("attention", "hawk", "x"),)
    )
    from seqzoo.experiments.zoo_report import _with_longest

    records = [
        *(_rec("copy", "attention", s, a, f) for s, a, f in [(0, 0.99, 0.10), (1, 1.0, 0.20)]),
        *(_rec("copy", "hawk", s, a, f) for s, a, f in [(0, 0.995, 0.97), (1, 0.98, 0.99)]),
        # 4 pairs: attention learns and beats hawk; 8 pairs: attention does not learn, so nothing counts there
        *(_rec("recall", "attention", s, a, setting="num_pairs=4") for s, a in [(0, 0.99), (1, 0.97)]),
        *(_rec("recall", "hawk", s, a, setting="num_pairs=4") for s, a in [(0, 0.4), (1, 0.5)]),
        *(_rec("recall", "attention", s, a, setting="num_pairs=8") for s, a in [(0, 0.6), (1, 0.7)]),
        *(_rec("recall", "hawk", s, a, setting="num_pairs=8") for s, a in [(0, 0.2), (1, 0.3)]),
    ]
    probes = {"copy": copy, "recall": recall}
    rows = _rows(_with_longest(records, probes))
    out = {(f["probe"], f["setting"]): f for f in findings(rows, probes, LONGEST, 0.02)}
    assert out[("copy", "-")]["verdict"] == "reproduced"
    assert "at length 128" in out[("copy", "-")]["claim"]
    assert "hawk 0.98 (0.97–0.99), 2 seeds" in out[("copy", "-")]["measured"]
    assert out[("recall", "num_pairs=4")]["verdict"] == "reproduced"
    assert out[("recall", "num_pairs=8")]["verdict"].startswith("inconclusive")


def test_report_opens_with_the_findings_and_prints_settings_as_tables(tmp_path):
    recall = Probe(
        "recall",
        "r",
        {"name": "mqar", "seq_len": 32},
        "num_pairs",
        (4,),
        expects=(Expectation("attention", "hawk", "x"),),
    )
    records = [
        *(_rec("recall", "attention", s, a, setting="num_pairs=4") for s, a in [(0, 0.99), (1, 0.97)]),
        *(_rec("recall", "hawk", s, a, setting="num_pairs=4") for s, a in [(0, 0.4), (1, 0.5)]),
    ]
    settings = {
        "suite": "t", "models": ["attention", "hawk"], "d_model": 8, "n_layers": 1, "seeds": [0, 1], "skipped": [],
        "probes": [{"probe": recall, "train": {"steps": 10, "lr": 0.003}, "task": recall.task}],
    }  # fmt: skip
    write_zoo_report(tmp_path, records, settings)
    md = (tmp_path / "report.md").read_text()
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings[0].startswith("## Findings")
    assert "| recall | num_pairs=4 | attention above hawk on accuracy (x) |" in md
    assert "{" not in md.split("## Summary")[0]  # settings as tables, no Python dicts
    assert "steps 10, lr 0.003" in md
    assert not (tmp_path / "figures" / "recall_difficulty.png").exists()  # one difficulty value: no plot
    assert json.loads((tmp_path / "findings.json").read_text())[0]["verdict"] == "reproduced"


def test_every_suite_probe_states_its_claims_on_models_it_runs():
    from seqzoo.experiments.zoo_models import LM_MODELS

    for suite in SUITES.values():
        for p in suite["probes"]:
            assert p.expects, p.name
            runs = set(p.models or LM_MODELS)
            for e in p.expects:
                assert {e.better, e.worse} <= runs, (p.name, e)
                assert e.at in ("T", "longest") and e.relation in (">", "≈")
                assert e.at == "T" or p.longest_length() is not None, (p.name, e)
