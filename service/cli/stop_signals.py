"""How ``vmledger rebuild`` and ``vmledger replay`` end on a signal: through their ``finally``
blocks, so that their child processes are stopped (and the rebuild's before its lock goes;
docs/operations.md, "Stopping processes"), and with one line saying what they left
(docs/replay.md, "Stopping a replay")."""

from __future__ import annotations

import signal
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
    does: the others arrive while it stops, and would cut that short. Returns the handlers
    it replaced, for ``restore_signals``."""
    def stop(signum: int, _frame: object) -> None:
        for each in _STOP_SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        raise CommandStopped(signum)

    return {signum: signal.signal(signum, stop) for signum in _STOP_SIGNALS}


def restore_signals(handlers: Handlers) -> None:
    """The ``handlers`` ``stop_on_signals`` replaced, again: the command is over, or
    stopped."""
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
