"""Ctrl-C (SIGINT) or SIGTERM during training: finish the step under way, save it, and stop with a message that says
how to resume.

A ``KeyboardInterrupt`` raised at an arbitrary bytecode could land inside ``optimizer.step()`` (AdamW updates the
parameters in several kernels), leaving weights from two different steps. So the first stop signal only sets a flag
that the loop reads between steps; the loop then saves the checkpoint of the last whole step (``save_checkpoint``
writes a temporary file and renames it, so even a kill during that save leaves the previous checkpoint whole). A
second SIGINT or SIGTERM raises ``KeyboardInterrupt`` at once, without saving, for a user who will not wait for the
step to end. SIGTERM is what clusters send before SIGKILL (Slurm preemption, Kubernetes, ``timeout``, ``kill``), and
the only way to stop a background process cleanly: a shell starts ``cmd &`` with SIGINT ignored.

The processes of a sweep share one stop signal (:func:`sharing_stop`): the first stop signal any of them receives
stops every run, each after its step under way. It is a shared number, not a forwarded signal: a signal sent to the
whole process group already reached each worker, and a second one would mean "stop now, unsaved".
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_shared: Any = None  # an object with an int ``value`` (a multiprocessing Value across processes): 0, or the signal
STOP_NOW = -1  # a shared value that makes the next signal stop at once (the sweep's parent is terminating its workers)


@contextlib.contextmanager
def sharing_stop(shared: Any):
    """Inside the block, a non-zero ``shared.value`` counts as a first stop signal in every :class:`StopRequest` of
    this process, and the first signal one of them receives is written there (for the other processes)."""
    global _shared
    before, _shared = _shared, shared
    try:
        yield shared
    finally:
        _shared = before


def share_stop_for_life(shared: Any) -> None:
    """:func:`sharing_stop` for the rest of this process (a sweep's worker process, from its initializer)."""
    global _shared
    _shared = shared


def shared_stop_signal() -> int:
    """The stop signal shared with this process (0: none, or nothing shared; SIGTERM for :data:`STOP_NOW`)."""
    value = int(_shared.value) if _shared is not None else 0
    return signal.SIGTERM if value == STOP_NOW else value


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
        return self._signum or shared_stop_signal() or None

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
        # second signal: one this process received already (one that reached another process of the sweep first is
        # a first one here: a signal to the process group reaches them all), or the parent stopping its workers now
        if self._signum is not None or (_shared is not None and _shared.value == STOP_NOW):
            raise KeyboardInterrupt
        self._signum = signum
        if _shared is not None and not _shared.value:
            _shared.value = signum
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
