"""Model-level benchmark (seqzoo/bench/models.py, `seqzoo bench --suite models`): tiny shapes on CPU."""

import csv
import json
import math

import pytest
import torch

from seqzoo.bench.decode import state_bytes, states_at
from seqzoo.bench.flops import model_flops
from seqzoo.bench.models import (
    BASELINE,
    DECODE_FIELDS,
    FAMILIES,
    TRAIN_FIELDS,
    count_params,
    decode_flatness,
    family_config,
    format_model_table,
    merge_decode_rounds,
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
    table = format_model_table(rows)
    assert "xLSTM[7:1]" in table and "matmul fraction ÷ transformer" in table and "max ÷ min" in table
    fams = cfg["families"]
    assert all(fams[f]["non_embedding_params"] == fams[f]["params"] - 256 * 16 for f in FAMILIES)
    tf = family_config("transformer", "small", **TINY)
    assert fams["transformer"]["model_flops_per_token"] == {
        str(T): model_flops(tf, T)["train_per_token"] for T in (16, 32)
    }
    assert set(data["decode_flatness"]) == set(FAMILIES) == set(cfg["decode_flatness"])


def test_ci_smoke_small_size_every_field_finite(tmp_path):
    """CI regression guard (issue #16): the suite's code path at the real small size on tiny lengths; every family
    has every figure finite and every ratio column. No timing asserts (timings of a shared CI machine mean nothing).
    In-process CPU points read no memory (the fresh-process test below covers peak_mem_mb / total_peak_mb)."""
    rows = run_model_bench(
        size="small",
        lengths=[32, 64],
        tokens=64,
        steps=1,
        warmup=0,
        decode_lengths=[16],
        decode_steps=1,
        isolate=False,
        out_dir=tmp_path,
        progress=False,
    )
    assert not [r for r in rows if "error" in r]
    measured = {
        "train": [f for f in TRAIN_FIELDS if f not in ("peak_mem_mb", "total_peak_mb")] + ["gemm_gflops"],
        "decode": list(DECODE_FIELDS),
    }
    for fam in FAMILIES:
        for bench, Ts in (("train", [32, 64]), ("decode", [16])):
            got = [r for r in rows if r["family"] == fam and r["bench"] == bench]
            assert sorted(r["T"] for r in got) == Ts, (fam, bench)
            for r in got:
                for f in measured[bench]:
                    assert math.isfinite(r[f]) and r[f] > 0, (fam, bench, f, r.get(f))
                    if f != "gemm_gflops":
                        assert math.isfinite(r[f"{f}_ratio"]) and r[f"{f}_ratio"] > 0, (fam, bench, f)
    with open(tmp_path / "models.csv") as fh:
        header = next(csv.reader(fh))
    assert {"matmul_fraction", "matmul_fraction_ratio", "model_gflops_per_s_ratio", "gemm_gflops"} <= set(header)


def test_matmul_fraction_is_model_flops_rate_over_gemm_rate(tiny_run):
    rows, _ = tiny_run
    for r in (r for r in rows if r["bench"] == "train"):
        cfg = family_config(r["family"], "small", **TINY)
        assert r["model_flops_per_token"] == model_flops(cfg, r["T"])["train_per_token"]
        assert r["model_gflops_per_s"] == pytest.approx(r["model_flops_per_token"] * r["tokens_per_s"] / 1e9)
        assert r["matmul_fraction"] == pytest.approx(r["model_gflops_per_s"] / r["gemm_gflops"])


def test_decode_flatness():
    rows = [
        {"bench": "decode", "family": "hawk", "T": L, "ms_per_token": ms}
        for L, ms in ((2048, 1.1), (1024, 1.0), (8192, 1.05), (4096, 0.9))
    ]
    rows += [{"bench": "decode", "family": "transformer", "T": 1024, "ms_per_token": 2.0}]  # one context: no figure
    rows += [{"bench": "decode", "family": "griffin", "T": 1024, "error": "timeout > 1s"}]
    flat = decode_flatness(rows)
    assert set(flat) == {"hawk"}
    h = flat["hawk"]
    assert h["lengths"] == [1024, 2048, 4096, 8192] and (h["ms_first"], h["ms_last"]) == (1.0, 1.05)
    assert h["max_over_min"] == pytest.approx(1.1 / 0.9)


def test_decode_rounds_keep_each_points_minimum_and_its_rounds():
    """Rounds are interleaved (every family at every L, then again) and each point keeps the least of its rounds'
    medians, with the rounds in order; training rows and errors pass through."""
    rows = [{"bench": "train", "family": "hawk", "T": 16, "tokens_per_s": 5.0}]
    for ms in ((1.2, 3.0), (1.0, None), (1.1, 2.5)):
        for (fam, T), v in zip((("hawk", 1024), ("hawk", 2048)), ms):
            rows.append({"bench": "decode", "family": fam, "T": T, **({"ms_per_token": v} if v else {"error": "x"})})
    rows.append({"bench": "decode", "family": "griffin", "T": 1024, "error": "timeout"})
    out = merge_decode_rounds(rows)
    assert [(r["bench"], r["family"], r["T"]) for r in out] == [
        ("train", "hawk", 16),
        ("decode", "hawk", 1024),
        ("decode", "hawk", 2048),
        ("decode", "griffin", 1024),
    ]
    assert out[1]["ms_per_token"] == 1.0 and out[1]["ms_per_token_rounds"] == [1.2, 1.0, 1.1]
    assert out[2]["ms_per_token"] == 2.5 and out[2]["ms_per_token_rounds"] == [3.0, None, 2.5]
    assert out[3] == rows[-1]  # one round: unchanged
    run = run_model_bench(
        families="hawk", lengths=[16, 32], train=False, decode_steps=1, decode_rounds=2, isolate=False, shape=TINY,
        progress=False,
    )  # fmt: skip
    assert sorted((r["family"], r["T"]) for r in run) == sorted((f, T) for f in (BASELINE, "hawk") for T in (16, 32))
    for r in run:
        assert len(r["ms_per_token_rounds"]) == 2 and r["ms_per_token"] == min(r["ms_per_token_rounds"])
    with pytest.raises(ValueError, match="decode_rounds"):
        run_model_bench(families="hawk", train=False, decode_rounds=0, isolate=False, shape=TINY, progress=False)


def test_10m_configs_are_10m_parameters():
    counts = {}
    for fam in FAMILIES:
        cfg = family_config(fam, "10m")
        counts[fam] = count_params(cfg)
        assert cfg.d_model == 256 and cfg.vocab_size == 256, fam
        assert 0.95 * 10e6 <= counts[fam] <= 1.05 * 10e6, (fam, counts[fam])
    assert max(counts.values()) / min(counts.values()) < 1.10
    x71 = family_config("xlstm71", "10m").layer_mixers()
    assert len(x71) == 24 and [i for i, m in enumerate(x71) if m == "slstm"] == [3, 20]
    assert family_config("griffin", "10m").mixer_kwargs["local_attention"]["head_dim"] == 64
    assert family_config("hawk", "10m", n_layers=2).n_layers == 2  # an explicit depth wins over the size's
    # 125m unchanged by the 10m head / block rules
    assert family_config("griffin", "125m").mixer_kwargs["rglru"]["n_blocks"] == 16
    assert family_config("griffin", "125m").mixer_kwargs["local_attention"]["head_dim"] == 128


def test_10m_decodes_at_1024_to_8192_by_default(tmp_path):
    rows = run_model_bench(
        families="hawk", size="10m", train=False, decode_steps=1, isolate=False, shape=TINY, progress=False
    )
    assert sorted({r["T"] for r in rows}) == [1024, 2048, 4096, 8192]
    assert "max ÷ min" in format_model_table(rows)


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
    assert train["gemm_gflops"] > 0 and train["matmul_fraction"] > 0  # calibrated in the point's own process
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
    with pytest.raises(ValueError, match="compile: must be True or False"):
        run_model_bench(lengths=[16], compile="yes")
    with pytest.raises(ValueError, match="warmup: --compile needs at least 1 warm-up step"):
        run_model_bench(lengths=[16], warmup=0, compile=True)


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
