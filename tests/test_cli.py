"""The `seqzoo` command line: help everywhere, listing, zoo and bench write their files, clear errors."""

import csv
import json
import subprocess
import sys

import pytest

from seqzoo.bench import run_mixer_bench
from seqzoo.cli import main, make_parser

COMMANDS = ["list", "train", "eval", "generate", "zoo", "bench", "experiment"]


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_command_has_help(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main([cmd, "--help"])
    assert e.value.code == 0
    assert len(capsys.readouterr().out) > 200


def test_top_level_help_lists_the_commands():
    text = make_parser().format_help()
    for cmd in COMMANDS:
        assert cmd in text


def test_list_shows_mixers_presets_tasks(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for word in ("attention", "local_attention", "attention-tiny", "mqar", "text", "zoo"):
        assert word in out


def test_bad_input_gives_a_clear_error(capsys, tmp_path):
    assert main(["train", "--model", "no-such-preset", "--task", "mqar", "--out", str(tmp_path)]) == 2
    assert "unknown preset" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                "--model",
                "attention-tiny",
                "--task",
                "mqar",
                "--task-arg",
                "num_pairs=100",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "num_pairs" in capsys.readouterr().err
    assert main(["train", "--model", "attention-tiny", "--task", "mqar", "--set", "nosection.x=1"]) == 2
    assert main(["experiment", "no-such-experiment"]) == 2
    assert main(["experiment", "griffin-mqar", "--set", "stepz=3"]) == 2  # unknown option refused by name
    assert "stepz" in capsys.readouterr().err


def test_train_from_a_toml_config_file(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        '[model]\npreset = "attention-tiny"\nd_model = 32\n\n[task]\nname = "mqar"\nvocab_size = 16\n'
        "num_pairs = 2\nseq_len = 16\n\n[train]\nsteps = 4\nbatch_size = 8\neval_samples = 16\n"
    )
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "run"), "--no-progress", "--lr", "1e-3"]) == 0
    assert json.loads((tmp_path / "run" / "train_config.json").read_text())["lr"] == 1e-3
    assert json.loads((tmp_path / "run" / "model" / "config.json").read_text())["d_model"] == 32


def test_zoo_writes_table_files_and_plot(tmp_path):
    out = tmp_path / "zoo"
    assert (
        main(
            [
                "zoo",
                "--families",
                "attention,local_attention",
                "--steps",
                "3",
                "--batch-size",
                "8",
                "--task-arg",
                "seq_len=16",
                "--task-arg",
                "num_pairs=2",
                "--task-arg",
                "vocab_size=16",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    rows = json.loads((out / "results.json").read_text())
    assert [r["model"] for r in rows] == ["attention", "local_attention"]
    assert all(0.0 <= r["valid_accuracy_mean"] <= 1.0 and r["n"] == 2 for r in rows)  # the quick suite's 2 seeds
    assert (out / "report.md").is_file() and "data:image/png;base64," in (out / "report.html").read_text()
    assert (out / "figures" / "mqar_curves.png").stat().st_size > 1000 and (out / "summary.csv").exists()


def test_bench_measures_ratios_against_attention_in_the_same_run(tmp_path):
    rows = run_mixer_bench(
        ["local_attention"], [32, 64], modes="all", d_model=16, out_dir=tmp_path, min_run_time=0.01, progress=False
    )
    base = [r for r in rows if r["mixer"] == "attention"]
    assert len(base) == 2 and all(r["fwdbwd_ms_ratio"] == 1.0 for r in base)
    local = [r for r in rows if r["mixer"] == "local_attention"]
    assert {r["mode"] for r in local} == {"sdpa", "blocked", "naive"}
    assert all(r["fwd_ms"] > 0 and r["fwdbwd_ms"] > 0 and "fwdbwd_ms_ratio" in r for r in local)
    with open(tmp_path / "bench.csv") as f:
        assert len(list(csv.DictReader(f))) == 8
    assert (tmp_path / "bench.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="unknown mixer"):
        run_mixer_bench(["nope"], [8])


def test_console_script_entry_point_runs():
    res = subprocess.run([sys.executable, "-m", "seqzoo", "list", "tasks"], capture_output=True, text=True)
    assert res.returncode == 0 and "mqar" in res.stdout
