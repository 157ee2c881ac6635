"""How ``vmledger rebuild`` ends on a signal: through its ``finally`` blocks, so that its
child processes are stopped before its lock goes (docs/operations.md, "Stopping
processes")."""

from __future__ import annotations

import signal
from typing import Any


class RebuildStopped(BaseException):
    """A rebuild ended by a signal (SIGTERM, SIGINT or SIGHUP); ``signum`` is its number.
    A ``BaseException``, as ``KeyboardInterrupt`` is: the handler raises it wherever the main
    thread is, and the checks that take any ``Exception`` of decoding or folding an event
    for damage to the log (``CheckedMapper``, ``domain.folding``) must let it through
    (operator tester: "the log needs repair" of an intact log)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


Handlers = dict[int, Any]


def stop_rebuild_on_signals() -> Handlers:
    """Make SIGTERM, SIGINT and SIGHUP raise ``RebuildStopped`` in the main thread, where the
    rebuild runs, so that it ends through its ``finally`` blocks: its transaction rolled back
    and its child processes stopped (SIGTERM's default ended the process there and then, and
    left a child building, past the rebuild's lock). Only the first does: the others arrive
    while it stops, and would cut that short. Returns the handlers it replaced, for
    ``restore_signals``."""
    def stop(signum: int, _frame: object) -> None:
        for each in _REBUILD_SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        raise RebuildStopped(signum)

    return {signum: signal.signal(signum, stop) for signum in _REBUILD_SIGNALS}


def restore_signals(handlers: Handlers) -> None:
    """The ``handlers`` ``stop_rebuild_on_signals`` replaced, again: the rebuild is over, or
    stopped."""
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


_REBUILD_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
