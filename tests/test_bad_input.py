"""Bad input on the command line: exit code 2, one line naming the option, no traceback, nothing written.

Each case runs ``seqzoo.cli.main`` in-process. argparse's own refusals (a wrong type for an int option) also exit 2
through ``SystemExit``; both are accepted. The table covers every subcommand of ``seqzoo --help``.
"""

from pathlib import Path

import pytest
import torch

from seqzoo.cli import main, make_parser
from seqzoo.errors import InputError, MissingFileError

RUN = "RUN"  # replaced by a real tiny training folder
OUT = "OUT"  # replaced by an output folder that must stay untouched
BELOW_A_FILE = OUT + "/keep.txt/sub"  # a path below the file keep.txt: no folder can be made there
# config files written beside --out for each case: malformed TOML and JSON, a section that is not a table
CONFIGS = {
    "BAD.toml": "[train\nsteps = 3\n",
    "BAD.json": '{"train": {"steps": 3,}}',
    "FLAT.toml": "train = 3\n",
    "EXTRA.toml": "[train]\nsteps = 3\n[optim]\nlr = 1e-3\n",
}
TINY_TRAIN = ["train", "--model", "attention-tiny", "--task", "mqar", "--task-arg", "num_pairs=2", "--steps", "2"]

CASES = [
    # (subcommand args, word the message must contain)
    (["list", "bogus"], "bogus"),
    (["train", "--model", "no-such-preset", "--task", "mqar", "--out", OUT], "no-such-preset"),
    (["train", "--model", "attention-tiny", "--task", "no-such-task", "--out", OUT], "no-such-task"),
    (["train", "--model", "attention-tiny", "--task", "mqar", "--steps", "0", "--out", OUT], "steps"),
    (["train", "--model", "attention-tiny", "--task", "mqar", "--steps", "-3", "--out", OUT], "steps"),
    (["train", "--model", "attention-tiny", "--task", "mqar", "--batch-size", "0", "--out", OUT], "batch_size"),
    (["train", "--model", "attention-tiny", "--task", "mqar", "--lr", "-1", "--out", OUT], "lr"),
    (["train", "--model", "attention-tiny", "--task", "mqar", "--steps", "two", "--out", OUT], "steps"),
    (["train", "--model", "attention-tiny", "--task", "mqar", "--model-arg", "d_model=abc", "--out", OUT], "d_model"),
    (["train", "--model", "attention-tiny", "--task", "mqar", "--task-arg", "num_pairs=-1", "--out", OUT], "num_pairs"),
    (["train", "--model", "attention-tiny", "--task", "mqar", "--set", "nosection.x=1", "--out", OUT], "nosection"),
    (["train", "--config", "no/such/config.toml", "--out", OUT], "config"),
    (["eval", "--run", "no/such/run"], "no/such/run"),
    (["eval", "--run", RUN, "--samples", "-4"], "--samples"),
    (["eval", "--run", RUN, "--samples", "0"], "--samples"),
    (["eval", "--run", RUN, "--batch-size", "0"], "--batch-size"),
    (["eval", "--run", RUN, "--task", "no-such-task"], "no-such-task"),
    (["eval", "--run", RUN, "--out", OUT + "/m.json", "--samples", "x"], "samples"),
    (["generate", "--run", RUN, "--ids", "3,4", "--temperature", "-2"], "temperature"),
    (["generate", "--run", RUN, "--ids", "3,4", "--temperature", "1", "--top-k", "0"], "top_k"),
    (["generate", "--run", RUN, "--ids", "3,4", "--temperature", "1", "--top-p", "1.5"], "top_p"),
    (["generate", "--run", RUN, "--ids", "3,4", "--top-k", "5"], "--top-k"),
    (["generate", "--run", RUN, "--ids", "3,4", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["generate", "--run", "no/such/run", "--ids", "3,4"], "no/such/run"),
    (["zoo", "--steps", "0", "--out", OUT], "steps"),
    (["zoo", "--procs", "0", "--out", OUT], "procs"),
    (["zoo", "--families", "no-such-model", "--out", OUT], "no-such-model"),
    (["zoo", "--probes", "no-such-probe", "--out", OUT], "no-such-probe"),
    (["zoo", "--suite", "huge", "--out", OUT], "suite"),
    (["bench", "--mixers", "no-such-mixer", "--lengths", "16", "--out", OUT], "no-such-mixer"),
    (["bench", "--mixers", "attention", "--modes", "sdpa,bogus", "--lengths", "16", "--out", OUT], "bogus"),
    (["bench", "--mixers", "attention", "--lengths", "-16", "--out", OUT], "lengths"),
    (["experiment", "no-such-experiment", "--out", OUT], "no-such-experiment"),
    (["experiment", "griffin-mqar", "--set", "stepz=3", "--out", OUT], "stepz"),
    (["experiment", "kernels-bench", "--set", "n_heads=0", "--set", "lengths=16", "--out", OUT], "n_heads"),
    (["convert", "no/such/folder", "--out", OUT], "no/such/folder"),
    (["kernels", "check", "--targets", "sm_12", "--out", OUT], "sm_12"),
    # issue #42 round 2: wrong types, non-finite numbers, missing devices, malformed configs, unwritable outputs
    ([*TINY_TRAIN, "--task-arg", "num_pair=2", "--out", OUT], "num_pair"),
    ([*TINY_TRAIN, "--task-arg", "seq_len=abc", "--out", OUT], "seq_len"),
    ([*TINY_TRAIN, "--set", "train.lr=abc", "--out", OUT], "lr"),
    ([*TINY_TRAIN, "--lr", "nan", "--out", OUT], "lr"),
    ([*TINY_TRAIN, "--lr", "inf", "--out", OUT], "lr"),
    ([*TINY_TRAIN, "--set", "train.weight_decay=-1", "--out", OUT], "weight_decay"),
    ([*TINY_TRAIN, "--set", "train.grad_clip=NaN", "--out", OUT], "grad_clip"),
    ([*TINY_TRAIN, "--set", "train.eps=0", "--out", OUT], "eps"),
    ([*TINY_TRAIN, "--set", "train.betas=[0.9]", "--out", OUT], "betas"),
    ([*TINY_TRAIN, "--set", "train.steps=true", "--out", OUT], "steps"),
    ([*TINY_TRAIN, "--lr", "0.01", "--set", "train.lr.x=1", "--out", OUT], "train.lr"),
    ([*TINY_TRAIN, "--model-arg", "mlp_ratio=abc", "--out", OUT], "mlp_ratio"),
    ([*TINY_TRAIN, "--model-arg", "norm_eps=NaN", "--out", OUT], "norm_eps"),
    ([*TINY_TRAIN, "--device", "no-such-device", "--out", OUT], "device"),
    ([*TINY_TRAIN, "--distributed", "fsdp", "--out", OUT], "fsdp"),
    ([*TINY_TRAIN, "--out", BELOW_A_FILE], "--out"),
    (["train", "--config", "BAD.toml", "--out", OUT], "--config"),
    (["train", "--config", "BAD.json", "--out", OUT], "--config"),
    (["train", "--config", "FLAT.toml", "--out", OUT], "train"),
    (["train", "--config", "EXTRA.toml", "--out", OUT], "optim"),
    (["eval", "--run", RUN, "--samples", "8", "--out", BELOW_A_FILE + "/m.json"], "--out"),
    (["eval", "--run", RUN, "--samples", "8", "--out", OUT], "--out"),
    (["eval", "--run", RUN, "--samples", "8", "--task-arg", "seq_len=abc"], "seq_len"),
    (["generate", "--run", RUN, "--ids", "3,x"], "--ids"),
    (["generate", "--run", RUN, "--ids", "3,4", "--temperature", "nan"], "temperature"),
    (["zoo", "--lr", "nan", "--out", OUT], "lr"),
    (["zoo", "--steps", "1", "--out", BELOW_A_FILE], "--out"),
    (["bench", "--mixers", "attention", "--lengths", "16", "--out", BELOW_A_FILE], "--out"),
    (["bench", "--suite", "models", "--families", "hawk", "--lengths", "16", "--out", BELOW_A_FILE], "--out"),
    (["bench", "--mixers", "attention", "--lengths", "16", "--timeout", "nan", "--out", OUT], "--timeout"),
    (["bench", "--mixers", "attention", "--lengths", "16", "--d-model", "0", "--out", OUT], "--d-model"),
    (["bench", "--mixers", "attention", "--lengths", "16", "--mixer-kwargs", "{bad", "--out", OUT], "--mixer-kwargs"),
    (["experiment", "griffin-mqar", "--set", "steps=abc", "--out", OUT], "steps"),
    (["experiment", "griffin-mqar", "--set", "lr=NaN", "--out", OUT], "lr"),
    (["experiment", "griffin-mqar", "--out", BELOW_A_FILE], "--out"),
    (["convert", RUN, "--out", BELOW_A_FILE], "--out"),
    (["kernels", "check", "--out", BELOW_A_FILE], "--out"),
]
NEEDS_NO_CUDA = ([*TINY_TRAIN, "--device", "cuda", "--out", OUT], "cuda")  # refused before run.json is written
CASES.append(NEEDS_NO_CUDA)


def _snapshot(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")} if root.exists() else {}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    args = ["train", "--model", "attention-tiny", "--task", "mqar", "--task-arg", "num_pairs=2"]
    args += ["--task-arg", "seq_len=16", "--steps", "1", "--out", str(run), "--no-progress"]
    assert main(args) == 0
    return run


def test_the_table_covers_every_subcommand():
    parser = make_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    covered = {args[0] for args, _ in CASES}
    assert set(sub.choices) <= covered, sorted(set(sub.choices) - covered)


@pytest.mark.parametrize("args, word", CASES, ids=[" ".join(a[:4]) for a, _ in CASES])
def test_bad_input_exits_2_naming_the_option(args, word, tiny_run, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("untouched")
    before, run_before = _snapshot(out), _snapshot(tiny_run)
    if (args, word) == NEEDS_NO_CUDA and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for name, text in CONFIGS.items():
        (tmp_path / name).write_text(text)
    argv = [
        str(tiny_run) if a == RUN else str(tmp_path / a) if a in CONFIGS else a.replace(OUT, str(out)) for a in args
    ]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusal
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert word in err, err
    assert len([line for line in err.strip().splitlines() if "error" in line]) == 1, err
    assert _snapshot(out) == before, "files created or changed under --out"
    assert _snapshot(tiny_run) == run_before, "the run folder was changed"


def test_real_bugs_keep_their_traceback(monkeypatch):
    """Only InputError becomes exit 2: any other exception (a bug) propagates."""
    import seqzoo.cli as cli

    def boom(args):
        raise TypeError("a bug, not bad input")

    parser = cli.make_parser()
    ns = parser.parse_args(["list"])
    ns.fn = boom
    monkeypatch.setattr(cli, "make_parser", lambda: type("P", (), {"parse_args": lambda self, argv: ns})())
    with pytest.raises(TypeError, match="a bug"):
        cli.main(["list"])


def test_input_error_is_a_value_error_and_missing_file_a_file_not_found():
    assert issubclass(InputError, ValueError) and issubclass(InputError, TypeError)
    assert issubclass(MissingFileError, InputError) and issubclass(MissingFileError, FileNotFoundError)


def test_number_of_cases_in_docs():
    """docs/foundation.md states how many bad-input cases the table tries."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "foundation.md").read_text()
    assert f"{len(CASES)} bad-input cases" in text


def test_cpu_kernel_bench_uses_the_shapes_it_is_given(tmp_path):
    """The CPU kernel benchmark replaced --tokens/--n-heads/--dk/--dv by its own small shapes without a word."""
    from seqzoo.bench.kernels import run_kernel_bench

    rows = run_kernel_bench(
        "cpu", tmp_path, [16], tokens=32, n_heads=3, dk=8, dv=4, rounds=1, plot=False, ops=("mlstm",)
    )
    assert rows and all((r["B"], r["H"], r["Dk"], r["Dv"]) == (2, 3, 8, 4) for r in rows)
    default = run_kernel_bench("cpu", tmp_path / "d", [16], rounds=1, plot=False, ops=("mlstm",))
    assert all((r["B"], r["H"], r["Dk"], r["Dv"]) == (1, 2, 32, 32) for r in default)  # CPU defaults when unset
