"""Whether a projection runner is running on a database: each runner holds a shared lock
for as long as it runs, and anyone can ask whether someone holds it (docs/operations.md,
"Is a projection runner running?").

Found by a tester: with PostgreSQL and ``vmledger serve`` alone (no embedded runners, no
``vmledger project``), every command answered 202 and every GET 503 ("read models did not
reach position N"), while ``GET /ping`` answered 200 with a growing lag and nothing was
logged. The lock ends with its holder, however it ends, so no row of a dead process is left
to say otherwise:

- PostgreSQL: a session-level *shared* advisory lock (several runners hold it at once) on a
  connection of the runner's own; ``pg_locks`` shows it to every role. The connection is
  checked every second and opened again, the lock taken again, after it was lost.
- SQLite: a shared ``flock`` on the file ``<database file>.projector-lock`` beside the
  database; the question tries an exclusive lock on it without waiting.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from typing import Any

import psycopg

from projections.db import Database
from service.database_url import sqlite_path
from service.logs import Throttled
from service.settings import Settings

log = logging.getLogger(f"vmledger.{__name__}")

# The advisory lock's key: any bigint no other lock of the database uses ("vmldgrPR"); in
# ``pg_locks`` its high half is ``classid``, its low half ``objid``, with ``objsubid`` 1.
ADVISORY_KEY = 0x766D6C6467725052
_RECHECK_S = 1.0
# What a 503 and the log say when the read models lag and no runner is there to catch them up
NO_RUNNER = ("no projection runner is running on this database: start `vmledger project`, "
             "or run serve with VMLEDGER_EMBEDDED_RUNNERS=true (docs/operations.md)")


def _lock_file(settings: Settings) -> str:
    return f"{sqlite_path(settings.database_url)}.projector-lock"


class ProjectorPresence:
    """The lock a projection runner holds while it runs (``start`` … ``stop``)."""

    def __init__(self, settings: Settings, connect_kwargs: dict[str, Any] | None = None):
        """``connect_kwargs``: psycopg's parameters for the lock's connection (PostgreSQL;
        the pool's, so every connection setting holds for it too)."""
        self.settings = settings
        self.connect_kwargs = connect_kwargs
        self._stop = threading.Event()
        self._file: int | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Take the lock (SQLite: at once; PostgreSQL: in a thread that keeps it)."""
        if self.settings.backend != "postgres":
            self._file = os.open(_lock_file(self.settings), os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._file, fcntl.LOCK_SH)  # waits only for a question's instant
            return
        self._thread = threading.Thread(target=self._hold, name="vmledger-projector-lock",
                                        daemon=True)
        self._thread.start()

    def _hold(self) -> None:
        failed = Throttled(log, "holding the projection runner's lock", level=logging.WARNING)
        params = {**(self.connect_kwargs or {}), "autocommit": True}
        while not self._stop.is_set():
            try:
                with psycopg.connect(**params) as connection:
                    connection.execute("SELECT pg_advisory_lock_shared(%s)", (ADVISORY_KEY,))
                    while not self._stop.wait(_RECHECK_S):
                        connection.execute("SELECT 1")  # a lost connection lost the lock
            except psycopg.Error as error:
                failed(error)
                self._stop.wait(_RECHECK_S)

    def stop(self) -> None:
        """Give the lock back."""
        self._stop.set()
        if self._file is not None:
            os.close(self._file)  # the flock ends with the descriptor
            self._file = None
        if self._thread is not None:
            self._thread.join(timeout=5.0)


def projector_running(settings: Settings, db: Database) -> bool:
    """Whether any process (this one too) holds a projection runner's lock on the database
    of ``settings`` (``db``: its read models' database, for PostgreSQL's question). Raises
    what the database raises."""
    if settings.backend == "postgres":
        with db.transaction(commit=False) as tx:
            tx.execute(
                "SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND classid::bigint = ? AND objid::bigint = ? AND objsubid = 1",
                (ADVISORY_KEY >> 32, ADVISORY_KEY & 0xFFFFFFFF))
            return int(tx.fetchone()["n"]) > 0  # type: ignore[index]
    try:
        probe = os.open(_lock_file(settings), os.O_RDONLY)
    except FileNotFoundError:
        return False  # no runner ever ran beside this database
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(probe)  # an exclusive lock taken is given back with the descriptor
    return False


# A read's 503 for want of a runner: one line every minute at most, however many reads wait
_UNPROJECTED = Throttled(log, "a read timed out waiting for the read models", interval_s=60.0,
                         level=logging.WARNING)


def why_reads_wait(services: Any) -> str:
    """What to add to a read's 503 when the read models did not catch up in time:
    ``NO_RUNNER`` (also logged, at most once a minute) when no projection runner runs on
    the database (``services``: the process's ``Services``), else nothing. A failure to ask
    is no answer: nothing is added."""
    try:
        running = services.projector_running()
    except Exception:  # noqa: BLE001 - the read's 503 stands on its own; the ping says more
        return ""
    if running:
        return ""
    _UNPROJECTED(NO_RUNNER)
    return f"; {NO_RUNNER}"


def warn_if_nothing_projects(services: Any) -> None:
    """At ``serve``'s start, when it runs no projection runner itself (the settings'
    choice: ``VMLEDGER_EMBEDDED_RUNNERS``, off by default on PostgreSQL): one warning if no
    runner runs on the database either, since every read will then answer 503. A failure
    to ask is left to the requests, which say it."""
    try:
        running = services.projector_running()
    except Exception:  # noqa: BLE001 - the database's failure is the reads' to answer
        return
    if not running:
        log.warning("serve runs no projection runner (VMLEDGER_EMBEDDED_RUNNERS is off) and "
                    "%s; until one runs, commands are accepted but every read answers 503 "
                    "and /ping answers 503 once the log holds events they lack", NO_RUNNER)
