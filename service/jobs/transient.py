"""Transient database errors inside a job: retried with back-off while the job's lease holds
(docs/jobs.md, "Database errors").

A connection cut by the server (``pg_terminate_backend``, a failover), a pool that could not
hand out a connection in time, a statement or lock timeout, SQLite's "database is locked":
the job's steps are idempotent and every save re-checks the ticket, so doing the call again is
safe. Given up only when the lease is about to run out, so a worker never acts on a job
another worker may already have taken over.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from eventsourcing.persistence import InterfaceError, OperationalError

log = logging.getLogger(f"vmledger.{__name__}")

R = TypeVar("R")

# The library maps psycopg's and sqlite3's errors to these (eventsourcing.persistence);
# psycopg_pool's PoolTimeout and the server's QueryCanceled/LockNotAvailable are among them.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)

FIRST_WAIT_S = 0.05
LONGEST_WAIT_S = 1.0


def retry_transient(call: Callable[[], R], *, until: Callable[[], float],
                    what: str = "a database call",
                    sleep: Callable[[float], None] = time.sleep) -> R:
    """``call()``, again after each transient database error, waiting 50 ms, 100 ms, ... up
    to 1 s (jittered) between tries, while ``time.monotonic()`` is before ``until()`` (read
    again each time: a renewed lease moves it). Raises the last error once that moment has
    passed, and anything else ``call`` raises at once."""
    wait = FIRST_WAIT_S
    tries = 0
    while True:
        try:
            return call()
        except TRANSIENT_ERRORS as error:
            tries += 1
            pause = min(wait, LONGEST_WAIT_S) * random.uniform(0.5, 1.0)  # noqa: S311
            if time.monotonic() + pause >= until():
                log.warning("%s failed %d times; giving up before the lease runs out: %s",
                            what, tries, error)
                raise
            if tries == 1:
                log.info("%s failed (%s); retrying", what, error)
            sleep(pause)
            wait *= 2


class PatientDriver:
    """A compute driver whose every call is retried through transient database errors (the
    simulated fleet keeps its world in the database; a real driver's own errors are
    ``ComputeError`` and pass through)."""

    def __init__(self, driver: Any, until: Callable[[], float]):
        self._driver = driver
        self._until = until

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._driver, name)
        if not callable(attribute):
            return attribute

        def patient(*args: Any, **kwargs: Any) -> Any:
            # looked up again on each try, as a caller without this wrapper would
            return retry_transient(lambda: getattr(self._driver, name)(*args, **kwargs),
                                   until=self._until, what=f"compute call {name}")

        return patient
