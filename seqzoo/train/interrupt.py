"""Ctrl-C during training: finish the step under way, save it, and stop with a message that says how to resume.

A ``KeyboardInterrupt`` raised at an arbitrary bytecode could land inside ``optimizer.step()`` (AdamW updates the
parameters in several kernels), leaving weights from two different steps. So the first SIGINT only sets a flag that
the loop reads between steps; the loop then saves the checkpoint of the last whole step (``save_checkpoint`` writes
a temporary file and renames it, so even a kill during that save leaves the previous checkpoint whole). A second
SIGINT raises ``KeyboardInterrupt`` at once, without saving, for a user who will not wait for the step to end.
"""

from __future__ import annotations

import signal
import sys
import threading


class StopRequest:
    """``with StopRequest(enabled) as stop:`` ... ``if stop.requested: ...``. Installs the SIGINT handler only in the
    main thread (Python allows no other) and only where SIGINT is not ignored; restores the previous one on exit."""

    def __init__(self, enabled: bool = True, notice: bool = True):
        self.enabled, self.notice = enabled, notice  # notice: say at once that the step is being finished
        self.requested = False
        self._previous = None

    def __enter__(self) -> StopRequest:
        if self.enabled and threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if previous is not signal.SIG_IGN:  # a process started with SIGINT ignored keeps it so
                self._previous = previous
                signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def _on_sigint(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self.notice:
            print(
                "\ninterrupt: stopping after the current step and saving a checkpoint (Ctrl-C again: stop now, unsaved)",
                file=sys.stderr,
                flush=True,
            )

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
