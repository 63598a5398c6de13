"""Model-level benchmark (seqzoo/bench/models.py, `seqzoo bench --suite models`): tiny shapes on CPU."""

import csv
import json

import pytest
import torch

from seqzoo.bench.decode import state_bytes, states_at
from seqzoo.bench.models import (
    BASELINE,
    FAMILIES,
    count_params,
    family_config,
    format_model_table,
    run_model_bench,
)
from seqzoo.cli import main
from seqzoo.models.lm import LanguageModel

TINY = {"d_model": 16, "n_layers": 3, "window": 16}  # 3 layers: Griffin's (rglru, rglru, local) pattern


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("models")
    rows = run_model_bench(
        lengths=[16, 32],
        tokens=32,
        steps=1,
        warmup=0,
        decode_steps=2,
        isolate=False,
        shape=TINY,
        out_dir=out,
        progress=False,
    )
    return rows, out


def test_every_family_has_train_and_decode_rows(tiny_run):
    rows, _ = tiny_run
    assert not [r for r in rows if "error" in r]
    for fam in FAMILIES:
        for bench in ("train", "decode"):
            assert sorted(r["T"] for r in rows if r["family"] == fam and r["bench"] == bench) == [16, 32]
    train = [r for r in rows if r["bench"] == "train"]
    assert all(r["tokens_per_s"] > 0 and r["step_ms"] > 0 and r["tokens_per_step"] == 32 for r in train)
    assert {r["batch"] for r in train if r["T"] == 16} == {2}
    dec = [r for r in rows if r["bench"] == "decode"]
    assert all(r["ms_per_token"] > 0 and r["state_bytes"] > 0 for r in dec)


def test_ratios_are_against_the_transformer_of_the_same_run(tiny_run):
    rows, _ = tiny_run
    base = [r for r in rows if r["family"] == BASELINE]
    assert base and all(
        r[f"{f}_ratio"] == 1.0
        for r in base
        for f in (("tokens_per_s", "step_ms") if r["bench"] == "train" else ("ms_per_token", "state_mb"))
    )
    by_key = {(r["bench"], r["T"]): r for r in base}
    for r in rows:
        b = by_key[(r["bench"], r["T"])]
        f = "tokens_per_s" if r["bench"] == "train" else "state_mb"
        assert r[f"{f}_ratio"] == pytest.approx(r[f] / b[f])
    # recurrent states do not grow with the context; the transformer's KV cache does
    dec = {(r["family"], r["T"]): r["state_bytes"] for r in rows if r["bench"] == "decode"}
    assert dec[("transformer", 32)] > 1.9 * dec[("transformer", 16)]  # K, V of every past token (+ positions)
    for fam in ("gateloop", "xlstm10", "xlstm71", "hawk"):
        assert dec[(fam, 32)] == dec[(fam, 16)]


def test_files_are_written(tiny_run):
    rows, out = tiny_run
    with open(out / "models.csv") as f:
        assert len(list(csv.DictReader(f))) == len(rows) == 2 * 2 * len(FAMILIES)
    data = json.loads((out / "models.json").read_text())
    assert len(data["rows"]) == len(rows) and data["meta"]["baseline"] == BASELINE
    cfg = json.loads((out / "config.json").read_text())
    assert set(cfg["families"]) == set(FAMILIES) and set(cfg["configs_125m"]) == set(FAMILIES)
    assert all(v["params"] > 0 for v in cfg["configs_125m"].values())
    assert (out / "models.png").stat().st_size > 1000
    assert "xLSTM[7:1]" in format_model_table(rows)


def test_125m_configs_are_125m_parameters():
    for fam in FAMILIES:
        cfg = family_config(fam, "125m")
        n = count_params(cfg)  # built on the meta device
        assert 0.85 * 125e6 <= n <= 1.15 * 125e6, (fam, n)
    x71 = family_config("xlstm71", "125m")
    assert x71.layer_mixers().count("slstm") == 2 and len(x71.layer_mixers()) == 24
    assert family_config("griffin", "small").layer_mixers()[:3] == ["rglru", "rglru", "local_attention"]
    assert set(family_config("xlstm10", "small").layer_mixers()) == {"mlstm"}


def test_decode_state_covers_every_family():
    """decode.py counts GateLoop's bare complex-tensor state and the xLSTM / RG-LRU dataclass states."""
    torch.manual_seed(0)
    for fam in FAMILIES:
        model = LanguageModel(family_config(fam, "small", **TINY)).eval()
        assert state_bytes(states_at(model, 24)) > 0, fam
    gl = LanguageModel(family_config("gateloop", "small", **TINY)).eval()
    # 3 layers x (B=1, H=16, 1, 1) complex64
    assert state_bytes(states_at(gl, 24)) == 3 * 16 * 8


def test_fresh_process_points_and_timeouts(tmp_path):
    rows = run_model_bench(
        families="transformer",
        lengths=[16],
        tokens=16,
        steps=1,
        warmup=0,
        decode_steps=1,
        shape=TINY,
        timeout=60,
        progress=False,
    )
    train = next(r for r in rows if r["bench"] == "train")
    assert "error" not in train and train["peak_mem_mb"] >= 0 and train["total_peak_mb"] > 0
    rows = run_model_bench(
        families="transformer",
        lengths=[16],
        tokens=16,
        steps=1,
        warmup=0,
        decode=False,
        shape=TINY,
        timeout=0.05,
        progress=False,
    )
    assert rows[0]["error"].startswith("timeout")


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="families: unknown family 'nope'"):
        run_model_bench(families="transformer,nope", lengths=[16])
    with pytest.raises(ValueError, match="lengths"):
        run_model_bench(lengths=[16, 0])
    with pytest.raises(ValueError, match="lengths"):
        run_model_bench(lengths="16,-4")
    with pytest.raises(ValueError, match="decode_lengths"):
        run_model_bench(lengths=[16], decode_lengths="abc")
    with pytest.raises(ValueError, match="size"):
        run_model_bench(size="huge")
    with pytest.raises(ValueError, match="tokens"):
        run_model_bench(lengths=[16], tokens=0)


def test_cli_suite_models_and_errors(tmp_path, capsys):
    out = tmp_path / "cli"
    assert (
        main(
            [
                "bench",
                "--suite",
                "decode",
                "--families",
                "hawk",
                "--lengths",
                "16",
                "--decode-steps",
                "1",
                "--in-process",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "Hawk" in capsys.readouterr().out and (out / "models.csv").exists()
    assert main(["bench", "--suite", "models", "--families", "foo", "--no-progress", "--out", str(out)]) == 2
    assert "unknown family 'foo'" in capsys.readouterr().err
    assert main(["bench", "--suite", "models", "--lengths", "0", "--no-progress", "--out", str(out)]) == 2
    assert "lengths" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    assert e.value.code == 0 and "--suite" in capsys.readouterr().out
