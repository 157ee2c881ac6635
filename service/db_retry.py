"""Transient database errors, and trying a call again through them with back-off.

A connection cut by the server (``pg_terminate_backend``, a failover), a pool that could not
hand out a connection in time, a statement or lock timeout, SQLite's "database is locked":
the call may succeed if made again. A job's worker retries through them while its lease
holds (``service.jobs.transient``; docs/jobs.md, "Database errors inside a job"), and
``vmledger changes --follow`` until it is stopped (``service.changes.tail``). The API's waits
for a job (WaitJob, ``sync=true``) read again through them on the same schedule (``pauses``)
until their own bound (service/api/job_waits.py).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from eventsourcing.persistence import InterfaceError, OperationalError

from service.logs import Throttled

log = logging.getLogger(f"vmledger.{__name__}")

R = TypeVar("R")

# The library maps psycopg's and sqlite3's errors to these (eventsourcing.persistence);
# psycopg_pool's PoolTimeout and the server's QueryCanceled/LockNotAvailable are among them.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)

FIRST_WAIT_S = 0.05
LONGEST_WAIT_S = 1.0


def retry_transient(call: Callable[[], R], *, until: Callable[[], float],
                    what: str = "a database call",
                    sleep: Callable[[float], object] = time.sleep,
                    first_wait_s: float = FIRST_WAIT_S, longest_wait_s: float = LONGEST_WAIT_S,
                    level: int = logging.INFO,
                    report: Callable[[str], object] | None = None) -> R:
    """``call()``, again after each transient database error (``TRANSIENT_ERRORS``), waiting
    ``first_wait_s``, twice that, ... up to ``longest_wait_s`` (each jittered down to half, so
    callers cut at once do not all come back at once) between tries, while
    ``time.monotonic()`` is before ``until()`` (read again each time: a renewed lease moves
    it; ``math.inf`` for no end): ``pauses``' schedule.

    The first failure is logged at ``level`` naming ``what``, or, given ``report``, passed to
    it as one line (``WHAT failed (ERROR: its first line); retrying``: a command's own line
    on stderr); giving up, at WARNING, at most once every 10 s for each ``what`` (a loop
    that keeps calling through an outage, the projection runner's lag, gives up every few
    seconds: ``service.logs.Throttled`` says how many it left out). Raises
    the last error once ``until()`` has passed, and anything else ``call`` raises at once, or
    ``sleep`` (which may raise to end the retries: a stop asked for)."""
    schedule = pauses(until, first_wait_s, longest_wait_s)
    tries = 0
    while True:
        try:
            return call()
        except TRANSIENT_ERRORS as error:
            tries += 1
            pause = next(schedule, None)
            if pause is None:
                _gave_up(what)(f"{error} (after {tries} tries)")
                raise
            if tries == 1 and report is not None:
                # libpq's messages run over lines ("... unexpectedly" + "\n\tThis probably
                # means ..."): the first says what happened
                said = str(error).strip().splitlines()[0] if str(error).strip() else ""
                report(f"{what} failed ({type(error).__name__}: {said}); retrying")
            elif tries == 1:
                log.log(level, "%s failed (%s: %s); retrying", what, type(error).__name__,
                        error)
            sleep(pause)


def pauses(until: Callable[[], float], first_s: float, longest_s: float) -> Iterator[float]:
    """The pauses (s) between the tries of a call failing for a while: ``first_s``, twice
    that, ... up to ``longest_s``, each jittered down to as little as half (callers cut at
    once then do not all come back at once), while ``time.monotonic()`` plus the pause is
    before ``until()`` (read again for each pause: a renewed lease moves it). Ends where the
    next pause would reach ``until()``: the caller gives up, rather than wait past it, and
    raises its last error. The one schedule of ``retry_transient`` and of an API wait's
    reads (service/api/job_waits.py), each with its own ``first_s`` and ``longest_s``."""
    wait = first_s
    while True:
        pause = min(wait, longest_s) * random.uniform(0.5, 1.0)
        if time.monotonic() + pause >= until():
            return
        yield pause
        wait = min(wait * 2, longest_s)


_GIVE_UPS: dict[str, Throttled] = {}
_GIVE_UPS_LOCK = threading.Lock()


def _gave_up(what: str) -> Throttled:
    """The throttled warning of the calls named ``what`` that gave up (one for each name:
    the names are the service's own, a few dozen at most)."""
    with _GIVE_UPS_LOCK:
        if what not in _GIVE_UPS:
            _GIVE_UPS[what] = Throttled(log, f"{what} failed; giving up before its deadline",
                                        level=logging.WARNING)
        return _GIVE_UPS[what]
