"""How ``vmledger rebuild`` and ``vmledger replay`` end on a signal: through their ``finally``
blocks, so that their child processes are stopped (and the rebuild's before its lock goes;
docs/operations.md, "Stopping processes"), and with one line saying what they left
(docs/replay.md, "Stopping a replay")."""

from __future__ import annotations

import signal
import time
from types import FrameType
from typing import Any


class CommandStopped(BaseException):
    """A rebuild or a replay ended by a signal (SIGTERM, SIGINT or SIGHUP); ``signum`` is its
    number. A ``BaseException``, as ``KeyboardInterrupt`` is: the handler raises it wherever
    the main thread is, and the checks that take any ``Exception`` of decoding or folding an
    event for damage to the log (``CheckedMapper``, ``domain.folding``) must let it through
    (operator tester: "the log needs repair" of an intact log)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


Handlers = dict[int, Any]


def stop_on_signals() -> Handlers:
    """Make SIGTERM, SIGINT and SIGHUP raise ``CommandStopped`` in the main thread, where the
    rebuild (or the replay) runs, so that it ends through its ``finally`` blocks: its
    transaction rolled back and its child processes stopped (SIGTERM's default ended the
    process there and then, and left a child building, past the rebuild's lock; a replay's
    semaphores were left to multiprocessing's resource tracker to warn of). Only the first
    does: the others arrive while it stops, and would cut that short.

    Never inside the database libraries' own code (eventsourcing's, psycopg's): raised there,
    between a ``BEGIN`` sent and its transaction's context entered, it left a pooled
    SQLite connection inside a transaction nothing would end, and the stop's own count of
    the log failed ("cannot start a transaction within a transaction"; CI, a replay's
    SIGINT). There the stop waits for the call to return, looking again every
    ``_RETRY_S`` (SIGALRM), and after ``_DEFER_AT_MOST_S`` raises wherever it is, so that
    a call that never returns cannot keep the command from stopping. Returns the handlers
    it replaced, for ``restore_signals``."""
    deferred_since: list[float] = []

    def stop_when_safe(signum: int, frame: FrameType | None) -> None:
        if _in_database_code(frame) and (
                not deferred_since or time.monotonic() - deferred_since[0] < _DEFER_AT_MOST_S):
            deferred_since[:] = deferred_since or [time.monotonic()]
            signal.signal(signal.SIGALRM, lambda _alarm, again: stop_when_safe(signum, again))
            signal.setitimer(signal.ITIMER_REAL, _RETRY_S)
            return
        raise CommandStopped(signum)

    def stop(signum: int, frame: FrameType | None) -> None:
        for each in _STOP_SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        stop_when_safe(signum, frame)

    handlers = {signum: signal.signal(signum, stop) for signum in _STOP_SIGNALS}
    handlers[signal.SIGALRM] = signal.getsignal(signal.SIGALRM) or signal.SIG_DFL
    return handlers


def restore_signals(handlers: Handlers) -> None:
    """The ``handlers`` ``stop_on_signals`` replaced, again: the command is over, or
    stopped (a stop still waiting for the database's call is dropped)."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def _in_database_code(frame: FrameType | None) -> bool:
    """Whether ``frame``, or a frame that called it, is the database libraries' code."""
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith(_DATABASE_PACKAGES):
            return True
        frame = frame.f_back
    return False


_DATABASE_PACKAGES = ("eventsourcing.", "psycopg", "sqlite3")
_RETRY_S = 0.005
_DEFER_AT_MOST_S = 5.0

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
