"""Ctrl-C (SIGINT) or SIGTERM during training: finish the step under way, save it, and stop with a message that says
how to resume.

A ``KeyboardInterrupt`` raised at an arbitrary bytecode could land inside ``optimizer.step()`` (AdamW updates the
parameters in several kernels), leaving weights from two different steps. So the first stop signal only sets a flag
that the loop reads between steps; the loop then saves the checkpoint of the last whole step (``save_checkpoint``
writes a temporary file and renames it, so even a kill during that save leaves the previous checkpoint whole). A
second SIGINT or SIGTERM raises ``KeyboardInterrupt`` at once, without saving, for a user who will not wait for the
step to end. SIGTERM is what clusters send before SIGKILL (Slurm preemption, Kubernetes, ``timeout``, ``kill``), and
the only way to stop a background process cleanly: a shell starts ``cmd &`` with SIGINT ignored.

A sweep worker process learns of a stop its parent received through :func:`follow_parent_stop` (a shared signal
number, not a forwarded signal: a signal sent to the whole process group already reached the worker, and a second
one would mean "stop now, unsaved").
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_parent_stop: Any = None  # in a sweep worker: a multiprocessing Value('i'), the parent's stop signal (0: none)


def follow_parent_stop(shared_signal: Any) -> None:
    """In a worker process: a non-zero ``shared_signal.value`` (set by the parent) counts as this process's first
    stop signal, in every :class:`StopRequest` it enters."""
    global _parent_stop
    _parent_stop = shared_signal


def parent_stop_signal() -> int:
    """The stop signal the parent process shared (0: none, or not a worker)."""
    return int(_parent_stop.value) if _parent_stop is not None else 0


class StopRequest:
    """``with StopRequest(enabled) as stop:`` ... ``if stop.requested: ...``; ``stop.signum`` is the signal that asked
    to stop. Installs the SIGINT and SIGTERM handlers only in the main thread (Python allows no other), each only where
    that signal is not ignored; restores the previous handlers on exit."""

    def __init__(self, enabled: bool = True, notice: bool = True):
        self.enabled, self.notice = enabled, notice  # notice: say at once that the step is being finished
        self._signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def signum(self) -> int | None:
        return self._signum or parent_stop_signal() or None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> StopRequest:
        if self.enabled and threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                previous = signal.getsignal(signum)
                # a process started with a signal ignored keeps it so; None: a handler set outside Python, which
                # could not be put back
                if previous is not signal.SIG_IGN and previous is not None:
                    self._previous[signum] = previous
                    signal.signal(signum, self._on_signal)
        return self

    def _on_signal(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self._signum = signum
        if self.notice:
            print(
                f"\n{signal.Signals(signum).name}: stopping after the current step and saving a checkpoint "
                "(SIGINT/Ctrl-C or SIGTERM again: stop now, unsaved)",
                file=sys.stderr,
                flush=True,
            )

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
