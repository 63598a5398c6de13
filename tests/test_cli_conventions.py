"""The `seqzoo` command line follows one set of conventions (issue #46): every option of every subcommand explains
itself and shows its default, ``--version``, one name per idea (old spellings kept as hidden aliases), one
``--device`` option, ``-v`` shows which implementation ran, and the zoo's and experiments' sweeps show a progress
bar over all their runs."""

import argparse
import os
import re
from collections import defaultdict
from pathlib import Path

import pytest

import seqzoo
from seqzoo.cli import main, make_parser
from seqzoo.cli_options import DEVICE_CHOICES, DEVICE_HELP, subparsers
from seqzoo.sweep import RunSpec, run_sweep

ROOT = Path(__file__).resolve().parents[1]


def square(config, run_dir):
    """A sweep run that costs nothing (the runner imports it by name: pytest puts tests/ on sys.path)."""
    return {"y": config["x"] ** 2}


def chatty(config, run_dir):
    """A sweep run that logs one INFO line on a seqzoo logger, as the ops do when they pick an implementation."""
    import logging

    logging.getLogger("seqzoo.kernels").info("worker run x=%s", config["x"])
    return {"y": config["x"]}


@pytest.fixture(scope="module")
def parser():
    return make_parser()


def _commands(parser):
    return [("", parser), *subparsers(parser)]


def _options(sub):
    """The options a user sees: every action but help, the subcommand dispatcher and hidden aliases."""
    for a in sub._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) or a.help == argparse.SUPPRESS:
            continue
        yield a


def _shown_help(sub, action) -> str:
    return sub._get_formatter()._expand_help(action) if action.help else ""


def test_the_walk_reaches_every_subcommand(parser):
    names = {words for words, _ in _commands(parser)}
    for cmd in ("list", "train", "eval", "generate", "zoo", "bench", "experiment", "convert", "kernels check"):
        assert cmd in names, names


def test_every_option_has_help_that_shows_its_default(parser):
    """A flag (off unless given) and a positional that must be given have no default to show; every other option's
    help names its default, written by the formatter or, where it comes from elsewhere, by the help itself."""
    missing_help, missing_default = [], []
    for words, sub in _commands(parser):
        for a in _options(sub):
            where = f"seqzoo {words} {'/'.join(a.option_strings) or a.dest}"
            text = _shown_help(sub, a)
            if not text.strip():
                missing_help.append(where)
            required_positional = not a.option_strings and a.nargs not in ("?", "*")
            if a.nargs == 0 or a.required or required_positional:
                continue
            if "(default" not in text and "default:" not in text:  # not a value named 'default'
                missing_default.append(where)
    assert not missing_help, missing_help
    assert not missing_default, missing_default


def test_train_help_shows_the_trainers_defaults(capsys):
    from seqzoo.train.config import TrainConfig

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines anywhere
    d = TrainConfig()
    for flag, value in (
        ("--steps", d.steps),
        ("--lr", d.lr),
        ("--batch-size", d.batch_size),
        ("--warmup-steps", d.warmup_steps),
        ("--seed", d.seed),
    ):
        at = text.index(f"{flag} {flag[2:].upper().replace('-', '_')} ")
        shown = text[at : text.index(")", text.index("(default:", at)) + 1]
        assert f"else {value})" in shown, (flag, shown)


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"seqzoo {seqzoo.__version__}"


def test_device_has_the_same_choices_and_help_in_every_subcommand(parser):
    found = {}
    for words, sub in _commands(parser):
        for a in sub._actions:
            if "--device" in a.option_strings:
                found[words] = (list(a.choices), a.help.startswith(DEVICE_HELP))
    assert {"train", "zoo", "bench"} <= set(found), found
    assert set(map(str, found.values())) == {str((list(DEVICE_CHOICES), True))}, found
    assert list(DEVICE_CHOICES) == ["auto", "cpu", "cuda", "cuda:N"]
    assert "cuda:3" in DEVICE_CHOICES and "cuda:x" not in DEVICE_CHOICES and "mps" not in DEVICE_CHOICES


def test_one_name_per_idea_across_subcommands(parser):
    """A flag has one destination in every subcommand, and the replaced spellings parse but are not shown."""
    dests = defaultdict(set)
    for _, sub in _commands(parser):
        for a in _options(sub):
            for opt in a.option_strings:
                dests[opt].add(a.dest)
    assert {opt: d for opt, d in dests.items() if len(d) > 1} == {}
    commands = dict(_commands(parser))
    for words, old, new in (
        ("bench", "--batch", "--batch-size"),
        ("zoo", "--models", "--families"),
        ("zoo", "--mixers", "--families"),
        ("kernels check", "--jobs", "--procs"),
    ):
        shown = re.findall(r"--[\w-]+", commands[words].format_help())
        assert old not in shown and new in shown, (words, old)


@pytest.mark.parametrize(
    "argv, dest, value",
    [
        (["bench", "--batch", "4"], "batch_size", 4),
        (["bench", "--batch-size", "4"], "batch_size", 4),
        (["zoo", "--models", "attention,hawk"], "families", "attention,hawk"),
        (["zoo", "--mixers", "attention"], "families", "attention"),
        (["zoo", "--families", "hawk"], "families", "hawk"),
        (["zoo", "--seed", "3"], "seeds", "3"),
        (["kernels", "check", "--jobs", "2"], "procs", 2),
        (["kernels", "check", "--procs", "2"], "procs", 2),
        (["train", "--device", "cuda:1"], "device", "cuda:1"),
    ],
)
def test_old_spellings_still_parse(parser, argv, dest, value):
    assert getattr(parser.parse_args(argv), dest) == value


def test_bad_device_is_refused_by_every_subcommand(parser, capsys):
    for argv in (["train"], ["zoo"], ["bench"]):
        with pytest.raises(SystemExit) as e:
            parser.parse_args([*argv, "--device", "gpu"])
        assert e.value.code == 2 and "--device" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbosity_before_or_after_the_command(parser, where):
    argv = ["-v", "list"] if where == "before" else ["list", "-v"]
    assert parser.parse_args(argv).verbosity == 1
    assert parser.parse_args(["-q", "list"] if where == "before" else ["list", "-q"]).verbosity == -1
    assert parser.parse_args(["list"]).verbosity == 0


def test_list_families_names_what_zoo_and_bench_take(capsys):
    from seqzoo.bench.models import FAMILIES
    from seqzoo.experiments.zoo_models import ZOO_MODELS

    assert main(["list", "families"]) == 0
    out = capsys.readouterr().out
    assert "zoo --families" in out and "bench --suite models --families" in out
    for name in (*ZOO_MODELS, *FAMILIES):
        assert f"  {name} " in out, name
    assert "hawk-tiny" not in out  # presets are listed apart (`list presets`)


def _tiny_train(tmp_path, capsys, monkeypatch, before=(), after=()):
    """A one-step hawk-tiny run in this process, with nothing logged yet (``kernels_reset``: each op logs its first
    use once per process); returns what it wrote to stderr."""
    from seqzoo.kernels import switch

    monkeypatch.setattr(switch, "_seen", set())
    args = [*before, "train", *after, "--model", "hawk-tiny", "--task", "mqar", "--task-arg", "num_pairs=2"]
    args += ["--task-arg", "seq_len=16", "--steps", "1", "--batch-size", "4", "--eval-every", "0"]
    args += ["--set", "train.eval_samples=8", "--no-progress", "--out", str(tmp_path)]
    capsys.readouterr()
    assert main(args) == 0
    return capsys.readouterr().err


def test_verbose_shows_which_implementation_ran_and_the_default_does_not(tmp_path, capsys, kernels_reset, monkeypatch):
    """hawk-tiny runs the RG-LRU and the short causal conv: with -v each op's first use names its implementation
    (the seqzoo.kernels logger); without -v those INFO lines stay hidden (-v after the command: the parser test)."""
    loud = _tiny_train(tmp_path / "loud", capsys, monkeypatch, before=["-v"])
    assert "seqzoo.kernels: rglru runs the" in loud, loud
    assert "seqzoo.kernels: causal_conv1d runs the" in loud, loud
    plain = _tiny_train(tmp_path / "plain", capsys, monkeypatch, after=["--seed", "1"])
    assert "runs the" not in plain, plain


def test_sweep_bar_counts_every_run_and_found_runs_as_done(tmp_path, capsys):
    specs = [RunSpec.of("test_cli_conventions:square", {"x": x}, {"x": x}) for x in (1, 2, 3, 2)]  # one duplicate
    run_sweep(specs[:1], tmp_path, log=lambda *_: None, code="v", progress=True)
    capsys.readouterr()
    run_sweep(specs, tmp_path, log=lambda *_: None, code="v", progress=True)
    err = capsys.readouterr().err
    assert "runs:  25%" in err and "1/4" in err, err  # the run found done counts at the start
    assert "4/4" in err and "3/4" not in err.split("4/4")[-1], err  # the duplicate finishes with its run
    run_sweep(specs, tmp_path / "quiet", log=lambda *_: None, code="v", progress=False)
    assert "runs:" not in capsys.readouterr().err


@pytest.mark.parametrize("verbose", [True, False])
def test_spawned_sweep_workers_log_at_the_command_lines_level(tmp_path, capfd, verbose):
    """``seqzoo -v zoo --procs 2``: the runs happen in spawned workers, which log at the parent's level."""
    from seqzoo.cli_logging import command_logging

    specs = [RunSpec.of("test_cli_conventions:chatty", {"x": x}, {"x": x}) for x in (1, 2)]
    with command_logging(1 if verbose else 0):
        run_sweep(specs, tmp_path, procs=2, log=lambda *_: None, code="v", progress=False)
    err = capfd.readouterr().err
    assert ("seqzoo.kernels: worker run x=1" in err and "worker run x=2" in err) == verbose, err
    if not verbose:
        assert "worker run" not in err, err


def test_quiet_turns_off_the_experiment_bars(monkeypatch):
    """``seqzoo -q experiment`` (or ``--no-progress``) runs the experiment inside ``progress_bars(False)``."""
    import seqzoo.experiments as experiments
    from seqzoo.sweep import runner

    seen = []

    class Exp:
        name = "probe"

        def run(self, out_dir, **_):
            seen.append(runner._SHOW_PROGRESS.get())
            return {"table": ""}

    monkeypatch.setattr(experiments, "get_experiment", lambda name: Exp())
    out = str(Path(os.environ.get("TMPDIR", "/tmp")) / f"seqzoo-quiet-{os.getpid()}")
    assert main(["-q", "experiment", "probe", "--out", out]) == 0
    assert main(["experiment", "probe", "--out", out]) == 0
    assert main(["experiment", "probe", "--out", out, "--no-progress"]) == 0
    assert seen == [False, True, False]
