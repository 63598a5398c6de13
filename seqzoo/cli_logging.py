"""``seqzoo -v``: show the lines the library logs about which implementation ran.

The ops say which of their implementations runs on the ``seqzoo.kernels`` logger (``kernels/switch.py:
note_kernel``: the mode an op's ``auto`` chose, the Triton kernel, the sLSTM's C loop, and why a wanted kernel
fell back) and why a C file is not used on ``seqzoo.native`` (``ops/native_build.py``), at INFO. Without a
handler Python prints only warnings, so the command line attaches one to the ``seqzoo`` logger for the duration of
a command: ``-v`` shows INFO, the default and ``-q`` warnings only. The previous level and handlers come back
afterwards, so calling ``seqzoo.cli.main`` from Python leaves logging as it found it.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

LOGGER = "seqzoo"


class _NameOnce(logging.Formatter):
    """``<logger>: <message>``, without repeating the logger's name where the message already starts with it
    (the kernels switch writes ``seqzoo.kernels: ...`` itself)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        return text if text.startswith(record.name) else f"{record.name}: {text}"


class _AboveBars(logging.StreamHandler):
    """Writes each line above the progress bars on the stream (tqdm clears and redraws them), not into one."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        with tqdm.external_write_mode(file=self.stream):
            super().emit(record)


@contextlib.contextmanager
def command_logging(verbosity: int) -> Iterator[None]:
    """Route the ``seqzoo`` loggers to stderr at INFO (``verbosity > 0``) or WARNING (otherwise) while the block
    runs."""
    logger = logging.getLogger(LOGGER)
    old_level = logger.level
    handler = _AboveBars(sys.stderr)  # the stderr of now: a test's captured stream too
    handler.setFormatter(_NameOnce("%(message)s"))
    logger.setLevel(logging.INFO if verbosity > 0 else logging.WARNING)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
