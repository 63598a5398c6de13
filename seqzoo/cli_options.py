"""What every ``seqzoo`` subcommand shares on its command line, so that one idea has one name and one meaning.

* ``add_device_option``: the one ``--device`` option (``auto | cpu | cuda | cuda:N``) of every subcommand with one.
* ``add_hidden_alias``: an old spelling of a renamed option that still parses but is not shown in ``--help``
  (``bench --batch`` for ``--batch-size``, ``zoo --models`` for ``--families``), so scripts and notes keep working.
* ``DefaultsHelpFormatter``: help that ends every option's text with its default, unless the text already says it.
* ``finish_parsers``: applied to the finished parser tree; gives every (sub)parser that formatter and the global
  ``-v/--verbose`` and ``-q/--quiet`` options, which are accepted before or after the subcommand.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator


class DeviceChoices:
    """The values of ``--device``: ``auto`` (CUDA when available, else the CPU), ``cpu``, ``cuda``, ``cuda:N``.

    argparse checks a value with ``in`` and lists the choices by iterating, so this holds every ``cuda:N`` while
    showing the four forms."""

    NAMES = ("auto", "cpu", "cuda", "cuda:N")

    def __iter__(self) -> Iterator[str]:
        return iter(self.NAMES)

    def __contains__(self, value: object) -> bool:
        if value in ("auto", "cpu", "cuda"):
            return True
        return isinstance(value, str) and value.startswith("cuda:") and value[5:].isdigit()


DEVICE_CHOICES = DeviceChoices()
DEVICE_HELP = "where to run: auto (cuda when available, else cpu) | cpu | cuda | cuda:N (the N-th GPU)"


def add_device_option(parser, default: str | None, default_text: str | None = None, note: str = "") -> argparse.Action:
    """``--device`` with the choices and meaning of every subcommand; ``default_text`` says where a ``None`` default
    comes from (e.g. "the suite's, cpu"), ``note`` what the command does differently on a GPU."""
    shown = default_text if default_text is not None else default
    return parser.add_argument(
        "--device",
        default=default,
        choices=DEVICE_CHOICES,
        metavar="{" + ",".join(DEVICE_CHOICES) + "}",
        help=f"{DEVICE_HELP}{'; ' + note if note else ''} (default: {shown})",
    )


def concrete_device(name: str) -> str:
    """``auto`` as the device it means on this machine; any other name as it is (for code that needs a real one)."""
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def add_hidden_alias(parser, *names: str, of: argparse.Action) -> None:
    """Old spellings ``names`` of the option ``of``: same destination and type, not shown in ``--help``."""
    parser.add_argument(*names, dest=of.dest, type=of.type, help=argparse.SUPPRESS, default=argparse.SUPPRESS)


class _ShowDefaults:
    """Ends an option's help with ``(default: X)`` unless the help already says ``(default ...`` or ``default: ...``
    itself (a value named 'default' does not count). Flags (off unless given), positionals that must be given and
    options without a default (None) get nothing: where None stands for "the preset's" or "the suite's", the help
    says so itself."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        # `is False`, not `in (None, False, ...)`: 0 == False, and a default of 0 is shown
        unset = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        if "(default" in text or "default:" in text or unset or action.nargs == 0:
            return text
        if not action.option_strings and action.nargs not in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return text
        return f"{text} (default: %(default)s)"


class DefaultsHelpFormatter(_ShowDefaults, argparse.HelpFormatter):
    """Wrapped descriptions, defaults shown."""


class RawDescriptionDefaultsHelpFormatter(_ShowDefaults, argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written (tables, examples), defaults shown."""


def subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every subcommand's parser below ``parser``, nested ones too (``kernels check``), as (command words, parser)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                for words, nested in subparsers(sub):
                    yield f"{name} {words}", nested


def _add_verbosity(parser: argparse.ArgumentParser, default) -> None:
    group = parser.add_argument_group("global options (before or after the command)")
    one = group.add_mutually_exclusive_group()
    one.add_argument(
        "-v",
        "--verbose",
        dest="verbosity",
        action="store_const",
        const=1,
        default=default,
        help="log which implementation each op runs (mode, Triton kernel or C path) and why one fell back",
    )
    one.add_argument(
        "-q",
        "--quiet",
        dest="verbosity",
        action="store_const",
        const=-1,
        default=default,
        help="no progress bars and no log lines below warnings",
    )


def finish_parsers(parser: argparse.ArgumentParser, version: str) -> argparse.ArgumentParser:
    """Give the whole tree the defaults-showing help, ``--version`` and the global -v/-q options. A subcommand's
    -v/-q default is SUPPRESS, so ``seqzoo -v train`` keeps the -v given before the command."""
    parser.add_argument("--version", action="version", version=f"seqzoo {version}", help="print the version and exit")
    _add_verbosity(parser, 0)
    for _, sub in [("", parser), *subparsers(parser)]:
        raw = issubclass(sub.formatter_class, argparse.RawDescriptionHelpFormatter)
        sub.formatter_class = RawDescriptionDefaultsHelpFormatter if raw else DefaultsHelpFormatter
        if sub is not parser:
            _add_verbosity(sub, argparse.SUPPRESS)
    return parser
