"""How the commands that end (``rebuild``, ``replay``, ``audit verify``, ``history``,
``changes`` without ``--follow``) end on a signal: through their ``finally`` blocks, so that
their child processes are stopped (and the rebuild's before its lock goes; docs/operations.md,
"Stopping processes"), and with one line saying what they left (docs/replay.md, "Stopping a
replay"); and how they do not end on one that comes once their work is done
(``work_done``)."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FrameType
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


@dataclass
class _Stops:
    """What the handlers know of the command running: its stop signal (the first, or None),
    whether ``CommandStopped`` was raised for it, the command whose work is done (None until
    ``work_done``), whether its line was said, and whether the handlers stay until the process
    exits (``hold_until_exit``)."""
    signum: int | None = None
    raised: bool = False
    done: str | None = None
    said: bool = False
    until_exit: bool = False


_STOPS = _Stops()


def stop_on_signals() -> Handlers:
    """Make SIGTERM, SIGINT and SIGHUP raise ``CommandStopped`` in the main thread, where the
    rebuild (or the replay) runs, so that it ends through its ``finally`` blocks: its
    transaction rolled back and its child processes stopped (SIGTERM's default ended the
    process there and then, and left a child building, past the rebuild's lock; a replay's
    semaphores were left to multiprocessing's resource tracker to warn of). Only the first
    does: the others arrive while it stops, and would cut that short.

    Never inside the database libraries' own code (eventsourcing's, psycopg's), nor inside a
    function marked ``uninterrupted`` (a line printed and its position noted): raised there,
    between a ``BEGIN`` sent and its transaction's context entered, it left a pooled
    SQLite connection inside a transaction nothing would end, and the stop's own count of
    the log failed ("cannot start a transaction within a transaction"; CI, a replay's
    SIGINT). There the stop waits for the call to return, looking again every
    ``_RETRY_S`` (SIGALRM), and after ``_DEFER_AT_MOST_S`` raises wherever it is, so that
    a call that never returns cannot keep the command from stopping. Returns the handlers
    it replaced, for ``restore_signals``."""
    _STOPS.signum, _STOPS.raised, _STOPS.done, _STOPS.said = None, False, None, False
    deferred_since: list[float] = []

    def stop_when_safe(signum: int, frame: FrameType | None) -> None:
        if _STOPS.done is not None:  # the work ended while the stop waited, or as it came
            _say_late(_STOPS.done, signum)
            return
        if _in_uninterrupted_code(frame) and (
                not deferred_since or time.monotonic() - deferred_since[0] < _DEFER_AT_MOST_S):
            deferred_since[:] = deferred_since or [time.monotonic()]
            signal.signal(signal.SIGALRM, lambda _alarm, again: stop_when_safe(signum, again))
            signal.setitimer(signal.ITIMER_REAL, _RETRY_S)
            return
        _STOPS.raised = True
        raise CommandStopped(signum)

    def stop(signum: int, frame: FrameType | None) -> None:
        _ignore_stops()
        _STOPS.signum = signum
        stop_when_safe(signum, frame)

    handlers = {signum: signal.signal(signum, stop) for signum in _STOP_SIGNALS}
    handlers[signal.SIGALRM] = signal.getsignal(signal.SIGALRM) or signal.SIG_DFL
    return handlers


def work_done(command: str) -> None:
    """``command`` (``vmledger rebuild``) has done its work, or failed it: what is left is to
    print its result (or its error) and clean up (close the database, end its threads and
    the interpreter). A stop signal from now on does not end it: the first writes one line,
    ``COMMAND: SIGTERM came after the work was done: the result stands``, at once, the
    others are ignored, and the command ends with its own status. Killed by the signal
    there (SIGTERM's default, once ``restore_signals`` had put it back), a rebuild that had
    printed ``rebuilt …`` exited 143, its stdout saying success and its status killed
    (operator tester, 3 of 3). A stop that came while the work's last database call ran
    (still waiting, ``stop_on_signals``) gets that line now; after ``CommandStopped`` was
    raised the command ends as stopped, and the signals stay ignored."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    if _STOPS.raised or _STOPS.done is not None:
        return
    _STOPS.done = command
    if _STOPS.signum is not None:
        _say_late(command, _STOPS.signum)
        return  # the signals are ignored since that one (stop_on_signals' ``stop``)

    def late(signum: int, _frame: FrameType | None) -> None:
        _ignore_stops()
        _say_late(command, signum)

    for each in _STOP_SIGNALS:
        signal.signal(each, late)


def restore_signals(handlers: Handlers) -> None:
    """The ``handlers`` ``stop_on_signals`` replaced, again: the command is over, or
    stopped (a stop still waiting for the database's call is dropped). In the console
    script (``hold_until_exit``) the stop signals keep the handling ``work_done`` or the stop
    gave them until the process exits: what follows the command is its clean-up too."""
    signal.setitimer(signal.ITIMER_REAL, 0)
    keep = _STOPS.until_exit and (_STOPS.done is not None or _STOPS.signum is not None)
    for signum, handler in handlers.items():
        if not (keep and signum in _STOP_SIGNALS):
            signal.signal(signum, handler)


def hold_until_exit() -> None:
    """The process is the console script's, and ends with its command: ``restore_signals``
    leaves a command's stop signals handled as ``work_done`` (or its stop) made them, and
    ``end_process`` ends it."""
    _STOPS.until_exit = True


def end_process(code: object) -> None:
    """End the console script's process with ``code`` (``SystemExit``'s: None, a status, or
    a message for stderr and status 1) once a command has done its work or been stopped:
    its threads joined and its ``atexit`` steps run (logging's, multiprocessing's), as the
    interpreter would, with the command's handling of stop signals still in place, then
    ``os._exit``. The interpreter's own teardown first sets SIGTERM's default back, then
    unloads every module (tens of ms), so a SIGTERM there killed a command whose result was
    printed, status 143. Returns (the interpreter ends the process) for any other command."""
    if not (_STOPS.until_exit and (_STOPS.done is not None or _STOPS.signum is not None)):
        return
    if isinstance(code, str):
        print(code, file=sys.stderr)
    status = code if isinstance(code, int) else 0 if code is None else 1
    getattr(threading, "_shutdown", lambda: None)()  # what the interpreter's exit runs first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a reader gone (output.put ends on it), or a stream closed
    os._exit(status)


def uninterrupted(function: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``function`` as one a stop waits for (``stop_on_signals``): a line printed and
    the position it shows noted together, so that what the stop says was printed last is
    what was. Returns ``function``."""
    _UNINTERRUPTED.add(function.__code__)
    return function


def _say_late(command: str, signum: int) -> None:
    """The one line of a stop signal that came after ``command``'s work was done, once;
    written at once, unbuffered (the handler may run inside a write to stderr's buffer)."""
    if _STOPS.said:
        return
    _STOPS.said = True
    said = (f"{command}: {signal.Signals(signum).name} came after the work was done: the "
            "result stands\n")
    try:
        os.write(2, said.encode())
    except OSError:
        pass  # stderr closed: the status still says how it ended


def _ignore_stops() -> None:
    for each in _STOP_SIGNALS:
        signal.signal(each, signal.SIG_IGN)


def _in_uninterrupted_code(frame: FrameType | None) -> bool:
    """Whether ``frame``, or a frame that called it, is the database libraries' code or a
    function marked ``uninterrupted``."""
    while frame is not None:
        if (frame.f_globals.get("__name__", "").startswith(_DATABASE_PACKAGES)
                or frame.f_code in _UNINTERRUPTED):
            return True
        frame = frame.f_back
    return False


_DATABASE_PACKAGES = ("eventsourcing.", "psycopg", "sqlite3")
_UNINTERRUPTED: set[CodeType] = set()
_RETRY_S = 0.005
_DEFER_AT_MOST_S = 5.0

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
