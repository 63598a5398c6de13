"""What the scripts under tools/ do with refused input, as the ``seqzoo`` command does: one line on stderr, exit 2.

Imported by a script run as ``python tools/<script>.py`` (its folder heads ``sys.path``).
"""

import sys
from collections.abc import Callable

from seqzoo.errors import InputError


def run_tool(main: Callable[[], None]) -> None:
    """Call ``main``; an ``InputError`` becomes ``error: <message>`` on stderr and exit code 2 (any other exception is
    a bug and keeps its traceback)."""
    try:
        main()
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
