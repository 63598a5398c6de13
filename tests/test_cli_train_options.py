"""``seqzoo train``'s options that set a TrainConfig field come from one table (``seqzoo/cli.py: TRAIN_OPTIONS``,
plus the ``--device`` every subcommand shares), and each of them reaches the run's train section."""

from __future__ import annotations

import dataclasses

import pytest

from seqzoo.cli import TRAIN_OPTIONS, build_run_spec, make_parser
from seqzoo.cli_options import subparsers
from seqzoo.train.config import TrainConfig

FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}


def _train_parser():
    return dict(subparsers(make_parser()))["train"]


def _a_value(option) -> str:
    """A value for ``option`` that is not TrainConfig's default, as typed on the command line."""
    if option.choices:
        return next(c for c in option.choices if c != getattr(TrainConfig, option.field))
    return "0.5" if option.type is float else "3"


def test_every_trainconfig_option_of_train_comes_from_the_table():
    table = {option.field for option in TRAIN_OPTIONS}
    assert table <= FIELDS, table - FIELDS
    valued = {a.dest for a in _train_parser()._actions if a.option_strings and a.nargs != 0}
    written_by_hand = (valued & FIELDS) - table - {"device"}  # --device: the shared option (cli_options.py)
    assert not written_by_hand, f"declare these in TRAIN_OPTIONS: {sorted(written_by_hand)}"


def test_every_table_option_reaches_the_train_section():
    argv = ["train"]
    for option in TRAIN_OPTIONS:
        argv += [option.flag, _a_value(option)]
    args = make_parser().parse_args([*argv, "--device", "cpu"])
    train = build_run_spec(args)["train"]
    for option in TRAIN_OPTIONS:
        assert train[option.field] == (option.type or str)(_a_value(option)), option.flag
    assert train["device"] == "cpu"


@pytest.mark.parametrize("option", [o for o in TRAIN_OPTIONS if o.choices], ids=lambda o: o.flag)
def test_the_tables_choices_are_what_trainconfig_accepts(option, capsys):
    for choice in option.choices:
        TrainConfig(**{option.field: choice})
    with pytest.raises(SystemExit) as stop:
        make_parser().parse_args(["train", option.flag, "bogus"])
    assert stop.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
