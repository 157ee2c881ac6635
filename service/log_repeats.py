"""The database pool's repeated lines, throttled where the long-running processes set up their
logging (``service.logs.logging_config``; docs/operations.md, "Logs").

During an outage psycopg's pool tries to reconnect about once a second and logs each attempt
(``error connecting in 'pool-3': ...``, ``reconnection attempt in pool 'pool-3' failed after
3.0 sec``). Its code is not ours, so its lines cannot go through ``service.logs.Throttled``;
``Repeats``, a filter on its loggers, does the same to them: the same kind of line at most once
every 10 s, the next one counting those left out. Operator tester: a 30-s outage gave
``project`` 53 such lines of its 63."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any


class Repeats(logging.Filter):
    """A ``logging.Filter`` that lets through one record of a kind per ``interval_s`` (the
    first at once) and drops the rest, adding to the next one let through
    ``(N similar lines left out in the last T s)``. A kind is the logger's name and the
    record's message before its arguments (``error connecting in %r: %s``): the same
    failure with another error text is the same kind. Thread-safe (the pool logs from its
    own threads). Only on the loggers it is added to: a logger's filters see the records
    logged to it, not to its children (``psycopg`` and ``psycopg.pool`` each have it)."""

    def __init__(self, interval_s: float = 10.0, clock: Any = None):
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock or time.monotonic
        self._lock = threading.Lock()
        # per kind: when it was last let through, and how many were dropped since
        self._kinds: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """True to log ``record`` (then with the count of those left out, if any)."""
        kind = (record.name, str(record.msg))
        with self._lock:
            now = self.clock()
            last, left_out = self._kinds.get(kind, (None, 0))
            if last is not None and now - last < self.interval_s:
                self._kinds[kind] = (last, left_out + 1)
                return False
            self._kinds[kind] = (now, 0)
        if last is not None and left_out:
            record.msg = (f"{record.getMessage()} ({left_out} similar lines left out in the "
                          f"last {now - last:.0f} s)")
            record.args = ()
        return True


_PROCESS_REPEATS: Repeats | None = None


def process_repeats() -> Repeats:
    """This process's one ``Repeats`` (the ``()`` factory of ``logging_config``'s filter):
    configuring the logging again (each test, or uvicorn in a ``serve`` process) adds the
    same filter, which a logger does not hold twice."""
    global _PROCESS_REPEATS
    if _PROCESS_REPEATS is None:
        _PROCESS_REPEATS = Repeats()
    return _PROCESS_REPEATS
