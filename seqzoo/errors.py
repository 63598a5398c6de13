"""The one error type for input that seqzoo refuses.

``InputError`` is raised by the project's own validation (CLI options, configs, builders, task and
sampling arguments, run folders) *before* any work starts. It subclasses ``ValueError`` so the mixer
contract ("wrong input gets a clear ValueError") still holds for callers that catch ``ValueError``.
The CLI turns exactly this type into a one-line message and exit code 2; any other exception is a bug
and keeps its traceback.
"""

from __future__ import annotations

import signal


class InputError(ValueError, TypeError):
    """Bad input refused by seqzoo's validation; the message names the argument and what it expects.

    A ``ValueError`` (the mixer contract) and a ``TypeError`` (a wrong-typed argument is bad input too), so callers
    that catch either keep working.
    """


class MissingFileError(InputError, FileNotFoundError):
    """A file or folder the user named does not exist (or lacks what it must hold)."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`InputError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise InputError(message)


class TrainingDivergedError(FloatingPointError):
    """The training loss became NaN or infinite. Raised at once, before that step is logged or checkpointed: the
    run folder keeps its last good checkpoint and holds no non-finite result. The CLI prints it as one line with
    exit code 3 (not 2: the input was valid, the optimisation was not)."""


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by SIGINT (Ctrl-C) or SIGTERM after a whole step; ``step`` is that step, ``checkpoint`` the
    file holding it (None when the run has no output folder or no step was done) and ``signum`` the signal. The CLI
    prints it as one line with exit code 128 + ``signum`` (130 for SIGINT, 143 for SIGTERM); a
    ``KeyboardInterrupt``, so callers that catch that keep working."""

    def __init__(self, message: str, step: int, checkpoint: str | None, signum: int = signal.SIGINT):
        super().__init__(message)
        self.step, self.checkpoint, self.signum = step, checkpoint, int(signum)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum
